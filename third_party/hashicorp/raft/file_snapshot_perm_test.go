package raft

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Snapshot directories are created 0700 and their files 0600; a snapshot
// directory an older version left more open is narrowed.
func TestFileSS_OwnerOnlyPermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no unix permissions")
	}
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, snapPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(base, snapPath), 0o755); err != nil {
		t.Fatal(err)
	}
	snap, err := NewFileSnapshotStoreWithLogger(base, 2, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, trans := NewInmemTransport(NewInmemAddr())
	sink, err := snap.Create(SnapshotVersionMax, 10, 3, Configuration{}, 2, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(filepath.Join(base, snapPath), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := snapshotFileMode
		if d.IsDir() {
			want = snapshotDirMode
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 { // snapshots/, the snapshot's directory, meta.json, state.bin
		t.Errorf("walked %d entries, want 4", n)
	}
}
