package persist

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/testutil"
)

// flakyStable fails its writes with err while it is set.
type flakyStable struct {
	raft.StableStore
	mu  sync.Mutex
	err error
}

func (f *flakyStable) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *flakyStable) Set(k, v []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	return f.StableStore.Set(k, v)
}

func (f *flakyStable) SetUint64(k []byte, v uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	return f.StableStore.SetUint64(k, v)
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

var (
	errFull = &os.PathError{Op: "write", Path: "raft.db", Err: syscall.ENOSPC}
	errIO   = &os.PathError{Op: "write", Path: "raft.db", Err: syscall.EIO}
)

// TestHealthOfTheStableStore: a full disk is recoverable and ends with the
// next successful write; another failure lasts, saying what to do. One log
// line per change.
func TestHealthOfTheStableStore(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	h := newHealth(bufLogger(logs))
	fake := &flakyStable{StableStore: raft.NewInmemStore()}
	st := &stableStore{StableStore: fake, h: h, path: "/d/raft.db"}
	s := &Store{health: h}

	if got := s.Health(); got.Err != nil || got.Since.IsZero() {
		t.Fatalf("new: %+v", got)
	}
	ch := s.HealthChanged()
	fake.setErr(errFull)
	err := st.SetUint64([]byte("CurrentTerm"), 2)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "/d/raft.db") {
		t.Fatalf("Set on a full disk: %v", err)
	}
	if got := s.Health(); !errors.Is(got.Err, syscall.ENOSPC) || !got.Recoverable {
		t.Fatalf("after a full disk: %+v", got)
	}
	if !closed(ch) {
		t.Fatal("HealthChanged not closed on failing")
	}
	ch = s.HealthChanged()
	st.Set([]byte("k"), []byte("v")) // fails again: no change
	if closed(ch) {
		t.Fatal("a second failure changed Health")
	}
	fake.setErr(nil)
	if err := st.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := s.Health(); got.Err != nil || !closed(ch) {
		t.Fatalf("after a successful write: %+v (changed %v)", got, closed(ch))
	}

	ch = s.HealthChanged()
	fake.setErr(errIO)
	st.Set([]byte("k"), []byte("v"))
	fake.setErr(nil)
	st.Set([]byte("k"), []byte("v"))
	got := s.Health()
	if !errors.Is(got.Err, syscall.EIO) || got.Recoverable || !strings.Contains(got.Err.Error(), restartAdvice) || !closed(ch) {
		t.Fatalf("after an I/O error and a success: %+v", got)
	}

	out := logs.String()
	if n := strings.Count(out, "storage failing"); n != 2 {
		t.Fatalf("%d failing lines, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "storage recovered"); n != 1 {
		t.Fatalf("%d recovered lines, want 1:\n%s", n, out)
	}
	for _, w := range []string{"file=/d/raft.db", "recovers_by_itself=true", "recovers_by_itself=false", "no space left on device"} {
		if !strings.Contains(out, w) {
			t.Fatalf("log lacks %q:\n%s", w, out)
		}
	}
}

// TestHealthSourcesAreSeparate: one part working does not hide another
// that fails; a lasting failure replaces a recoverable one.
func TestHealthSourcesAreSeparate(t *testing.T) {
	h := newHealth(bufLogger(io.Discard))
	h.failed(srcStable, "raft.db", errFull, true)
	h.ok(srcLog, h.begin())
	h.ok(srcSnap, h.begin())
	if h.get().Err == nil {
		t.Fatal("a log write cleared a stable store failure")
	}
	// An outcome that began before a failure does not clear it.
	gen := h.begin()
	h.failed(srcStable, "raft.db", errFull, true)
	h.ok(srcStable, gen)
	if h.get().Err == nil {
		t.Fatal("a write that raced a failure cleared it")
	}
	h.ok(srcStable, h.begin())
	if h.get().Err != nil {
		t.Fatal("a stable store write did not clear its failure")
	}
	h.failed(srcLog, "seg", errFull, true)
	h.failed(srcLog, "seg", errIO, false)
	h.ok(srcProbe, h.begin())
	if got := h.get(); got.Recoverable || !errors.Is(got.Err, syscall.EIO) {
		t.Fatalf("%+v, want the lasting failure", got)
	}
}

// failingSnaps creates sinks whose writes fail with err while it is set.
type failingSnaps struct {
	raft.SnapshotStore
	err error
}

type failingSink struct {
	raft.SnapshotSink
	err error
}

func (f *failingSnaps) Create(v raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, tr raft.Transport) (raft.SnapshotSink, error) {
	sink, err := f.SnapshotStore.Create(v, index, term, c, ci, tr)
	return &failingSink{SnapshotSink: sink, err: f.err}, err
}

func (f *failingSink) Write(b []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	return f.SnapshotSink.Write(b)
}

func TestHealthOfTheSnapshotStore(t *testing.T) {
	h := newHealth(bufLogger(io.Discard))
	inner := &failingSnaps{SnapshotStore: raft.NewInmemSnapshotStore(), err: errFull}
	snaps := &snapshotStore{SnapshotStore: inner, h: h, dir: "/d/snapshots"}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("x")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write: %v", err)
	}
	sink.Cancel()
	if got := h.get(); !got.Recoverable || !strings.Contains(got.Err.Error(), "/d/snapshots") {
		t.Fatalf("%+v", got)
	}
	inner.err = nil
	sink, _ = snaps.Create(raft.SnapshotVersionMax, 11, 1, raft.Configuration{}, 0, nil)
	sink.Write([]byte("x"))
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if got := h.get(); got.Err != nil {
		t.Fatalf("after a snapshot was written: %+v", got)
	}
}

// TestProbeRecovers: while the storage fails recoverably the Store probes
// the disk by itself and, the disk taking a segment's worth again, is
// healthy; a lasting failure is not probed away. Close stops the probe.
func TestProbeRecovers(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	opts := testOpts
	opts.ProbeInterval = 5 * time.Millisecond
	s := openT(t, dir, opts)
	ch := s.HealthChanged()
	s.health.failed(srcLog, "seg", errFull, true)
	if !closed(ch) {
		t.Fatal("not changed")
	}
	select {
	case <-s.HealthChanged():
	case <-time.After(10 * time.Second):
		t.Fatal("the probe did not end a recoverable failure")
	}
	if got := s.Health(); got.Err != nil {
		t.Fatalf("after the probe: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, probeFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("probe file left: %v", err)
	}

	s.health.failed(srcLog, "seg", errIO, false)
	s.probe()
	if got := s.Health(); got.Err == nil {
		t.Fatal("the probe ended a lasting failure")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}
