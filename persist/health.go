package persist

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/persist/raftlog"
)

// Health is the state of a Store's storage: the Raft log, the stable store
// and the snapshot store.
type Health struct {
	// Err is the failure, nil when healthy.
	Err error
	// Since is when the current state began.
	Since time.Time
	// Recoverable is set when the failure may pass by itself, a full disk
	// being the usual case: the Store probes the disk every
	// Options.ProbeInterval, and a successful probe or write makes it
	// healthy again. Otherwise it lasts until the node restarts, and Err
	// says what to do.
	Recoverable bool
}

// Health reports the storage's state.
func (s *Store) Health() Health { return s.health.get() }

// HealthChanged returns a channel closed at the next change of Health; call
// it again after each change.
func (s *Store) HealthChanged() <-chan struct{} {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.changed
}

// source is the part of the storage an outcome comes from.
type source string

const (
	srcLog    source = "raft log"
	srcStable source = "stable store"
	srcSnap   source = "snapshot store"
	srcProbe  source = "probe"
)

// health tracks Health. A failure is attributed to its source; only a
// success of the same source, or a probe, ends it, so one part working
// again does not hide another that still fails.
type health struct {
	logger hclog.Logger

	mu      sync.Mutex
	cur     Health
	src     source        // of the current failure
	gen     uint64        // counts failures, so an outcome that raced one is not taken as recovery
	changed chan struct{} // closed at the next change
}

func newHealth(logger hclog.Logger) *health {
	return &health{logger: logger, cur: Health{Since: time.Now()}, changed: make(chan struct{})}
}

func (h *health) get() Health {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

// begin is called before an operation whose outcome is then passed to ok
// or failed.
func (h *health) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// ok records a success of src that began at gen: it ends a recoverable
// failure of the same source (any source, for a probe) unless another
// failure happened meanwhile.
func (h *health) ok(src source, gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur.Err == nil || !h.cur.Recoverable || h.gen != gen || (src != srcProbe && src != h.src) {
		return
	}
	h.logger.Info("storage recovered", "source", string(h.src), "by", string(src), "failing_for", time.Since(h.cur.Since).Round(time.Millisecond).String())
	h.set(Health{Since: time.Now()}, "")
}

// failed records a failure of src on file. A failure while failing changes
// nothing, except that a lasting one replaces a recoverable one.
func (h *health) failed(src source, file string, err error, recoverable bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	if h.cur.Err != nil && (!h.cur.Recoverable || recoverable) {
		return
	}
	h.logger.Error("storage failing", "source", string(src), "file", file, "error", err.Error(), "recovers_by_itself", recoverable)
	h.set(Health{Err: err, Since: time.Now(), Recoverable: recoverable}, src)
}

// set changes the state. Callers hold mu.
func (h *health) set(c Health, src source) {
	h.cur, h.src = c, src
	close(h.changed)
	h.changed = make(chan struct{})
}

// spaceError reports whether err is a full disk or an exhausted quota,
// which pass once space is freed.
func spaceError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// restartAdvice ends the Err of a failure that lasts until a restart.
const restartAdvice = "restart the node once the disk is healthy"

// observeLog records the outcome of a log store write. Only storage
// failures count, not refused calls (entries out of order, a closed store).
func (h *health) observeLog(gen uint64, err error) {
	var we *raftlog.WriteError
	switch {
	case err == nil:
		h.ok(srcLog, gen)
	case errors.As(err, &we):
		h.failed(srcLog, we.Path, err, !we.Sticky)
	}
}

// stableStore is the bolt stable store with its writes' outcomes recorded
// in the Store's Health. A failed write that is not a full disk is taken
// as lasting: bbolt may have left its file in a state only a restart
// re-reads.
type stableStore struct {
	raft.StableStore
	h    *health
	path string
}

func (s *stableStore) Set(k, v []byte) error {
	gen := s.h.begin()
	return s.observe(gen, s.StableStore.Set(k, v))
}

func (s *stableStore) SetUint64(k []byte, v uint64) error {
	gen := s.h.begin()
	return s.observe(gen, s.StableStore.SetUint64(k, v))
}

func (s *stableStore) observe(gen uint64, err error) error {
	if err == nil {
		s.h.ok(srcStable, gen)
		return nil
	}
	err = fmt.Errorf("stable store %s: %w", s.path, err)
	if !spaceError(err) {
		err = fmt.Errorf("%w; %s", err, restartAdvice)
	}
	s.h.failed(srcStable, s.path, err, spaceError(err))
	return err
}

// snapshotStore is the snapshot store with its writes' outcomes recorded
// in the Store's Health. A failed snapshot is discarded and taken again
// later, so its failures are recoverable.
type snapshotStore struct {
	raft.SnapshotStore
	h   *health
	dir string
}

func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	gen := s.h.begin()
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		err = fmt.Errorf("snapshot store %s: create: %w", s.dir, err)
		s.h.failed(srcSnap, s.dir, err, true)
		return nil, err
	}
	return &snapshotSink{SnapshotSink: sink, h: s.h, gen: gen, path: filepath.Join(s.dir, sink.ID())}, nil
}

type snapshotSink struct {
	raft.SnapshotSink
	h    *health
	gen  uint64
	path string
}

var _ io.Writer = (*snapshotSink)(nil)

func (s *snapshotSink) Write(b []byte) (int, error) {
	n, err := s.SnapshotSink.Write(b)
	if err != nil {
		err = fmt.Errorf("snapshot %s: write: %w", s.path, err)
		s.h.failed(srcSnap, s.path, err, true)
	}
	return n, err
}

func (s *snapshotSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		err = fmt.Errorf("snapshot %s: close: %w", s.path, err)
		s.h.failed(srcSnap, s.path, err, true)
		return err
	}
	s.h.ok(srcSnap, s.gen)
	return nil
}

// probeFile is written in the data dir by the probe.
const probeFile = "probe.tmp"

// probe checks, while the storage fails recoverably, whether the disk takes
// a new segment's worth of data again; if so the Store is healthy (the log
// store writes again on its next call).
func (s *Store) probe() {
	gen := s.health.begin()
	if h := s.health.get(); h.Err == nil || !h.Recoverable {
		return
	}
	if err := raftlog.ProbeSpace(filepath.Join(s.Dir, probeFile), s.opts.SegmentSize); err != nil {
		s.opts.Logger.Debug("storage probe failed", "error", err.Error())
		return
	}
	s.health.ok(srcProbe, gen)
}
