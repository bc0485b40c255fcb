package controller

import (
	"bytes"
	"testing"
	"time"

	"github.com/xce/xce/state"
)

// A phase is noted once, at its first end; phases list in the order they
// ended; a snapshot restore is listed only when it ended after the node
// started, with its duration.
func TestStartupPhases(t *testing.T) {
	start := time.Unix(1000, 0)
	s := &startup{start: start}
	s.markAt(PhaseListen, start.Add(5*time.Millisecond), 0)
	s.markAt(PhaseStorageOpen, start.Add(90*time.Millisecond), 0)
	s.markAt(PhaseListen, start.Add(time.Second), 0)
	s.markAt(PhaseFirstRole, start.Add(400*time.Millisecond), 0)
	got := s.list(state.NewFSM("c"))
	want := []string{PhaseListen, PhaseStorageOpen, PhaseFirstRole}
	if len(got) != len(want) {
		t.Fatalf("phases %+v", got)
	}
	for i, p := range got {
		if p.Name != want[i] {
			t.Fatalf("phase %d is %s, want %s (%+v)", i, p.Name, want[i], got)
		}
	}
	if got[0].At != 5*time.Millisecond {
		t.Fatalf("listen at %v, noted again later", got[0].At)
	}

	// A restore after the start is listed between the phases around it.
	fsm := state.NewFSM("c")
	snap := fsm.Snapshot()
	var buf bytes.Buffer
	if err := snap.Write(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	s = &startup{start: time.Now()}
	s.mark(PhaseListen)
	if err := fsm.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	s.mark(PhaseBackendStarted)
	got = s.list(fsm)
	if len(got) != 3 || got[1].Name != PhaseSnapshotRestore || got[1].Took <= 0 {
		t.Fatalf("with a restore: %+v", got)
	}
	if old := (&startup{start: time.Now().Add(time.Hour)}).list(fsm); len(old) != 0 {
		t.Fatalf("a restore before the node started is listed: %+v", old)
	}
}
