package state

import (
	"fmt"
	"testing"
)

func eventsString(es []TaskEvent) string {
	out := ""
	for _, e := range es {
		kind := "+"
		if e.Deleted {
			kind = "-"
		}
		out += fmt.Sprintf("%d%s%s ", e.Index, kind, e.Task.ID)
	}
	return out
}

// TestTaskHistory: creations and deletions in commit order from any index
// kept (a batch's events share its index and come together), a change
// channel per event, and a restore that sends watchers from before it
// back to a listing.
func TestTaskHistory(t *testing.T) {
	f := NewFSM("c")
	_, _, _, _, ch := f.TasksSince(0)
	apply(t, f, 1, submitCmd("", "", "a"))
	select {
	case <-ch:
	default:
		t.Fatal("no change signalled")
	}
	apply(t, f, 2, submitCmd("", "", "b"))
	apply(t, f, 3, deleteCmd("", "", "a"))
	apply(t, f, 4, deleteCmd("", "", "zz")) // not found: no event
	es, applied, ok, _, _ := f.TasksSince(0)
	if got := eventsString(es); !ok || applied != 4 || got != "1+a 2+b 3-a " {
		t.Fatalf("since 0: %q applied %d ok %v", got, applied, ok)
	}
	if es, _, _, _, _ := f.TasksSince(2); eventsString(es) != "3-a " {
		t.Fatalf("since 2: %q", eventsString(es))
	}
	snap := persistSnapshot(t, f)
	apply(t, f, 5, submitCmd("", "", "c"))
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	if _, _, ok, compacted, _ := f.TasksSince(2); ok || compacted != 4 {
		t.Fatalf("since 2 after a restore at 4: ok %v compacted %d", ok, compacted)
	}
	if es, _, ok, _, _ := f.TasksSince(4); !ok || len(es) != 0 {
		t.Fatalf("since 4 after the restore: %v %v", es, ok)
	}
}

// TestTaskHistoryBound: the history keeps at most HistoryTaskEvents
// events; older indexes are compacted.
func TestTaskHistoryBound(t *testing.T) {
	f := NewFSM("c")
	n := uint64(HistoryTaskEvents + 10)
	for i := range n {
		c := submitCmd("", "", fmt.Sprintf("t%d", i))
		f.Apply(i+1, 1, c.Encode())
	}
	es, _, ok, compacted, _ := f.TasksSince(compactedProbe(f))
	if !ok || len(es) > HistoryTaskEvents || es[len(es)-1].Index != n {
		t.Fatalf("%d events (ok %v, compacted %d), last %v", len(es), ok, compacted, es[len(es)-1])
	}
	if _, _, ok, _, _ := f.TasksSince(1); ok {
		t.Fatal("index 1 still kept")
	}
}

func compactedProbe(f *FSM) uint64 {
	_, _, _, c, _ := f.TasksSince(0)
	return c
}
