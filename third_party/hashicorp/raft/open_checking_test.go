package raft

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// OpenChecking's check passes for an intact snapshot however much of it
// the caller read, and fails for one whose state file changed after it
// was written; so does Open. New snapshots carry the CRC-32 pair, and
// older ones, with a CRC-64, are checked by it.
func TestOpenChecking(t *testing.T) {
	state := make([]byte, 1<<20)
	for i := range state {
		state[i] = byte(i * 7)
	}
	for _, older := range []bool{false, true} {
		dir := t.TempDir()
		store, err := NewFileSnapshotStoreWithLogger(dir, 2, newTestLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		_, trans := NewInmemTransport(NewInmemAddr())
		sink, err := store.Create(SnapshotVersionMax, 10, 3, Configuration{}, 2, trans)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write(state); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
		id := sink.ID()
		meta, err := store.readMeta(id)
		if err != nil {
			t.Fatal(err)
		}
		want := binary.BigEndian.AppendUint32(nil, crc32.Checksum(state, crc32.MakeTable(crc32.Castagnoli)))
		want = binary.BigEndian.AppendUint32(want, crc32.ChecksumIEEE(state))
		if meta.CRC != nil || !bytes.Equal(meta.CRC32, want) {
			t.Fatalf("meta holds CRC %x, CRC32 %x; want no CRC and CRC32 %x", meta.CRC, meta.CRC32, want)
		}
		if older {
			// As a snapshot written before CRC32 holds it.
			meta.CRC = binary.BigEndian.AppendUint64(nil, crc64.Checksum(state, crc64.MakeTable(crc64.ECMA)))
			meta.CRC32 = nil
			b, err := json.Marshal(meta)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, snapPath, id, metaFilePath), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		checkSnapshot(t, store, id, len(state), older)
	}
}

// checkSnapshot opens snapshot id of a state file of size bytes, both
// ways, then changes a byte of it, which both ways must refuse.
func checkSnapshot(t *testing.T, store *FileSnapshotStore, id string, size int, older bool) {
	t.Helper()
	for _, read := range []int{0, 100, size} {
		_, rc, check, err := store.OpenChecking(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(rc, make([]byte, read)); err != nil {
			t.Fatal(err)
		}
		if err := check(); err != nil {
			t.Fatalf("older %v: intact, %d bytes read first: %v", older, read, err)
		}
		_ = rc.Close()
	}
	_, rc, err := store.Open(id)
	if err != nil {
		t.Fatalf("older %v: Open: %v", older, err)
	}
	_ = rc.Close()

	path := filepath.Join(store.path, id, stateFilePath)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, int64(size/2)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_, rc, check, err := store.OpenChecking(id)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, bufio.NewReader(rc)); err != nil {
		t.Fatal(err)
	}
	if err := check(); err == nil {
		t.Fatalf("older %v: a changed state file passed its check", older)
	}
	if _, _, err := store.Open(id); err == nil {
		t.Fatalf("older %v: Open took the changed file", older)
	}
}

// Closing the reader without a check stops the check's goroutine: nothing
// of it outlives Close.
func TestOpenCheckingCloseStops(t *testing.T) {
	dir := t.TempDir()
	store, err := NewFileSnapshotStoreWithLogger(dir, 2, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, trans := NewInmemTransport(NewInmemAddr())
	sink, err := store.Create(SnapshotVersionMax, 10, 3, Configuration{}, 2, trans)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, _, err := store.OpenChecking(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rc.(*checkingFile).c.done:
	default:
		t.Fatal("the check's goroutine runs on after Close")
	}
}

// Both readers hand over the state file, at its start.
func TestSnapshotFile(t *testing.T) {
	dir := t.TempDir()
	store, err := NewFileSnapshotStoreWithLogger(dir, 2, newTestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, trans := NewInmemTransport(NewInmemAddr())
	sink, err := store.Create(SnapshotVersionMax, 10, 3, Configuration{}, 2, trans)
	if err != nil {
		t.Fatal(err)
	}
	state := []byte("the state machine's bytes")
	if _, err := sink.Write(state); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, opened, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	_, checking, check, err := store.OpenChecking(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer checking.Close()
	for _, rc := range []io.ReadCloser{opened, checking} {
		f, ok := rc.(interface{ SnapshotFile() *os.File })
		if !ok {
			t.Fatalf("%T hands over no file", rc)
		}
		got, err := io.ReadAll(f.SnapshotFile())
		if err != nil || string(got) != string(state) {
			t.Fatalf("%T's file holds %q (%v), want %q", rc, got, err, state)
		}
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
}
