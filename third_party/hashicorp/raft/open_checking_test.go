package raft

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// OpenChecking's check passes for an intact snapshot however much of it
// the caller read, and fails for one whose state file changed after it
// was written.
func TestOpenChecking(t *testing.T) {
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
	state := make([]byte, 1<<20)
	for i := range state {
		state[i] = byte(i * 7)
	}
	if _, err := sink.Write(state); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	id := sink.ID()
	for _, read := range []int{0, 100, len(state)} {
		_, rc, check, err := store.OpenChecking(id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(rc, make([]byte, read)); err != nil {
			t.Fatal(err)
		}
		if err := check(); err != nil {
			t.Fatalf("intact, %d bytes read first: %v", read, err)
		}
		_ = rc.Close()
	}

	path := filepath.Join(dir, snapPath, id, stateFilePath)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 1<<19); err != nil {
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
		t.Fatal("a changed state file passed its check")
	}
	if _, _, err := store.Open(id); err == nil {
		t.Fatal("Open took the changed file")
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
