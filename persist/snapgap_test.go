package persist

import (
	"testing"

	"github.com/hashicorp/raft"
)

// A log that ends before the newest snapshot (its last entries lost, a
// snapshot taken at the end) is emptied at open: raft appends the entry
// after the snapshot next, and a gap would wedge the node.
func TestLogBehindSnapshotStartsAfterIt(t *testing.T) {
	dir := nodeDir{last: 12, snapIndex: 20, snapTm: 3}.build(t)
	s := openT(t, dir, testOpts)
	if last, _ := s.Logs.LastIndex(); last != 0 {
		t.Fatalf("log ends at %d after open, want empty", last)
	}
	if err := s.Logs.StoreLogs([]*raft.Log{lostEntry(21), lostEntry(22)}); err != nil {
		t.Fatalf("append after the snapshot: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, testOpts)
	defer s.Close()
	first, _ := s.Logs.FirstIndex()
	last, _ := s.Logs.LastIndex()
	if first != 21 || last != 22 {
		t.Fatalf("reopened log holds %d..%d, want 21..22", first, last)
	}
}

// A log that reaches the snapshot keeps its entries.
func TestLogPastSnapshotIsKept(t *testing.T) {
	dir := nodeDir{last: 20, snapIndex: 16, snapTm: 3}.build(t)
	s := openT(t, dir, testOpts)
	defer s.Close()
	first, _ := s.Logs.FirstIndex()
	last, _ := s.Logs.LastIndex()
	if first != 1 || last != 20 {
		t.Fatalf("log holds %d..%d, want 1..20", first, last)
	}
}
