package state

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// Every snapshot version names its cluster; what is not a snapshot is
// refused.
func TestSnapshotClusterID(t *testing.T) {
	for _, path := range []string{goldenV1, goldenV2, goldenV3, goldenV4, goldenV5} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		id, err := SnapshotClusterID(bytes.NewReader(b))
		if err != nil || id == "" {
			t.Errorf("%s: %q, %v", path, id, err)
		}
	}
	if _, err := SnapshotClusterID(bytes.NewReader([]byte("not a snapshot"))); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("garbage: %v", err)
	}
}

// Rebase moves the state to another cluster and a later index, which its
// snapshot carries and a node of that cluster restores; it never moves
// back.
func TestRebase(t *testing.T) {
	f := NewFSM("old")
	c := Command{Type: CmdSubmitTask, Task: Task{ID: "a"}}
	f.Apply(7, 1, c.Encode())
	if err := f.Rebase("new", 6); err == nil {
		t.Error("rebased below the applied index")
	}
	if err := f.Rebase("new", 100); err != nil {
		t.Fatal(err)
	}
	s := f.Snapshot()
	if s.AppliedIndex() != 100 {
		t.Errorf("snapshot at %d, want 100", s.AppliedIndex())
	}
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := NewFSM("old").Restore(bytes.NewReader(b.Bytes())); err == nil {
		t.Error("the old cluster restored the rebased snapshot")
	}
	g := NewFSM("new")
	if err := g.Restore(bytes.NewReader(b.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Task("a"); !ok || g.AppliedIndex() != 100 {
		t.Errorf("restored: task a %v, applied %d", ok, g.AppliedIndex())
	}
}
