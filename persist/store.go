// Package persist holds what a node keeps on disk: the Raft log and stable
// store (bbolt through raft-boltdb), the snapshot store, and the replicated
// state machine with its versioned snapshot format.
package persist

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	bolt, err := openBolt(filepath.Join(dir, raftFile))
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

// openBolt opens the log store, turning bbolt's panics on some corrupt files
// into ErrCorrupt.
func openBolt(path string) (s *raftboltdb.BoltStore, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)
		}
	}()
	if err := sniffBolt(path); err != nil {
		return nil, err
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

// sniffBolt rejects a non-empty file that does not start like a bbolt
// database before bbolt maps it.
func sniffBolt(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	var page [4096]byte
	n, err := io.ReadFull(f, page[:])
	if n == 0 && (err == io.EOF) {
		return nil
	}
	// bbolt's meta page: magic 0xED0CDAED at offset 16 (after the page header).
	if n < 32 || le32(page[16:20]) != 0xED0CDAED {
		return fmt.Errorf("%w: %s is not a bbolt database", ErrCorrupt, path)
	}
	return nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
