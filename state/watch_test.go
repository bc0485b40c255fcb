package state

import (
	"fmt"
	"slices"
	"testing"
)

func generations(cs []GenerationChange) []uint64 {
	var out []uint64
	for _, c := range cs {
		out = append(out, c.Generation)
	}
	return out
}

// TestAssignmentHistory: a watcher resuming from any kept generation gets
// exactly the later ones, with epochs, and deletions since the previous
// generation arrive with the next one; a restore or a generation older
// than the history sends it back to a full copy; the change channel fires
// at each generation.
func TestAssignmentHistory(t *testing.T) {
	f := NewFSM("c")
	for i, id := range []string{"a", "b", "c"} {
		apply(t, f, uint64(i+1), submitCmd("", "", id))
	}
	if cs, cur, ok, _ := f.AssignmentSince(0); !ok || cur != 0 || len(cs) != 0 {
		t.Fatalf("before any generation: %v %d %v", cs, cur, ok)
	}
	_, _, _, ch := f.AssignmentSince(0)
	apply(t, f, 4, assignCmd(0, []Placement{{Task: "a", Active: "w1"}, {Task: "b", Active: "w2"}}))
	select {
	case <-ch:
	default:
		t.Fatal("no change signalled at generation 1")
	}
	apply(t, f, 5, assignCmd(1, []Placement{{Task: "a", Active: "w2", Standbys: []string{"w1"}}}, "b"))
	apply(t, f, 6, deleteCmd("", "", "a"))
	apply(t, f, 7, deleteCmd("", "", "c")) // never placed: nothing to remove
	if n := f.DeletedSinceGeneration(); n != 1 {
		t.Fatalf("deleted since the generation: %d, want 1", n)
	}
	apply(t, f, 8, assignCmd(2, nil))

	cs, cur, ok, _ := f.AssignmentSince(0)
	if !ok || cur != 3 || !slices.Equal(generations(cs), []uint64{1, 2, 3}) {
		t.Fatalf("since 0: %v, %d, %v", generations(cs), cur, ok)
	}
	want := []GenerationChange{
		{Generation: 1, Index: 4, Set: []Placement{epoched(Placement{Task: "a", Active: "w1"}, 1), epoched(Placement{Task: "b", Active: "w2"}, 1)}},
		{Generation: 2, Index: 5, Set: []Placement{epoched(Placement{Task: "a", Active: "w2", Standbys: []string{"w1"}}, 2)}, Removed: []string{"b"}},
		{Generation: 3, Index: 8, Removed: []string{"a"}},
	}
	if got, w := fmt.Sprint(cs), fmt.Sprint(want); got != w {
		t.Fatalf("changes\n got %s\nwant %s", got, w)
	}
	if cs, _, ok, _ := f.AssignmentSince(2); !ok || !slices.Equal(generations(cs), []uint64{3}) {
		t.Fatalf("since 2: %v %v", generations(cs), ok)
	}
	if cs, _, ok, _ := f.AssignmentSince(3); !ok || len(cs) != 0 {
		t.Fatalf("since 3: %v %v", cs, ok)
	}
	if _, _, ok, _ := f.AssignmentSince(4); ok {
		t.Fatal("since a generation ahead: ok")
	}

	snap := persistSnapshot(t, f)
	_, _, _, ch = f.AssignmentSince(3)
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("no change signalled at the restore")
	}
	if _, _, ok, _ := f.AssignmentSince(2); ok {
		t.Fatal("since 2 after a restore: ok, want a full copy")
	}
	if gen, a, _ := f.AssignmentWatch(); gen != 3 || len(a) != 0 {
		t.Fatalf("full copy: %d %v", gen, a)
	}
}

// TestAssignmentHistoryBounds: the history keeps at most
// HistoryGenerations generations; an older one means a full copy.
func TestAssignmentHistoryBounds(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, submitCmd("", "", "a"))
	for g := range uint64(HistoryGenerations + 10) {
		w := fmt.Sprint("w", g%2)
		apply(t, f, g+2, assignCmd(g, []Placement{{Task: "a", Active: w}}))
	}
	cur := uint64(HistoryGenerations + 10)
	if _, _, ok, _ := f.AssignmentSince(5); ok {
		t.Fatal("a generation older than the history: ok")
	}
	cs, _, ok, _ := f.AssignmentSince(cur - HistoryGenerations)
	if !ok || len(cs) != HistoryGenerations || cs[0].Generation != cur-HistoryGenerations+1 {
		t.Fatalf("the oldest kept: %d changes, ok %v", len(cs), ok)
	}
}
