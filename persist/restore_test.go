package persist

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Open hands the newest raft snapshot to RestoreSnapshot while it checks
// the log and says what came of it: the snapshot it restored, or why not.
func TestRestoreSnapshotWhileOpening(t *testing.T) {
	dir := nodeDir{last: 30, snapIndex: 20, snapTm: 2}.build(t)
	var got []byte
	opts := testOpts
	opts.RestoreSnapshot = func(rc io.ReadCloser, _ int64) error {
		b, err := io.ReadAll(rc)
		got = b
		return err
	}
	s := openT(t, dir, opts)
	if s.Restored == nil || s.Restored.Index != 20 || s.RestoreErr != nil || string(got) != "state" {
		t.Fatalf("restored %+v (%v), read %q", s.Restored, s.RestoreErr, got)
	}
	s.Close()

	refused := errors.New("not this cluster's")
	opts.RestoreSnapshot = func(rc io.ReadCloser, _ int64) error { return refused }
	s = openT(t, dir, opts)
	if s.Restored != nil || !errors.Is(s.RestoreErr, refused) {
		t.Fatalf("a failed restore: restored %+v, %v", s.Restored, s.RestoreErr)
	}
	s.Close()

	// A state file changed after it was written: the restore read it,
	// but its checksum fails, so Open says it restored nothing (and raft
	// restores the snapshots itself, checking first).
	damaged := nodeDir{last: 30, snapIndex: 20, snapTm: 2}.build(t)
	states, err := filepath.Glob(filepath.Join(damaged, snapDir, "snapshots", "*", "state.bin"))
	if err != nil || len(states) != 1 {
		t.Fatalf("state files %v, %v", states, err)
	}
	if err := os.WriteFile(states[0], []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	got = nil
	opts.RestoreSnapshot = func(rc io.ReadCloser, _ int64) error {
		b, err := io.ReadAll(rc)
		got = b
		return err
	}
	s = openT(t, damaged, opts)
	if s.Restored != nil || s.RestoreErr == nil || !strings.Contains(s.RestoreErr.Error(), "CRC") || string(got) != "stale" {
		t.Fatalf("a damaged snapshot: restored %+v, %v (read %q)", s.Restored, s.RestoreErr, got)
	}
	s.Close()

	// No snapshot: nothing to restore, nothing said.
	called := false
	opts.RestoreSnapshot = func(rc io.ReadCloser, _ int64) error { called = true; return nil }
	s = openT(t, nodeDir{last: 8}.build(t), opts)
	if called || s.Restored != nil || s.RestoreErr != nil {
		t.Fatalf("no snapshot: called %v, restored %+v, %v", called, s.Restored, s.RestoreErr)
	}
	s.Close()
}

// PrepareRestore is called with the snapshot's size before the restore
// starts, and what it returns once the restore is done, whatever its
// outcome; without a snapshot to restore it is not called.
func TestPrepareRestore(t *testing.T) {
	dir := nodeDir{last: 30, snapIndex: 20, snapTm: 2}.build(t)
	for _, fail := range []bool{false, true} {
		var events []string
		opts := testOpts
		opts.PrepareRestore = func(size int64) func() {
			events = append(events, fmt.Sprintf("prepare %d", size))
			return func() { events = append(events, "release") }
		}
		opts.RestoreSnapshot = func(rc io.ReadCloser, _ int64) error {
			events = append(events, "restore")
			if fail {
				return errors.New("refused")
			}
			_, err := io.ReadAll(rc)
			return err
		}
		s := openT(t, dir, opts)
		s.Close()
		if want := []string{"prepare 5", "restore", "release"}; !slices.Equal(events, want) {
			t.Fatalf("failing restore %v: %v, want %v", fail, events, want)
		}
	}
	called := false
	opts := testOpts
	opts.PrepareRestore = func(int64) func() { called = true; return func() {} }
	opts.RestoreSnapshot = func(io.ReadCloser, int64) error { return nil }
	openT(t, nodeDir{last: 8}.build(t), opts).Close()
	if called {
		t.Fatal("prepared a restore without a snapshot")
	}
}
