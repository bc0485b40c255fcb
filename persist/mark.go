package persist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// The durable mark.
//
// A log that lost its end reads back as a shorter log that is whole: a
// segment cut at a frame boundary, or deleted, leaves nothing damaged to
// see. So raft.db, written apart from the log, records the last log index
// known durable (markKey), and Open refuses a log that ends before it
// (raftlog.Options.Durable) unless the newest snapshot covers it.
//
// The Store raises the mark lazily: its goroutine writes it every
// markInterval after appends, and Close writes a final one. Entries
// appended since the last raise are guarded only by the log's own checks
// (segment sizes, torn-write analysis).
//
// The mark must never be above a log that is whole, or a healthy node
// would refuse to start. Raft legitimately deletes the end of the log (a
// suffix a new leader overrides; everything, after installing a snapshot),
// so the mark is lowered, durably, before such a delete. A suffix delete
// also records where it cuts (cutFrom), so that Open can finish one a crash
// interrupted; the next raise clears it.

// markKey is the stable store key of the mark.
const markKey = "XceLogDurable"

// defaultMarkInterval is how often the mark is raised while entries are
// appended.
const defaultMarkInterval = 200 * time.Millisecond

type mark struct {
	durable uint64 // the last log index known durable
	cutFrom uint64 // the first index of a suffix delete that may not have finished; 0: none
}

func (m mark) encode() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, m.durable)
	binary.BigEndian.PutUint64(b[8:], m.cutFrom)
	return b
}

func decodeMark(b []byte) (mark, error) {
	if len(b) != 16 {
		return mark{}, fmt.Errorf("%s is %d bytes, want 16", markKey, len(b))
	}
	m := mark{durable: binary.BigEndian.Uint64(b), cutFrom: binary.BigEndian.Uint64(b[8:])}
	if m.cutFrom != 0 && m.cutFrom <= m.durable {
		return mark{}, fmt.Errorf("%s: a delete from entry %d with entries up to %d durable", markKey, m.cutFrom, m.durable)
	}
	return m, nil
}

// writeMark makes m the durable mark.
func (s *Store) writeMark(m mark) error {
	if err := s.stable.Set([]byte(markKey), m.encode()); err != nil {
		return err
	}
	s.mark = m
	return nil
}

// raiseMark records the log's last index as durable. The log store
// updates its last index only once the entries are synced.
func (s *Store) raiseMark() error {
	s.markMu.Lock()
	defer s.markMu.Unlock()
	last, _ := s.log.LastIndex()
	if m := (mark{durable: last}); m != s.mark {
		return s.writeMark(m)
	}
	return nil
}

// run is the Store's goroutine: it raises the mark after appends and, while
// the storage fails recoverably, probes the disk. Close stops it.
func (s *Store) run(markEvery, probeEvery time.Duration) {
	defer close(s.done)
	var markC <-chan time.Time
	if markEvery > 0 {
		t := time.NewTicker(markEvery)
		defer t.Stop()
		markC = t.C
	}
	probe := time.NewTicker(probeEvery)
	defer probe.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-markC:
			if s.appended.Swap(false) {
				if err := s.raiseMark(); err != nil {
					// Health has it; try again at the next tick.
					s.appended.Store(true)
				}
			}
		case <-probe.C:
			s.probe()
		}
	}
}

// logStore is the log store raft uses: the segment log, with the mark
// lowered before its end is deleted, its writes' outcomes recorded in
// Health, and its newest entries kept in memory so the leader replicates
// without reading them back. (raft's LogCache would do the last, but it
// flattens errors to text, and callers need errors.Is(err, syscall.ENOSPC).)
type logStore struct {
	s *Store

	mu    sync.RWMutex
	cache []*raft.Log // entry i at i % len(cache)
}

var _ raft.LogStore = (*logStore)(nil)
var _ raft.MonotonicLogStore = (*logStore)(nil)

func (l *logStore) FirstIndex() (uint64, error) { return l.s.log.FirstIndex() }
func (l *logStore) LastIndex() (uint64, error)  { return l.s.log.LastIndex() }
func (l *logStore) IsMonotonic() bool           { return l.s.log.IsMonotonic() }
func (l *logStore) StoreLog(log *raft.Log) error {
	return l.StoreLogs([]*raft.Log{log})
}

// GetLog reads entry index (see raftlog.Store.GetLog).
func (l *logStore) GetLog(index uint64, log *raft.Log) error {
	l.mu.RLock()
	c := l.cache[index%uint64(len(l.cache))]
	l.mu.RUnlock()
	if c != nil && c.Index == index {
		*log = *c
		return nil
	}
	return l.s.log.GetLog(index, log)
}

// StoreLogs stores the entries (see raftlog.Store.StoreLogs).
func (l *logStore) StoreLogs(logs []*raft.Log) error {
	s := l.s
	gen := s.health.begin()
	err := s.log.StoreLogs(logs)
	s.health.observeLog(gen, err)
	if err != nil {
		return err
	}
	s.appended.Store(true)
	l.mu.Lock()
	for _, e := range logs {
		l.cache[e.Index%uint64(len(l.cache))] = e
	}
	l.mu.Unlock()
	return nil
}

// DeleteRange deletes entries lo..hi (see raftlog.Store.DeleteRange),
// lowering the mark first when they include the last one.
func (l *logStore) DeleteRange(lo, hi uint64) error {
	s := l.s
	s.markMu.Lock()
	defer s.markMu.Unlock()
	first, _ := s.log.FirstIndex()
	last, _ := s.log.LastIndex()
	m := s.mark
	if last != 0 && lo <= hi && lo <= last && hi >= last {
		if lo <= first {
			m = mark{} // the whole log: segments go whole, newest first
		} else {
			m = mark{durable: min(m.durable, lo-1), cutFrom: lo}
		}
	}
	if m != s.mark {
		if err := s.writeMark(m); err != nil {
			return fmt.Errorf("raft log: delete entries %d-%d: lower the durable mark first: %w", lo, hi, err)
		}
	}
	l.mu.Lock()
	clear(l.cache)
	l.mu.Unlock()
	err := s.log.DeleteRange(lo, hi)
	if err != nil {
		// Only writes of entries tell that the disk takes data again.
		s.health.observeLog(0, err)
	}
	if m.cutFrom != 0 {
		s.appended.Store(true) // the next raise clears cutFrom
	}
	return err
}

// stableState is what Open reads from raft.db.
type stableState struct {
	term     uint64 // CurrentTerm; 0 when absent
	hasTerm  bool
	voteTerm uint64
	mark     mark
}

// readStable reads raft's terms and the mark from raft.db at path.
func readStable(bolt *raftboltdb.BoltStore, path string) (stableState, error) {
	var st stableState
	get := func(key string) ([]byte, bool, error) {
		v, err := bolt.Get([]byte(key))
		if errors.Is(err, raftboltdb.ErrKeyNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("%w: %s: read %s: %v", ErrCorrupt, path, key, err)
		}
		return v, true, nil
	}
	term := func(key string) (uint64, bool, error) {
		v, ok, err := get(key)
		if err != nil || !ok {
			return 0, false, err
		}
		if len(v) != 8 {
			return 0, false, fmt.Errorf("%w: %s: %s is %d bytes, want 8", ErrCorrupt, path, key, len(v))
		}
		t := binary.BigEndian.Uint64(v)
		if !raft.TermOK(t) {
			return 0, false, fmt.Errorf("%w: %s: %s is %d, not a valid term (terms stay below %d)", ErrCorrupt, path, key, t, raft.MaxTerm)
		}
		return t, true, nil
	}
	var err error
	if st.term, st.hasTerm, err = term("CurrentTerm"); err != nil {
		return st, err
	}
	if st.voteTerm, _, err = term("LastVoteTerm"); err != nil {
		return st, err
	}
	v, ok, err := get(markKey)
	if err != nil {
		return st, err
	}
	if ok {
		if st.mark, err = decodeMark(v); err != nil {
			return st, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
		}
	}
	return st, nil
}
