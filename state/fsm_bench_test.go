package state

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// BenchmarkSnapshot is the part of a snapshot that runs while Apply waits:
// FSM.Snapshot on a registry of 200,000 tasks whose events are published
// (an empty outbox), with a full dedup table. Its allocation is what the
// garbage collector must absorb at once.
func BenchmarkSnapshot(b *testing.B) {
	f := NewFSM("c")
	for i := range 200_000 {
		apply(b, f, uint64(i+1), submitCmd("bench-c", fmt.Sprint(i), fmt.Sprintf("task-%07d", i)))
	}
	apply(b, f, 200_001, trimCmd(200_000))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.Snapshot().Release()
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

// registryFSM returns an FSM holding n tasks submitted in n entries, with
// ids shaped like the bench's (a prefix, a writer, a sequence number) and
// every event published.
func registryFSM(b testing.TB, n int) *FSM {
	f := NewFSM("c")
	for i := range n {
		apply(b, f, uint64(i+1), submitCmd("", "", fmt.Sprintf("b5f3a9c1e-%d-%d", i%64, i/64)))
	}
	apply(b, f, uint64(n+1), trimCmd(uint64(n)))
	return f
}

// BenchmarkRegistryHeap reports the live heap per task of a registry of a
// million tasks, ids included (the dedup table, outbox and assignment are
// empty).
func BenchmarkRegistryHeap(b *testing.B) {
	const n = 1_000_000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f := registryFSM(b, n)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/task")
		b.ReportMetric(float64(after.HeapObjects-before.HeapObjects)/n, "objects/task")
		runtime.KeepAlive(f)
	}
}

// BenchmarkSnapshotRoundTrip writes a million-task snapshot and restores
// it: what a node pays to persist its state and to come back from it.
func BenchmarkSnapshotRoundTrip(b *testing.B) {
	f := registryFSM(b, 1_000_000)
	var buf bytes.Buffer
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			buf.Reset()
			s := f.Snapshot()
			if err := s.Write(&buf); err != nil {
				b.Fatal(err)
			}
			s.Release()
		}
		b.ReportMetric(float64(buf.Len()), "bytes")
	})
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			if err := NewFSM("c").Restore(bytes.NewReader(buf.Bytes())); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkApplySubmit is one submit applied to a registry of a million
// tasks, with a request id (so the dedup table works too) and the outbox
// trimmed as a publisher would.
func BenchmarkApplySubmit(b *testing.B) {
	f := registryFSM(b, 1_000_000)
	idx := uint64(1_000_001)
	b.ReportAllocs()
	for b.Loop() {
		idx++
		apply(b, f, idx, submitCmd("bench-c", fmt.Sprint(idx), fmt.Sprintf("b5f3a9c1e-%d-%d", idx%64, idx/64+1_000_000)))
		if idx%1024 == 0 {
			idx++
			apply(b, f, idx, trimCmd(idx-1))
		}
	}
}

// BenchmarkApplyBatch is one batch entry of 32 submits with request ids,
// as a PRIMARY under load writes them, applied to a registry of a million
// tasks: what a restart's replay and a follower's catch-up apply.
func BenchmarkApplyBatch(b *testing.B) {
	f := registryFSM(b, 1_000_000)
	idx := uint64(1_000_001)
	seq := 0
	b.ReportAllocs()
	for b.Loop() {
		idx++
		cmds := make([][]byte, 32)
		for i := range cmds {
			seq++
			c := submitCmd("bench-c", fmt.Sprint(seq), fmt.Sprintf("b5f3a9c1e-%d-%d", seq%64, seq/64+1_000_000))
			cmds[i] = c.Encode()
		}
		applyEntry(f, Entry{Index: idx, Data: EncodeBatch(cmds)})
		if idx%32 == 0 {
			idx++
			apply(b, f, idx, trimCmd(idx-1))
		}
	}
}
