package state

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkRestoreFile restores the snapshot in $XCE_SNAPSHOT_FILE (a
// node's snapshots/<id>/state.bin) into an FSM of $XCE_CLUSTER_ID: what a
// restart's restore costs on a real registry. Skipped without the file.
func BenchmarkRestoreFile(b *testing.B) {
	path := os.Getenv("XCE_SNAPSHOT_FILE")
	if path == "" {
		b.Skip("XCE_SNAPSHOT_FILE names no snapshot")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := NewFSM(os.Getenv("XCE_CLUSTER_ID")).Restore(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
