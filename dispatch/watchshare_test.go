package dispatch

import (
	"testing"

	"github.com/xce/xce/state"
)

// TestWatchCache: a generation's message and a full copy are built once for
// every watcher; a full copy is rebuilt once the assignment changed; the
// cache keeps the last watchCacheGenerations generations.
func TestWatchCache(t *testing.T) {
	var wc watchCache
	g := state.GenerationChange{Generation: 7, Index: 40, Set: []state.Placement{{Task: "a", Active: "w1", Epoch: 2}}}
	p1, err := wc.delta(g)
	if err != nil {
		t.Fatal(err)
	}
	if p2, _ := wc.delta(g); p2 != p1 {
		t.Fatal("generation 7 built twice")
	}
	reads := 0
	read := func(ver uint64) func() (uint64, uint64, map[string]state.Placement) {
		return func() (uint64, uint64, map[string]state.Placement) {
			reads++
			return 7, ver, map[string]state.Placement{"a": {Task: "a", Active: "w1", Epoch: 2}}
		}
	}
	for range 3 {
		if gen, pages, err := wc.full(5, read(5)); err != nil || gen != 7 || len(pages) != 1 {
			t.Fatalf("full copy: generation %d, %d pages, %v", gen, len(pages), err)
		}
	}
	if reads != 1 {
		t.Fatalf("the assignment was read %d times for one version", reads)
	}
	if _, _, err := wc.full(6, read(6)); err != nil || reads != 2 {
		t.Fatalf("a newer version: %d reads, %v", reads, err)
	}
	for gen := uint64(8); gen < 8+watchCacheGenerations; gen++ {
		if _, err := wc.delta(state.GenerationChange{Generation: gen, Index: gen * 10}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := wc.gens[7]; ok || len(wc.gens) != watchCacheGenerations {
		t.Fatalf("%d generations kept, generation 7 among them: %v", len(wc.gens), ok)
	}
}
