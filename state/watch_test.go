package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
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
// at each generation; each generation carries the time this node applied
// it.
func TestAssignmentHistory(t *testing.T) {
	f := NewFSM("c")
	base := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	ticks := 0
	f.hist.now = func() time.Time { ticks++; return base.Add(time.Duration(ticks) * time.Millisecond) }
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
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
		{Generation: 1, Index: 4, Set: []Placement{epoched(Placement{Task: "a", Active: "w1"}, 1), epoched(Placement{Task: "b", Active: "w2"}, 1)}, AppliedAt: at(1)},
		{Generation: 2, Index: 5, Set: []Placement{epoched(Placement{Task: "a", Active: "w2", Standbys: []string{"w1"}}, 2)}, Removed: []string{"b"}, AppliedAt: at(2)},
		{Generation: 3, Index: 8, Removed: []string{"a"}, AppliedAt: at(3)},
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
	if gen, _, a := f.AssignmentCopy(); gen != 3 || len(a) != 0 {
		t.Fatalf("full copy: %d %v", gen, a)
	}
}

// TestAssignmentHistoryBounds: the history keeps at most
// HistoryGenerations generations, with their apply times; an older one
// means a full copy.
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
	// The apply times go with their generations: as many as are kept.
	if len(f.hist.gens) != HistoryGenerations || f.hist.gens[0].AppliedAt.IsZero() {
		t.Fatalf("history holds %d generations, the oldest stamped %v", len(f.hist.gens), f.hist.gens[0].AppliedAt)
	}
}

// TestAssignmentHistoryAppliedAt: with the real clock, each generation is
// stamped when this node applies it, in apply order; the stamps are the
// node's own (a snapshot does not carry them: after a restore the history
// starts again and the next generation gets the restoring node's time).
func TestAssignmentHistoryAppliedAt(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, submitCmd("", "", "a"))
	before := time.Now()
	apply(t, f, 2, assignCmd(0, []Placement{{Task: "a", Active: "w1"}}))
	apply(t, f, 3, assignCmd(1, []Placement{{Task: "a", Active: "w2"}}))
	after := time.Now()
	cs, _, ok, _ := f.AssignmentSince(0)
	if !ok || len(cs) != 2 {
		t.Fatalf("since 0: %v %v", generations(cs), ok)
	}
	for _, c := range cs {
		if c.AppliedAt.Before(before) || c.AppliedAt.After(after) {
			t.Errorf("generation %d applied at %v, want within [%v, %v]", c.Generation, c.AppliedAt, before, after)
		}
	}
	if cs[1].AppliedAt.Before(cs[0].AppliedAt) {
		t.Errorf("generation 2 stamped %v, before generation 1's %v", cs[1].AppliedAt, cs[0].AppliedAt)
	}
	snap := persistSnapshot(t, f)
	g := NewFSM("c")
	if err := restoreBytes(g, snap); err != nil {
		t.Fatal(err)
	}
	restored := time.Now()
	apply(t, g, 4, assignCmd(2, []Placement{{Task: "a", Active: "w1"}}))
	cs, _, ok, _ = g.AssignmentSince(2)
	if !ok || len(cs) != 1 || cs[0].AppliedAt.Before(restored) {
		t.Fatalf("after a restore: %v %v", cs, ok)
	}
}
