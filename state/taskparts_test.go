package state

import "testing"

const goldenV10 = "testdata/snapshot-v10.bin"

// TestSnapshotGoldenV10 restores a snapshot written by the release that
// introduced format version 10 (tasks in parts). Never regenerate it to
// make this test pass. `go test -run 'GoldenV10$' -update` rewrites it
// (only when the file must be recreated).
func TestSnapshotGoldenV10(t *testing.T) {
	f := goldenSnapshot(t, goldenV10, 10, buildWorkerAddrFSM)
	if f.AppliedIndex() != 42 {
		t.Fatalf("applied %d, want 42", f.AppliedIndex())
	}
	checkPlacementBuilt(t, f)
}

// chunksFor leaves room for the ids of any records of that length: each
// rounded up to whole slots, and a chunk's unused end.
func TestChunksFor(t *testing.T) {
	for _, tc := range []struct{ count, l uint64 }{
		{1, 7}, {1, maxTaskRecord}, {partTasks, partTasks * 7}, {partTasks, partTasks * maxTaskRecord},
		{maxPartTasks, maxPartTasks * 6}, {300, 300 * (maxIDLen + 6)},
	} {
		// The worst case: ids as long as the records allow, each wasting
		// a slot but one byte, and chunks filled to a longest id short.
		idBytes := tc.l - tc.count*6 + tc.count*(slotBytes-1)
		perChunk := uint64(partChunk - maxIDLen - slotBytes)
		if need := int((idBytes + perChunk - 1) / perChunk); chunksFor(tc.count, tc.l) < need {
			t.Errorf("chunksFor(%d, %d) = %d, need %d", tc.count, tc.l, chunksFor(tc.count, tc.l), need)
		}
	}
}
