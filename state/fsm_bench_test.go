package state

import (
	"fmt"
	"testing"
)

// BenchmarkSnapshot is the part of a snapshot that runs while Apply waits:
// FSM.Snapshot on a registry of 200,000 tasks whose events are published
// (an empty outbox). Its allocation is what the garbage collector must
// absorb at once.
func BenchmarkSnapshot(b *testing.B) {
	f := NewFSM("c")
	for i := range 200_000 {
		apply(b, f, uint64(i+1), submitCmd("", "", fmt.Sprintf("task-%07d", i)))
	}
	apply(b, f, 200_001, trimCmd(200_000))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.Snapshot()
	}
}
