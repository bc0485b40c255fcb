package state

import (
	"os"
	"testing"
)

const goldenV11 = "testdata/snapshot-v11.bin"

// TestSnapshotGoldenV11 restores a snapshot written by the release that
// introduced format version 11 (tasks as they lie in memory), read and
// mapped. Never regenerate it to make this test pass. `go test -run
// 'GoldenV11$' -update` rewrites it (only when the file must be
// recreated).
func TestSnapshotGoldenV11(t *testing.T) {
	f := goldenSnapshot(t, goldenV11, 11, buildWorkerAddrFSM)
	if f.AppliedIndex() != 42 {
		t.Fatalf("applied %d, want 42", f.AppliedIndex())
	}
	checkPlacementBuilt(t, f)

	fh, err := os.Open(goldenV11)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	mapped := NewFSM("golden-cluster")
	if err := mapped.Restore(fileReader{fh}); err != nil {
		t.Fatal(err)
	}
	if mapped.tasks.mapped == nil {
		t.Fatal("the golden file was read, not mapped")
	}
	checkPlacementBuilt(t, mapped)
}

// A mapped task section cut short anywhere is refused, not read past.
func TestMappedTasksCutShort(t *testing.T) {
	r := newRegistry()
	for _, id := range []string{"a", "bb", "ccc"} {
		r.add(&Task{ID: id}, stateUnassigned)
	}
	good := mappedSection(t, r)
	for cut := 1; cut < len(good); cut++ {
		_, src, _, err := readMappedFile(t, good[:cut])
		if src.m == nil || err == nil {
			t.Fatalf("cut at %d of %d: mapped %v, error %v", cut, len(good), src.m != nil, err)
		}
	}
}
