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

// BenchmarkTasksPage is one ListTasks page of 100 tasks from the middle of
// the registry while writes change the task set between pages: its cost
// follows the page, not the registry.
func BenchmarkTasksPage(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			f := NewFSM("c")
			for i := range n {
				apply(b, f, uint64(i+1), submitCmd("", "", fmt.Sprintf("task-%07d", i)))
			}
			idx := uint64(n)
			after := fmt.Sprintf("task-%07d", n/2)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				idx++
				apply(b, f, idx, submitCmd("", "", fmt.Sprintf("new-%09d", idx)))
				if page, _ := f.Tasks(after, 100); len(page) != 100 {
					b.Fatalf("page of %d", len(page))
				}
			}
		})
	}
}
