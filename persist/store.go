// Package persist holds what a node keeps on disk: the Raft log and stable
// store (bbolt through raft-boltdb), the snapshot store, and the replicated
// state machine with its versioned snapshot format.
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
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
)

// Errors of Open. Callers test them with errors.Is.
var (
	// ErrLocked means another live process holds the data dir.
	ErrLocked = errors.New("data dir is in use by another process")
	// ErrForeign means the data dir holds another node's or cluster's data,
	// or files that are not ours.
	ErrForeign = errors.New("data dir belongs to something else")
	// ErrCorrupt means a data file could not be read.
	ErrCorrupt = errors.New("data file is corrupt")
)

const (
	lockFile   = "LOCK"
	metaFile   = "xce-meta.json"
	raftFile   = "raft.db"
	snapDir    = "snapshots"
	metaFormat = "xce-data"
	// metaVersion is the data dir layout version.
	metaVersion = 1
	// logCacheSize entries stay in memory so the leader replicates without
	// reading them back out of bolt.
	logCacheSize = 512
	snapRetain   = 2
)

// Options tune Open.
type Options struct {
	// NodeID and ClusterID are written into a new data dir and checked
	// against an existing one.
	NodeID, ClusterID string
	// LockWait is how long Open waits for another process to release the
	// data dir; zero fails at once.
	LockWait time.Duration
	// Logger receives raft's snapshot store output.
	Logger hclog.Logger
	// CheckBolt, when set, vets an existing raft.db before bbolt opens it
	// for writing. bbolt panics on some corrupt pages in goroutines of its
	// own, where no recover reaches; the server runs CheckBoltFile in a
	// child process so such a file fails Open instead of killing the node.
	CheckBolt func(path string) error
}

// Store is an opened data dir.
type Store struct {
	Dir    string
	Logs   raft.LogStore
	Stable raft.StableStore
	Snaps  raft.SnapshotStore

	bolt *raftboltdb.BoltStore
	lock *os.File
}

type meta struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id"`
}

// Open locks and opens the data dir, creating it when missing. A dir held by
// a live process fails with ErrLocked after opts.LockWait; a foreign or
// corrupt one with ErrForeign or ErrCorrupt, never a panic or a hang.
func Open(dir string, opts Options) (_ *Store, err error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	lock, err := acquireLock(dir, opts.LockWait)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := checkMeta(dir, opts); err != nil {
		return nil, err
	}
	bolt, err := openBolt(filepath.Join(dir, raftFile), opts.CheckBolt)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			bolt.Close()
		}
	}()
	// Read the stable store once so a foreign bolt file shows here rather
	// than inside raft.
	if _, err := bolt.LastIndex(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, filepath.Join(dir, raftFile), err)
	}
	cache, err := raft.NewLogCache(logCacheSize, bolt)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, snapDir), snapRetain, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: snapshots: %w", dir, err)
	}
	return &Store{Dir: dir, Logs: cache, Stable: bolt, Snaps: snaps, bolt: bolt, lock: lock}, nil
}

// HasState reports whether the data dir already holds Raft state, in which
// case the node must never bootstrap again.
func (s *Store) HasState() (bool, error) {
	return raft.HasExistingState(s.Logs, s.Stable, s.Snaps)
}

// Close closes the log store and releases the data dir lock.
func (s *Store) Close() error {
	err := s.bolt.Close()
	s.lock.Close()
	return err
}

// acquireLock takes an exclusive flock on dir/LOCK and writes our pid in it.
// flock is released by the kernel when the process dies, so a stale file from
// a crash never blocks a restart.
func acquireLock(dir string, wait time.Duration) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
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

func checkMeta(dir string, opts Options) error {
	path := filepath.Join(dir, metaFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		// A raft.db without our meta file is not a dir we created.
		if _, serr := os.Stat(filepath.Join(dir, raftFile)); serr == nil {
			return fmt.Errorf("%w: %s has %s but no %s", ErrForeign, dir, raftFile, metaFile)
		}
		m := meta{Format: metaFormat, Version: metaVersion, NodeID: opts.NodeID, ClusterID: opts.ClusterID}
		return writeFileSync(path, m)
	}
	if err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil || m.Format != metaFormat {
		return fmt.Errorf("%w: %s is not an xce data file", ErrForeign, path)
	}
	if m.Version > metaVersion {
		return fmt.Errorf("%w: %s has layout version %d, this binary reads up to %d", ErrForeign, path, m.Version, metaVersion)
	}
	if m.NodeID != opts.NodeID || m.ClusterID != opts.ClusterID {
		return fmt.Errorf("%w: %s holds node %q of cluster %q, config says node %q of cluster %q",
			ErrForeign, dir, m.NodeID, m.ClusterID, opts.NodeID, opts.ClusterID)
	}
	return nil
}

func writeFileSync(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
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
	return os.Rename(tmp, path)
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
