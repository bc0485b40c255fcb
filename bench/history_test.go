package bench

import (
	"sync"
	"testing"
)

// TestHistoryKeepsEveryOp: ops added from many goroutines across chunk
// boundaries all come back, each client's in the order it added them.
func TestHistoryKeepsEveryOp(t *testing.T) {
	const clients, per = 8, 3*historyChunk + 17
	var h History
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Go(func() {
			for i := 0; i < per; i++ {
				h.Add(Op{Client: c, Index: uint64(i)})
			}
		})
	}
	wg.Wait()
	ops := h.Ops()
	if len(ops) != clients*per {
		t.Fatalf("got %d ops, want %d", len(ops), clients*per)
	}
	next := make([]uint64, clients)
	for _, op := range ops {
		if op.Index != next[op.Client] {
			t.Fatalf("client %d: op %d came back after op %d", op.Client, op.Index, next[op.Client])
		}
		next[op.Client]++
	}
	if len(h.chunks) != (clients*per+historyChunk-1)/historyChunk {
		t.Errorf("%d chunks for %d ops", len(h.chunks), len(ops))
	}
}
