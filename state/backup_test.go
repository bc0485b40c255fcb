package state

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"
)

// Every snapshot version names its cluster; what is not a snapshot is
// refused.
func TestSnapshotClusterID(t *testing.T) {
	for _, path := range []string{goldenV1, goldenV2, goldenV3, goldenV4, goldenV5, goldenV6} {
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

// Rebase moves the state to another cluster, a later index and the new
// cluster's members, which its snapshot carries and a node of that cluster
// restores; it never moves back.
func TestRebase(t *testing.T) {
	f := NewFSM("old")
	c := Command{Type: CmdSubmitTask, Task: Task{ID: "a"}}
	f.Apply(7, 1, c.Encode())
	old, _ := EncodeSetMember(MemberRecord{ID: "n1", PeerAddr: "10.0.0.1:7201", ClientAddr: "10.0.0.1:7101"})
	f.Apply(8, 1, old)
	members := []MemberRecord{{ID: "n1", PeerAddr: "10.0.1.1:7201", ClientAddr: "10.0.1.1:7101"}}
	if err := f.Rebase("new", 6, members); err == nil {
		t.Error("rebased below the applied index")
	}
	if err := f.Rebase("new", 100, []MemberRecord{{ID: "n1"}}); err == nil {
		t.Error("rebased with a member without addresses")
	}
	if err := f.Rebase("new", 100, members); err != nil {
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
	if got := g.Members(); !reflect.DeepEqual(got, members) {
		t.Errorf("restored members %+v, want the new cluster's %+v", got, members)
	}
}
