// Package persist holds what a node keeps on disk: the data dir and its
// lock, the Raft log (segment files, package raftlog), the stable store
// (bbolt through raft-boltdb), the snapshot store, the storage health and
// the durable mark. What the snapshots and log entries hold is package
// state's (docs/design.md, "The data dir and durability").
package persist

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/xce/xce/persist/raftlog"
)

// Errors of Open. Callers test them with errors.Is.
var (
	// ErrLocked means another live process holds the data dir.
	ErrLocked = errors.New("data dir is in use by another process")
	// ErrForeign means the data dir holds another node's or cluster's data,
	// or files that are not ours.
	ErrForeign = errors.New("data dir belongs to something else")
	// ErrCorrupt means a data file could not be read: its bytes are
	// damaged.
	ErrCorrupt = errors.New("data file is corrupt")
	// ErrLost means durable state is missing: a file deleted, emptied or
	// cut short, or older than the files written after it. Starting on it
	// could lose acknowledged writes or let the node vote twice in a term.
	ErrLost = errors.New("data dir lost durable state")
)

// lostAdvice ends Open's ErrCorrupt and ErrLost errors: what to do.
const lostAdvice = "restore the data dir from a backup, or remove it and let the node rejoin with an empty data dir; see docs/operations.md"

const (
	lockFile   = "LOCK"
	metaFile   = "xce-meta.json"
	raftFile   = "raft.db"
	logDir     = "raft-log"
	snapDir    = "snapshots"
	metaFormat = "xce-data"
	// metaVersion is the data dir layout version. Version 1 kept the Raft
	// log in raft.db; version 2 keeps it in raft-log/, and raft.db holds
	// only the stable store. Open moves a version 1 log across.
	metaVersion = 2
	// logCacheSize entries stay in memory so the leader replicates without
	// reading them back from the log's files.
	logCacheSize = 512
	snapRetain   = 2
	// defaultProbeInterval is Options.ProbeInterval's default.
	defaultProbeInterval = time.Second
)

// Options tune Open.
type Options struct {
	// NodeID and ClusterID are written into a new data dir and checked
	// against an existing one.
	NodeID, ClusterID string
	// LockWait is how long Open waits for another process to release the
	// data dir; zero fails at once.
	LockWait time.Duration
	// Logger receives the raft log's recovery notes, the snapshot store's
	// output, and one line per change of Health.
	Logger hclog.Logger
	// CheckBolt, when set, vets an existing raft.db before bbolt opens it
	// for writing. bbolt panics on some corrupt pages in goroutines of its
	// own, where no recover reaches; the server runs CheckBoltFile in a
	// child process so such a file fails Open instead of killing the node.
	CheckBolt func(path string) error
	// SegmentSize is the size of the raft log's segment files (the space
	// each is given when created); zero means raftlog.DefaultSegmentSize.
	// It may change between runs: each segment records its own.
	SegmentSize int64
	// RestoreSnapshot, when set, is given the newest raft snapshot (and
	// its size) to restore into the state machine while Open reads and
	// checks the log, rather than raft restoring it after Open;
	// Store.Restored says which snapshot it took, if it succeeded. A
	// failure is left to raft, which restores (or refuses) the snapshots
	// itself as it always does.
	RestoreSnapshot func(rc io.ReadCloser, size int64) error
	// PrepareRestore, when set with RestoreSnapshot, is called before the
	// restore and the log's checks start (they would slow it down), with
	// the snapshot's size; the restore calls the function it returns once
	// it is done, whatever its outcome.
	PrepareRestore func(size int64) (release func())
	// ProbeInterval is how often a Store whose storage fails recoverably
	// (Health) checks whether the disk takes writes again; zero means one
	// second.
	ProbeInterval time.Duration

	// markInterval is how often the durable mark is raised; zero means
	// defaultMarkInterval, below zero never (tests and benchmarks).
	markInterval time.Duration
	// prescan is Open's early check of the log's segments.
	prescan *raftlog.Prescan
}

// Store is an opened data dir. Logs, Stable and Snaps are what raft uses;
// their failures to write show in Health.
type Store struct {
	Dir    string
	Logs   raft.LogStore
	Stable raft.StableStore
	Snaps  raft.SnapshotStore
	// Restored is the snapshot Options.RestoreSnapshot restored, or nil
	// (none asked, none there, or it failed: RestoreErr says why).
	Restored   *raft.SnapshotMeta
	RestoreErr error

	opts   Options
	bolt   *raftboltdb.BoltStore
	stable *stableStore
	log    *raftlog.Store
	lock   *os.File
	health *health

	markMu   sync.Mutex // serialises changes of the mark with deletes of the log's end
	mark     mark       // the mark as raft.db holds it
	appended atomic.Bool

	stop, done chan struct{} // stop and wait for run
	closeMu    sync.Mutex
	closed     bool
}

type meta struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id"`
}

// Open locks and opens the data dir, creating it when missing. A dir held by
// a live process fails with ErrLocked after opts.LockWait; a foreign one
// with ErrForeign. Open never panics or hangs.
//
// Open refuses to start on damaged state (ErrCorrupt) and on lost durable
// state (ErrLost), with one line naming the file, what is wrong and what to
// do:
//   - raft.db (the term and vote) missing, empty or without a term, while
//     the log holds entries or a snapshot exists; or raft.db holding a term
//     older than the log's last entry or the newest snapshot: the node
//     could vote twice in a term;
//   - a term at or above raft.MaxTerm in raft.db (ErrCorrupt);
//   - raft-log/ missing while raft.db holds raft state;
//   - a log segment cut short, or missing between others, or a log ending
//     before the durable mark (see mark.go) that the newest snapshot does
//     not cover;
//   - a damaged frame that is not the tail of an unacknowledged write.
//
// The tail of a write a crash interrupted is zeroed, with a warning.
func Open(dir string, opts Options) (s *Store, err error) {
	opts = opts.withDefaults()
	defer func() {
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrLost) {
			// One line, ending with what to do.
			err = fmt.Errorf("%w; %s", oneLine{err}, lostAdvice)
		}
	}()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	warnOpenMode(dir, opts.Logger)
	lock, err := acquireLock(dir, opts.LockWait)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	m, err := checkMeta(dir, opts)
	if err != nil {
		return nil, err
	}
	// Left by a probe a crash interrupted.
	_ = os.Remove(filepath.Join(dir, probeFile))
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, snapDir), snapRetain, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: snapshots: %w", dir, err)
	}
	metas, err := snaps.List() // newest first
	if err != nil {
		return nil, fmt.Errorf("data dir %s: snapshots: %w", dir, err)
	}
	snap := newestRaftSnapshot(metas)
	raftPath := filepath.Join(dir, raftFile)
	// Before bolt creates a missing raft.db.
	if err := checkRaftDB(dir, raftPath, snap); err != nil {
		return nil, err
	}
	// The snapshot's restore and the log's checks read different files:
	// one goroutine each. The restore ends before Open returns, whatever
	// Open returns.
	restore := preparedRestore(opts, metas, snap)
	// Once the heap is prepared (alone, its collection is quick), the
	// log's segments are checked, beside raft.db's check (a child process)
	// and the snapshot's restore; openLog takes the result. The check
	// changes nothing, and ends before Open returns.
	pre := raftlog.StartPrescan(filepath.Join(dir, logDir))
	defer pre.Wait()
	opts.prescan = pre
	restored := restoreWhileOpening(snaps, metas, snap, restore)
	defer func() {
		r := <-restored
		if err == nil {
			s.Restored, s.RestoreErr = r.meta, r.err
		}
	}()
	bolt, err := openBolt(raftPath, opts.CheckBolt)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			bolt.Close()
		}
	}()
	st, err := readStable(bolt, raftPath)
	if err != nil {
		return nil, err
	}
	// openLog reads raft.db's log indexes first, so a foreign bolt file
	// shows here rather than inside raft.
	log, err := openLog(dir, m, bolt, st, snap, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			log.Close()
		}
	}()
	if err := checkTerms(dir, log, st, snap); err != nil {
		return nil, err
	}
	s = &Store{Dir: dir, opts: opts, bolt: bolt, log: log, lock: lock, health: newHealth(opts.Logger),
		mark: st.mark, stop: make(chan struct{}), done: make(chan struct{})}
	s.stable = &stableStore{StableStore: bolt, h: s.health, path: raftPath}
	s.Logs, s.Stable = &logStore{s: s, cache: make([]*raft.Log, logCacheSize)}, s.stable
	s.Snaps = &snapshotStore{SnapshotStore: snaps, h: s.health, dir: filepath.Join(dir, snapDir)}
	go s.run(opts.markInterval, opts.ProbeInterval)
	return s, nil
}

// withDefaults is o with its zero values replaced by their defaults.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = defaultProbeInterval
	}
	if o.markInterval == 0 {
		o.markInterval = defaultMarkInterval
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = raftlog.DefaultSegmentSize
	}
	return o
}

// preparedRestore is opts.RestoreSnapshot, prepared for by
// opts.PrepareRestore now if snap (the newest raft snapshot) is the one it
// will restore (the newest of metas): the preparation then runs before the
// restore and the log's checks start, and the restore releases it.
func preparedRestore(opts Options, metas []*raft.SnapshotMeta, snap *raft.SnapshotMeta) func(io.ReadCloser, int64) error {
	restore, prepare := opts.RestoreSnapshot, opts.PrepareRestore
	if restore == nil || prepare == nil || snap == nil || metas[0].ID != snap.ID {
		return restore
	}
	release := prepare(snap.Size)
	return func(rc io.ReadCloser, size int64) error {
		defer release()
		return restore(rc, size)
	}
}

// restoreResult is what restoreWhileOpening did.
type restoreResult struct {
	meta *raft.SnapshotMeta
	err  error
}

// restoreWhileOpening restores snap (the newest raft snapshot) with
// restore on a goroutine of its own, unless either is nil or snap is not
// the snapshot raft would restore first (the newest of metas, all the
// store's), and sends what it did on the channel it returns, once.
func restoreWhileOpening(snaps *raft.FileSnapshotStore, metas []*raft.SnapshotMeta, snap *raft.SnapshotMeta, restore func(io.ReadCloser, int64) error) <-chan restoreResult {
	out := make(chan restoreResult, 1)
	if restore == nil || snap == nil || metas[0].ID != snap.ID {
		out <- restoreResult{}
		return out
	}
	go func() { out <- restoreSnapshot(snaps, snap, restore) }()
	return out
}

// restoreSnapshot restores snap with restore.
func restoreSnapshot(snaps *raft.FileSnapshotStore, snap *raft.SnapshotMeta, restore func(io.ReadCloser, int64) error) restoreResult {
	// The file's checksum is checked as it is restored, not read through
	// first: a restore whose file then fails its check is reported as
	// failed, and raft, which checks before it restores, restores the
	// snapshots itself over it.
	_, rc, check, err := snaps.OpenChecking(snap.ID)
	if err != nil {
		return restoreResult{err: err}
	}
	defer rc.Close()
	if err := restore(rc, snap.Size); err != nil {
		return restoreResult{err: err}
	}
	if err := check(); err != nil {
		return restoreResult{err: fmt.Errorf("snapshot %s: %w", snap.ID, err)}
	}
	return restoreResult{meta: snap}
}

// oneLine is an error printed on one line.
type oneLine struct{ err error }

func (o oneLine) Error() string { return strings.ReplaceAll(o.err.Error(), "\n", "; ") }
func (o oneLine) Unwrap() error { return o.err }

// newestRaftSnapshot returns the newest snapshot raft wrote, or nil. The
// kafka backend keeps its snapshots in the same store, with no raft
// configuration (ConfigurationIndex 0); raft's own always carry one, from
// the bootstrap entry on.
func newestRaftSnapshot(metas []*raft.SnapshotMeta) *raft.SnapshotMeta {
	for _, m := range metas { // newest first
		if m.ConfigurationIndex > 0 {
			return m
		}
	}
	return nil
}

// checkRaftDB refuses a missing or empty raft.db in a dir that holds log
// segments or a snapshot: the term and vote went with it.
func checkRaftDB(dir, path string, snap *raft.SnapshotMeta) error {
	what := ""
	switch fi, err := os.Stat(path); {
	case errors.Is(err, os.ErrNotExist):
		what = "is missing"
	case err != nil:
		return fmt.Errorf("data dir %s: %w", dir, err)
	case fi.Size() == 0:
		what = "is empty"
	default:
		return nil
	}
	segs, _ := filepath.Glob(filepath.Join(dir, logDir, "*.log"))
	switch {
	case len(segs) > 0:
		return fmt.Errorf("%w: %s %s, but %s holds log segments: the node's term and vote are gone, and it could vote twice in a term",
			ErrLost, path, what, filepath.Join(dir, logDir))
	case snap != nil:
		return fmt.Errorf("%w: %s %s, but %s holds snapshot %s: the node's term and vote are gone, and it could vote twice in a term",
			ErrLost, path, what, filepath.Join(dir, snapDir), snap.ID)
	}
	return nil
}

// checkTerms refuses a raft.db older than the log or the snapshots: with
// its term behind theirs, the node could vote twice in a term.
func checkTerms(dir string, log *raftlog.Store, st stableState, snap *raft.SnapshotMeta) error {
	raftPath := filepath.Join(dir, raftFile)
	last, _ := log.LastIndex()
	var lastTerm uint64
	if last != 0 {
		var l raft.Log
		if err := log.GetLog(last, &l); err != nil {
			if errors.Is(err, raftlog.ErrCorrupt) {
				return fmt.Errorf("%w: %s", ErrCorrupt, strings.TrimPrefix(err.Error(), raftlog.ErrCorrupt.Error()+": "))
			}
			return fmt.Errorf("data dir %s: %w", dir, err)
		}
		lastTerm = l.Term
	}
	older := func(what string, term uint64) error {
		if !st.hasTerm {
			return fmt.Errorf("%w: %s holds no current term, but %s: raft.db was lost or replaced, and the node could vote twice in a term",
				ErrLost, raftPath, what)
		}
		return fmt.Errorf("%w: %s holds current term %d, but %s of term %d: raft.db is older than the rest of the data dir, and the node could vote twice in a term",
			ErrLost, raftPath, st.term, what, term)
	}
	if last != 0 && (!st.hasTerm || lastTerm > st.term) {
		return older(fmt.Sprintf("%s holds entry %d", filepath.Join(dir, logDir), last), lastTerm)
	}
	if snap != nil && (!st.hasTerm || snap.Term > st.term) {
		return older(fmt.Sprintf("%s holds snapshot %s", filepath.Join(dir, snapDir), snap.ID), snap.Term)
	}
	return nil
}

// openLog opens dir/raft-log, first moving a layout version 1 log out of
// raft.db. The move is safe to interrupt at any point:
//
//  1. copy the log into raft-log.tmp and sync it;
//  2. write layout version 2 into the meta file, so a binary that only
//     knows version 1 refuses the dir from now on rather than run on the
//     stale copy left in raft.db;
//  3. rename raft-log.tmp to raft-log: from here raft-log is the log;
//  4. delete the log from raft.db.
//
// An interrupted move starts again from 1 (raft.db still holds the whole
// log until 4); copies left in raft.db after 3 are deleted on the next open.
//
// The log must reach the durable mark, unless the newest snapshot covers it.
func openLog(dir string, m meta, bolt *raftboltdb.BoltStore, st stableState, snap *raft.SnapshotMeta, opts Options) (*raftlog.Store, error) {
	logger := opts.Logger
	path := filepath.Join(dir, logDir)
	boltFirst, err := bolt.FirstIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, filepath.Join(dir, raftFile), err)
	}
	boltLast, err := bolt.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, filepath.Join(dir, raftFile), err)
	}
	_, statErr := os.Stat(path)
	switch {
	case statErr == nil:
	case errors.Is(statErr, os.ErrNotExist):
		// In layout 2, raft-log is missing only in a new dir, or during a
		// move (raft.db still holds the log).
		if m.Version >= 2 && boltLast == 0 && (st.hasTerm || snap != nil) {
			return nil, fmt.Errorf("%w: %s is missing, but %s holds raft state (current term %d)",
				ErrLost, path, filepath.Join(dir, raftFile), st.term)
		}
		if err := moveLog(dir, m, bolt, boltFirst, boltLast, logger); err != nil {
			return nil, fmt.Errorf("data dir %s: moving the raft log out of %s: %w", dir, raftFile, err)
		}
	default:
		return nil, fmt.Errorf("data dir %s: %w", dir, statErr)
	}
	if boltLast != 0 {
		// Step 4, or what an interrupted one left.
		if err := bolt.DeleteRange(boltFirst, boltLast); err != nil {
			return nil, fmt.Errorf("data dir %s: delete the old log copy in %s: %w", dir, raftFile, err)
		}
	}
	durable := st.mark.durable
	if snap != nil && snap.Index >= durable {
		durable = 0 // the snapshot holds every entry the mark vouches for
	}
	log, rec, err := raftlog.Open(path, raftlog.Options{SegmentSize: opts.SegmentSize, Durable: durable, CutFrom: st.mark.cutFrom, Prescan: opts.prescan})
	if err != nil {
		for _, e := range []struct{ from, to error }{{raftlog.ErrCorrupt, ErrCorrupt}, {raftlog.ErrLost, ErrLost}} {
			if errors.Is(err, e.from) {
				return nil, fmt.Errorf("%w: %s", e.to, strings.TrimPrefix(err.Error(), e.from.Error()+": "))
			}
		}
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	switch {
	case rec.CutResumed:
		logger.Warn(fmt.Sprintf("raft log: finished deleting entries after %d that a crash interrupted: zeroed %d bytes of %s",
			rec.TornAfter, rec.TornBytes, rec.TornFile))
	case rec.TornBytes > 0:
		logger.Warn(fmt.Sprintf("raft log: cut %d bytes after entry %d at the end of %s: the tail of a write a crash interrupted, or damage to entries after the durable mark %d",
			rec.TornBytes, rec.TornAfter, rec.TornFile, st.mark.durable))
	}
	if err := dropLogBehindSnapshot(log, snap, logger); err != nil {
		log.Close()
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	return log, nil
}

// dropLogBehindSnapshot empties a log that ends before the newest snapshot.
// Raft would append the entry after the snapshot to it, leaving a gap the
// log refuses; every entry up to the snapshot is in the snapshot, so the
// log starts again after it. (The durable mark is at or below the log's end
// here, or the snapshot covers it: raftlog.Open refused otherwise.)
func dropLogBehindSnapshot(log *raftlog.Store, snap *raft.SnapshotMeta, logger hclog.Logger) error {
	if snap == nil {
		return nil
	}
	first, err := log.FirstIndex()
	if err != nil {
		return err
	}
	last, err := log.LastIndex()
	if err != nil {
		return err
	}
	if last == 0 || last >= snap.Index {
		return nil
	}
	logger.Warn(fmt.Sprintf("raft log: ends at entry %d, before the newest snapshot at %d: the snapshot holds every entry up to %d, so the log starts again after it",
		last, snap.Index, snap.Index))
	if err := log.DeleteRange(first, last); err != nil {
		return fmt.Errorf("emptying the raft log behind snapshot %d: %w", snap.Index, err)
	}
	return nil
}

func moveLog(dir string, m meta, bolt *raftboltdb.BoltStore, first, last uint64, logger hclog.Logger) error {
	tmp := filepath.Join(dir, logDir+".tmp")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if last != 0 {
		start := time.Now()
		if err := copyLog(tmp, bolt, first, last); err != nil {
			return err
		}
		logger.Info("raft log: moved out of raft.db", "entries", last-first+1, "first", first, "last", last, "took", time.Since(start))
	} else if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	if m.Version < 2 {
		m.Version = metaVersion
		if err := writeFileSync(filepath.Join(dir, metaFile), m); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, filepath.Join(dir, logDir)); err != nil {
		return err
	}
	return raftlog.SyncDir(dir)
}

// copyLog copies entries first..last from bolt into a new log at path and
// reads every one back.
func copyLog(path string, bolt *raftboltdb.BoltStore, first, last uint64) error {
	dst, _, err := raftlog.Open(path, raftlog.Options{})
	if err != nil {
		return err
	}
	defer dst.Close()
	const batch = 256
	logs := make([]*raft.Log, 0, batch)
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := bolt.GetLog(i, l); err != nil {
			return fmt.Errorf("%w: read entry %d of %d..%d: %v", ErrCorrupt, i, first, last, err)
		}
		logs = append(logs, l)
		if len(logs) == batch || i == last {
			if err := dst.StoreLogs(logs); err != nil {
				return err
			}
			logs = logs[:0]
		}
	}
	for i := first; i <= last; i++ {
		var a, b raft.Log
		if err := bolt.GetLog(i, &a); err != nil {
			return err
		}
		if err := dst.GetLog(i, &b); err != nil {
			return err
		}
		if a.Index != b.Index || a.Term != b.Term || a.Type != b.Type || string(a.Data) != string(b.Data) || string(a.Extensions) != string(b.Extensions) {
			return fmt.Errorf("entry %d reads back different from the copy", i)
		}
	}
	return raftlog.SyncDir(path)
}

// HasState reports whether the data dir already holds Raft state, in which
// case the node must never bootstrap again.
func (s *Store) HasState() (bool, error) {
	return raft.HasExistingState(s.Logs, s.Stable, s.Snaps)
}

// Close stops the Store's goroutine, records the durable mark, closes the
// log and stable stores and releases the data dir lock.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.stop)
	<-s.done
	var markErr error
	if s.opts.markInterval > 0 {
		markErr = s.raiseMark()
	}
	err := errors.Join(markErr, s.log.Close(), s.bolt.Close())
	s.lock.Close()
	return err
}

// warnOpenMode warns when other users may enter the data dir: it is
// created 0700, and one made before with a wider mode is used as it is
// (see docs/operations.md, "Files and permissions").
func warnOpenMode(dir string, logger hclog.Logger) {
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return
	}
	logger.Warn(fmt.Sprintf("data dir %s: mode %#o lets other users read it; chmod 700 it", dir, fi.Mode().Perm()))
}

// acquireLock takes an exclusive flock on dir/LOCK and writes our pid in it.
// flock is released by the kernel when the process dies, so a stale file from
// a crash never blocks a restart.
func acquireLock(dir string, wait time.Duration) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	deadline := time.Now().Add(wait)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("data dir %s: lock: %w", dir, err)
		}
		if !time.Now().Before(deadline) {
			holder := "another process"
			if b, rerr := os.ReadFile(path); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			f.Close()
			return nil, fmt.Errorf("%w: %s is held by %s", ErrLocked, dir, holder)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// checkMeta reads the meta file, or writes one into a new dir.
func checkMeta(dir string, opts Options) (meta, error) {
	path := filepath.Join(dir, metaFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		// A raft.db or raft-log without our meta file is not a dir we
		// created.
		for _, f := range []string{raftFile, logDir} {
			if _, serr := os.Stat(filepath.Join(dir, f)); serr == nil {
				return meta{}, fmt.Errorf("%w: %s has %s but no %s", ErrForeign, dir, f, metaFile)
			}
		}
		m := meta{Format: metaFormat, Version: metaVersion, NodeID: opts.NodeID, ClusterID: opts.ClusterID}
		return m, writeFileSync(path, m)
	}
	if err != nil {
		return meta{}, fmt.Errorf("data dir %s: %w", dir, err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil || m.Format != metaFormat {
		return meta{}, fmt.Errorf("%w: %s is not an xce data file", ErrForeign, path)
	}
	if m.Version > metaVersion || m.Version < 1 {
		return meta{}, fmt.Errorf("%w: %s has layout version %d, this binary reads 1 to %d", ErrForeign, path, m.Version, metaVersion)
	}
	if m.NodeID != opts.NodeID || m.ClusterID != opts.ClusterID {
		return meta{}, fmt.Errorf("%w: %s holds node %q of cluster %q, config says node %q of cluster %q",
			ErrForeign, dir, m.NodeID, m.ClusterID, opts.NodeID, opts.ClusterID)
	}
	return m, nil
}

func writeFileSync(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return raftlog.SyncDir(filepath.Dir(path))
}

// CheckBoltFile opens the bolt file at path read-only and walks every page
// reachable from its root, as bbolt does when it rebuilds its free list on a
// writable open. It returns what is wrong, if anything. A corrupt page may
// still make bbolt panic in a goroutine of its own: run it where that only
// ends a disposable process (`xce check-db`).
func CheckBoltFile(path string) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	if err := sniffBolt(path); err != nil {
		return err
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		var errs []error
		for e := range tx.Check() {
			if len(errs) < 10 {
				errs = append(errs, e)
			}
		}
		return errors.Join(errs...)
	})
}

// openBolt opens the log store, turning bbolt's panics on some corrupt files
// into ErrCorrupt. check, when set, vets an existing file first
// (Options.CheckBolt).
func openBolt(path string, check func(path string) error) (s *raftboltdb.BoltStore, err error) {
	// A fault while bbolt reads its mapping becomes a panic we recover
	// rather than a SIGBUS that kills the process.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)
		}
	}()
	if err := sniffBolt(path); err != nil {
		return nil, err
	}
	if check != nil {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			if err := check(path); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
			}
		}
	}
	s, err = raftboltdb.New(raftboltdb.Options{
		Path: path,
		// The LOCK file already excludes other processes; this bounds the
		// wait should anything else hold the bolt lock.
		BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	return s, nil
}

// sniffBolt rejects, before bbolt maps it, a non-empty file that does not
// start like a bbolt database or that is shorter than its newest valid meta
// page says (a torn or truncated file would otherwise crash the process
// with SIGBUS when bbolt reads past the end of its mapping).
func sniffBolt(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return nil
	}
	var page [4096]byte
	n, _ := io.ReadFull(f, page[:])
	m0, ok0 := parseMeta(page[:n])
	if !ok0 && (n < 32 || binary.LittleEndian.Uint32(page[16:20]) != boltMagic) {
		return fmt.Errorf("%w: %s is not a bbolt database", ErrCorrupt, path)
	}
	// The second meta page sits one page further on.
	psize := int64(4096)
	if ok0 {
		psize = int64(m0.pageSize)
	}
	second := make([]byte, 4096)
	n1, _ := f.ReadAt(second, psize)
	m1, ok1 := parseMeta(second[:n1])
	var m boltMeta
	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return fmt.Errorf("%w: %s: both bbolt meta pages are invalid", ErrCorrupt, path)
	}
	if need := int64(m.pgid) * int64(m.pageSize); fi.Size() < need {
		return fmt.Errorf("%w: %s is truncated: %d bytes, its meta page needs %d", ErrCorrupt, path, fi.Size(), need)
	}
	return nil
}

const boltMagic = 0xED0CDAED

type boltMeta struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

// parseMeta reads a bbolt meta page (page header of 16 bytes, then magic,
// version, page size, flags, root bucket, freelist, pgid, txid, checksum:
// an FNV-64a of the fields before it).
func parseMeta(p []byte) (boltMeta, bool) {
	const off = 16
	if len(p) < off+64 {
		return boltMeta{}, false
	}
	b := p[off : off+64]
	le := binary.LittleEndian
	if le.Uint32(b[0:]) != boltMagic || le.Uint32(b[4:]) != 2 {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(b[:56])
	if h.Sum64() != le.Uint64(b[56:]) {
		return boltMeta{}, false
	}
	m := boltMeta{pageSize: le.Uint32(b[8:]), pgid: le.Uint64(b[40:]), txid: le.Uint64(b[48:])}
	if m.pageSize < 512 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
		return boltMeta{}, false
	}
	return m, true
}
