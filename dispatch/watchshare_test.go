package dispatch

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	xcev1 "github.com/xce/xce/proto/xce/v1"
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
	if p2, _ := wc.delta(g); len(p2) != 1 || p2[0] != p1[0] {
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

// TestWatchPages: a generation larger than watchPage goes in parts of at
// most watchPage placements and removals, placements first, each part
// but the last saying more, and the parts decode to the generation whole.
func TestWatchPages(t *testing.T) {
	for _, tc := range []struct{ set, removed, parts int }{
		{0, 0, 1},
		{1, 0, 1},
		{0, 3, 1},
		{watchPage, 0, 1},
		{watchPage + 1, 0, 2},
		{watchPage - 1, 2, 2},
		{2 * watchPage, watchPage, 3},
		{10, 3*watchPage + 7, 4},
	} {
		t.Run(fmt.Sprintf("%d+%d", tc.set, tc.removed), func(t *testing.T) {
			g := state.GenerationChange{Generation: 9, Index: 90}
			for i := range tc.set {
				g.Set = append(g.Set, state.Placement{Task: fmt.Sprintf("s%06d", i), Active: "w1", Epoch: 1})
			}
			for i := range tc.removed {
				g.Removed = append(g.Removed, fmt.Sprintf("r%06d", i))
			}
			var wc watchCache
			ps, err := wc.delta(g)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != tc.parts {
				t.Fatalf("%d parts, want %d", len(ps), tc.parts)
			}
			var set, removed []string
			for i, p := range ps {
				var m xcev1.WatchAssignmentResponse
				if err := proto.Unmarshal(p.bytes, &m); err != nil {
					t.Fatal(err)
				}
				if n := len(m.Tasks) + len(m.Removed); n > watchPage {
					t.Fatalf("part %d carries %d entries", i, n)
				}
				if m.More != (i < len(ps)-1) || m.Generation != 9 || m.Index != 90 || m.Full {
					t.Fatalf("part %d: more %v, generation %d, index %d, full %v", i, m.More, m.Generation, m.Index, m.Full)
				}
				for _, tp := range m.Tasks {
					set = append(set, tp.TaskId)
				}
				removed = append(removed, m.Removed...)
			}
			var wantSet []string
			for _, p := range g.Set {
				wantSet = append(wantSet, p.Task)
			}
			if !slices.Equal(set, wantSet) || !slices.Equal(removed, g.Removed) {
				t.Fatalf("the parts carry %d placements and %d removals, want %d and %d", len(set), len(removed), len(wantSet), len(g.Removed))
			}
		})
	}
}
