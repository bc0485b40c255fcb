// Package raftlog is a Raft log store that appends entries to segment files
// and makes each StoreLogs durable with a single fdatasync.
//
// bbolt, the store it replaces, commits with two syncs (its pages, then its
// meta page); on a disk that flushes one write at a time that doubles the
// cost of every replicated write. A log is append-mostly, so a plain file of
// checksummed frames needs only one.
//
// # Layout
//
// The directory holds segment files named after the index of their first
// entry ("00000000000000000001.log"). A segment starts with a 24-byte header
// (magic, first index, CRC) and holds frames, each 8-byte aligned:
//
//	len   uint32  body length
//	crc   uint32  CRC-32C of len, index, term, batch and body
//	index uint64
//	term  uint64
//	batch uint64  index of the first entry of the StoreLogs call it came in
//	body  type (1 byte), appended-at (int64 ns), data length (uint32), data, extensions
//	pad   zeros to the next multiple of 8
//
// Entries are contiguous across segments; a segment is sealed once the next
// one exists.
//
// # Recovery
//
// Open reads every segment and checks every frame. A write cut short by a
// crash can only damage the end of the last segment, after everything
// acknowledged: such a tail is cut off. The disk may have kept some of that
// write's frames and not others, so intact frames of the same batch may
// follow the damage. Damage anywhere else (a bad frame in a sealed segment,
// a gap between segments, a bad frame followed by an intact frame of a
// later batch) fails Open with ErrCorrupt and changes nothing, so a node
// never starts with acknowledged entries silently missing.
package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrCorrupt means a segment file could not be read back as written.
var ErrCorrupt = errors.New("raft log is corrupt")

// ErrFailed means an earlier write or sync failed. After a failed fdatasync
// the kernel may have dropped the dirty pages, so what the file holds is
// unknown: the store refuses further writes until the node restarts and
// Open checks the files again.
var ErrFailed = errors.New("raft log store failed earlier; restart the node")

const (
	segMagic        = "xcelog01"
	segHeaderSize   = 24
	frameHeaderSize = 32
	bodyFixedSize   = 1 + 8 + 4
	segSuffix       = ".log"
	tmpSuffix       = ".tmp"

	// DefaultSegmentSize is the size past which a new segment is started,
	// and the space each segment is given when created.
	DefaultSegmentSize = 16 << 20
	// MaxEntrySize bounds one entry's data and extensions together; a frame
	// header that claims more is damage, not a big entry.
	MaxEntrySize = 64 << 20
	// scanWindow bounds how far past the last good entry Open looks for
	// an intact frame when it finds a damaged one in the last segment.
	scanWindow = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options tune Open.
type Options struct {
	// SegmentSize is the size past which a new segment is started;
	// zero means DefaultSegmentSize.
	SegmentSize int64
}

// Recovery says what Open found.
type Recovery struct {
	Segments int
	// TornBytes were cut from the end of the last segment: a write that a
	// crash interrupted before it was acknowledged.
	TornBytes int64
	// TornSegment is set when a segment created just before a crash held
	// no complete header and was removed.
	TornSegment string
}

type segment struct {
	first uint64
	path  string
	f     *os.File
	offs  []int64 // offs[i] is where entry first+i starts
	size  int64   // end of the last complete frame
}

func (g *segment) last() uint64 { return g.first + uint64(len(g.offs)) - 1 }

// frameEnd is where the frame of entry i of the segment ends.
func (g *segment) frameEnd(i int) int64 {
	if i+1 < len(g.offs) {
		return g.offs[i+1]
	}
	return g.size
}

// Store is a raft.LogStore. Its methods are safe for concurrent use: reads
// run alongside a write's sync, and writes and deletes run one at a time.
type Store struct {
	dir     string
	segSize int64

	writeMu sync.Mutex // serialises StoreLogs, DeleteRange and Close
	buf     []byte     // frame buffer, guarded by writeMu

	mu          sync.RWMutex // guards the fields below
	segs        []*segment
	first, last uint64 // 0, 0 when empty; first may be past segs[0].first
	failed      error
	closed      bool
}

var _ raft.LogStore = (*Store)(nil)
var _ raft.MonotonicLogStore = (*Store)(nil)

// Open opens or creates the log in dir. A damaged log fails with ErrCorrupt
// and is left as it was found.
func Open(dir string, opts Options) (*Store, Recovery, error) {
	var rec Recovery
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, rec, err
	}
	names, err := segmentNames(dir)
	if err != nil {
		return nil, rec, err
	}
	s := &Store{dir: dir, segSize: opts.SegmentSize}
	ok := false
	defer func() {
		if !ok {
			s.closeFiles()
		}
	}()
	// Check everything before changing anything.
	type torn struct {
		g   *segment
		at  int64
		cut int64
	}
	var tail *torn
	var removeTorn string
	for i, n := range names {
		path := filepath.Join(dir, n.name)
		isLast := i == len(names)-1
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, rec, err
		}
		if err := checkSegHeader(b, n.first); err != nil {
			if isLast && len(b) <= segHeaderSize && allZero(b) {
				// Created just before a crash, header never reached the disk.
				removeTorn = path
				break
			}
			return nil, rec, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
		}
		g := &segment{first: n.first, path: path}
		off := int64(segHeaderSize)
		var ferr error
		for off < int64(len(b)) {
			want := g.first + uint64(len(g.offs))
			_, _, n, err := decodeFrame(b[off:], want)
			if err != nil {
				ferr = err
				break
			}
			g.offs = append(g.offs, off)
			off += int64(n)
		}
		// Past the last frame a segment holds zeros: its preallocated,
		// unused space.
		if ferr != nil && !allZero(b[off:]) {
			want := g.first + uint64(len(g.offs))
			if !isLast {
				return nil, rec, fmt.Errorf("%w: %s: entry %d at offset %d: %v", ErrCorrupt, path, want, off, ferr)
			}
			if at, idx, found := findLaterBatch(b, off+8, want); found {
				return nil, rec, fmt.Errorf("%w: %s: entry %d at offset %d: %v; entry %d of a later write follows intact at offset %d, so this is not a torn write",
					ErrCorrupt, path, want, off, ferr, idx, at)
			}
			tail = &torn{g: g, at: off, cut: lastNonZero(b[off:])}
		}
		g.size = off
		if len(s.segs) > 0 {
			prev := s.segs[len(s.segs)-1]
			if len(prev.offs) == 0 {
				return nil, rec, fmt.Errorf("%w: %s holds no entry but is followed by %s", ErrCorrupt, prev.path, path)
			}
			if prev.last()+1 != g.first {
				return nil, rec, fmt.Errorf("%w: %s ends at entry %d but %s starts at %d", ErrCorrupt, prev.path, prev.last(), path, g.first)
			}
		}
		s.segs = append(s.segs, g)
	}
	// Checked: now repair and open.
	if removeTorn != "" {
		if err := os.Remove(removeTorn); err != nil {
			return nil, rec, err
		}
		if err := SyncDir(dir); err != nil {
			return nil, rec, err
		}
		rec.TornSegment = filepath.Base(removeTorn)
	}
	for _, g := range s.segs {
		f, err := os.OpenFile(g.path, os.O_RDWR, 0)
		if err != nil {
			return nil, rec, err
		}
		g.f = f
	}
	if tail != nil {
		if err := cutFile(tail.g.f, tail.at, opts.SegmentSize); err != nil {
			return nil, rec, fmt.Errorf("raft log %s: cut torn write: %w", tail.g.path, err)
		}
		rec.TornBytes = tail.cut
	}
	// Leading segments with no entry (only possible as the sole segment).
	for _, g := range s.segs {
		if len(g.offs) == 0 {
			continue
		}
		if s.first == 0 {
			s.first = g.first
		}
		s.last = g.last()
	}
	rec.Segments = len(s.segs)
	ok = true
	return s, rec, nil
}

type segName struct {
	name  string
	first uint64
}

func segmentNames(dir string) ([]segName, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []segName
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, segSuffix+tmpSuffix) {
			// A segment being created when the process died; it was
			// never renamed into the log.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
			continue
		}
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		first, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil || first == 0 || !e.Type().IsRegular() {
			return nil, fmt.Errorf("%w: %s: not a segment file", ErrCorrupt, filepath.Join(dir, name))
		}
		out = append(out, segName{name: name, first: first})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].first < out[j].first })
	return out, nil
}

func segFileName(first uint64) string { return fmt.Sprintf("%020d%s", first, segSuffix) }

func checkSegHeader(b []byte, first uint64) error {
	if len(b) < segHeaderSize {
		return fmt.Errorf("header cut short at %d bytes", len(b))
	}
	if string(b[:8]) != segMagic {
		return errors.New("not a segment file (bad magic)")
	}
	if crc32.Checksum(b[:16], castagnoli) != binary.LittleEndian.Uint32(b[16:]) {
		return errors.New("header checksum mismatch")
	}
	if got := binary.LittleEndian.Uint64(b[8:]); got != first {
		return fmt.Errorf("header says first entry %d, file name says %d", got, first)
	}
	return nil
}

func segHeader(first uint64) []byte {
	b := make([]byte, segHeaderSize)
	copy(b, segMagic)
	binary.LittleEndian.PutUint64(b[8:], first)
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	return b
}

// lastNonZero returns the length of b up to and including its last non-zero
// byte.
func lastNonZero(b []byte) int64 {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return int64(i + 1)
		}
	}
	return 0
}

// cutFile drops f's bytes from at on, atomically (a crash leaves either
// the whole file or the cut one), syncs, and preallocates the space again.
func cutFile(f *os.File, at, size int64) error {
	if err := f.Truncate(at); err != nil {
		return err
	}
	if at < size {
		// Best effort: without it appends grow the file instead.
		_ = preallocate(f, at, size-at)
	}
	return f.Sync()
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func align8(n int) int { return (n + 7) &^ 7 }

// appendFrame encodes l, which came in a batch starting at entry batch,
// onto b.
func appendFrame(b []byte, l *raft.Log, batch uint64) []byte {
	bodyLen := bodyFixedSize + len(l.Data) + len(l.Extensions)
	n := align8(frameHeaderSize + bodyLen)
	start := len(b)
	b = append(b, make([]byte, n)...)
	f := b[start:]
	le := binary.LittleEndian
	le.PutUint32(f[0:], uint32(bodyLen))
	le.PutUint64(f[8:], l.Index)
	le.PutUint64(f[16:], l.Term)
	le.PutUint64(f[24:], batch)
	body := f[frameHeaderSize:]
	body[0] = byte(l.Type)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	le.PutUint64(body[1:], uint64(at))
	le.PutUint32(body[9:], uint32(len(l.Data)))
	copy(body[bodyFixedSize:], l.Data)
	copy(body[bodyFixedSize+len(l.Data):], l.Extensions)
	le.PutUint32(f[4:], frameCRC(f, bodyLen))
	return b
}

func frameCRC(f []byte, bodyLen int) uint32 {
	c := crc32.Update(0, castagnoli, f[0:4])
	return crc32.Update(c, castagnoli, f[8:frameHeaderSize+bodyLen])
}

// decodeFrame reads the frame at the start of b, which must hold entry
// want, and returns the entry, the first entry of its batch, and the
// frame's length with its padding. The entry's slices are copies, never
// views of b.
func decodeFrame(b []byte, want uint64) (l raft.Log, batch uint64, n int, err error) {
	if len(b) < frameHeaderSize {
		return l, 0, 0, fmt.Errorf("frame header cut short at %d bytes", len(b))
	}
	le := binary.LittleEndian
	bodyLen := int(le.Uint32(b[0:]))
	if bodyLen < bodyFixedSize || bodyLen > bodyFixedSize+MaxEntrySize {
		return l, 0, 0, fmt.Errorf("frame length %d out of range", bodyLen)
	}
	if len(b) < frameHeaderSize+bodyLen {
		return l, 0, 0, fmt.Errorf("frame of %d bytes cut short at %d", frameHeaderSize+bodyLen, len(b))
	}
	if frameCRC(b, bodyLen) != le.Uint32(b[4:]) {
		return l, 0, 0, errors.New("frame checksum mismatch")
	}
	l.Index = le.Uint64(b[8:])
	l.Term = le.Uint64(b[16:])
	batch = le.Uint64(b[24:])
	if l.Index != want {
		return raft.Log{}, 0, 0, fmt.Errorf("frame holds entry %d, want %d", l.Index, want)
	}
	if batch == 0 || batch > l.Index {
		return raft.Log{}, 0, 0, fmt.Errorf("entry %d claims a batch starting at %d", l.Index, batch)
	}
	body := b[frameHeaderSize : frameHeaderSize+bodyLen]
	l.Type = raft.LogType(body[0])
	if at := int64(le.Uint64(body[1:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	dataLen := int(le.Uint32(body[9:]))
	if dataLen > bodyLen-bodyFixedSize {
		return raft.Log{}, 0, 0, fmt.Errorf("data length %d exceeds frame body", dataLen)
	}
	if dataLen > 0 {
		l.Data = append([]byte(nil), body[bodyFixedSize:bodyFixedSize+dataLen]...)
	}
	if ext := body[bodyFixedSize+dataLen:]; len(ext) > 0 {
		l.Extensions = append([]byte(nil), ext...)
	}
	n = align8(frameHeaderSize + bodyLen)
	if n > len(b) {
		// Frames are written with their padding, so this is a torn write.
		return raft.Log{}, 0, 0, fmt.Errorf("frame padding cut short at %d bytes", len(b))
	}
	if !allZero(b[frameHeaderSize+bodyLen : n]) {
		return raft.Log{}, 0, 0, errors.New("frame padding is not zero")
	}
	return l, batch, n, nil
}

// findLaterBatch looks, at 8-byte aligned offsets from `from`, for an
// intact frame of a batch that starts after entry want (within scanWindow
// entries). One means the damage at want is not a torn last write: that
// later batch was only written once want's batch had been synced. Intact
// frames of want's own batch may follow a torn write, and are ignored.
func findLaterBatch(b []byte, from int64, want uint64) (int64, uint64, bool) {
	from = int64(align8(int(from)))
	for off := from; off+frameHeaderSize <= int64(len(b)); off += 8 {
		idx := binary.LittleEndian.Uint64(b[off+8:])
		if idx <= want || idx >= want+scanWindow {
			continue
		}
		if _, batch, _, err := decodeFrame(b[off:], idx); err == nil && batch > want {
			return off, idx, true
		}
	}
	return 0, 0, false
}

// FirstIndex implements raft.LogStore.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.first, nil
}

// LastIndex implements raft.LogStore.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last, nil
}

// IsMonotonic implements raft.MonotonicLogStore: entries are contiguous,
// so raft deletes the whole log rather than leave a gap after restoring a
// snapshot.
func (s *Store) IsMonotonic() bool { return true }

// GetLog implements raft.LogStore.
func (s *Store) GetLog(index uint64, l *raft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return errClosed
	}
	if s.first == 0 || index < s.first || index > s.last {
		return raft.ErrLogNotFound
	}
	g := s.segs[s.segFor(index)]
	i := int(index - g.first)
	off := g.offs[i]
	b := make([]byte, g.frameEnd(i)-off)
	if _, err := g.f.ReadAt(b, off); err != nil {
		return fmt.Errorf("raft log %s: read entry %d: %w", g.path, index, err)
	}
	got, _, _, err := decodeFrame(b, index)
	if err != nil {
		return fmt.Errorf("%w: %s: entry %d at offset %d: %v", ErrCorrupt, g.path, index, off, err)
	}
	*l = got
	return nil
}

var errClosed = errors.New("raft log store is closed")

// segFor returns the position of the segment holding index, which must be
// in the log. Callers hold mu.
func (s *Store) segFor(index uint64) int {
	return sort.Search(len(s.segs), func(i int) bool { return s.segs[i].first > index }) - 1
}

// StoreLog implements raft.LogStore.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore. The entries must follow the last one
// stored (any index starts an empty log). When it returns nil they are on
// disk.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	closed, failed, first, last := s.closed, s.failed, s.first, s.last
	var tail *segment
	if len(s.segs) > 0 {
		tail = s.segs[len(s.segs)-1]
	}
	s.mu.RUnlock()
	if err := usable(closed, failed); err != nil {
		return err
	}
	next := logs[0].Index
	if first == 0 && tail != nil && tail.first != next {
		// Segments left with no entry (a suffix deleted to its start, or a
		// segment created just before a crash) cannot take this index.
		s.mu.Lock()
		err := s.deleteAll()
		s.mu.Unlock()
		if err != nil {
			return err
		}
		tail = nil
	}
	if first != 0 && next != last+1 {
		return fmt.Errorf("raft log: store entry %d after %d: entries must be contiguous", next, last)
	}
	for i, l := range logs {
		if l.Index != next+uint64(i) {
			return fmt.Errorf("raft log: batch not contiguous: entry %d follows %d", l.Index, logs[i-1].Index)
		}
		if len(l.Data)+len(l.Extensions) > MaxEntrySize {
			return fmt.Errorf("raft log: entry %d is %d bytes, over the %d limit", l.Index, len(l.Data)+len(l.Extensions), MaxEntrySize)
		}
	}
	// Frames go in runs, one per segment they land in.
	var offs []int64
	var segsAdded []*segment
	i := 0
	for i < len(logs) {
		if tail == nil || (len(tail.offs) > 0 && tail.size >= s.segSize) {
			g, err := s.newSegment(logs[i].Index, tail)
			if err != nil {
				return s.fail(err)
			}
			segsAdded = append(segsAdded, g)
			s.mu.Lock()
			s.segs = append(s.segs, g)
			s.mu.Unlock()
			tail = g
		}
		s.buf = s.buf[:0]
		offs = offs[:0]
		size := tail.size
		j := i
		for ; j < len(logs); j++ {
			if j > i && size+int64(len(s.buf)) >= s.segSize {
				break
			}
			offs = append(offs, size+int64(len(s.buf)))
			s.buf = appendFrame(s.buf, logs[j], next)
		}
		if _, err := tail.f.WriteAt(s.buf, size); err != nil {
			return s.fail(fmt.Errorf("raft log %s: write: %w", tail.path, err))
		}
		if err := fdatasync(tail.f); err != nil {
			return s.fail(fmt.Errorf("raft log %s: sync: %w", tail.path, err))
		}
		s.mu.Lock()
		tail.offs = append(tail.offs, offs...)
		tail.size = size + int64(len(s.buf))
		if s.first == 0 {
			s.first = logs[i].Index
		}
		s.last = logs[j-1].Index
		s.mu.Unlock()
		i = j
	}
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not keep a huge batch's buffer
	}
	return nil
}

// newSegment creates the segment whose first entry is first; prev, when
// set, is the segment it seals, already synced.
func (s *Store) newSegment(first uint64, prev *segment) (*segment, error) {
	path := filepath.Join(s.dir, segFileName(first))
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return nil, fmt.Errorf("raft log: new segment: %w", err)
	}
	err = func() error {
		if _, err := f.Write(segHeader(first)); err != nil {
			return err
		}
		// Space allocated now keeps appends from growing the file, so
		// each append's fdatasync flushes its data and no size change.
		if err := preallocate(f, segHeaderSize, s.segSize-segHeaderSize); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		return SyncDir(s.dir)
	}()
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("raft log %s: new segment: %w", path, err)
	}
	return &segment{first: first, path: path, f: f, size: segHeaderSize}, nil
}

func (s *Store) fail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failLocked(err)
}

// DeleteRange implements raft.LogStore. Raft deletes a prefix (after a
// snapshot), a suffix (entries a new leader overrides), or everything; a
// range strictly inside the log is refused. A suffix is gone from the disk
// before DeleteRange returns; a deleted prefix may come back after a crash,
// which is harmless: those entries are committed and precede the rest.
func (s *Store) DeleteRange(min, max uint64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := usable(s.closed, s.failed); err != nil {
		return err
	}
	if min > max || s.first == 0 || max < s.first || min > s.last {
		return nil
	}
	switch {
	case min <= s.first && max >= s.last:
		return s.deleteAll()
	case min <= s.first:
		return s.deletePrefix(max)
	case max >= s.last:
		return s.deleteSuffix(min)
	default:
		return fmt.Errorf("raft log: delete %d-%d: only a prefix or a suffix of %d-%d can be deleted", min, max, s.first, s.last)
	}
}

func (s *Store) deleteAll() error {
	for i := len(s.segs) - 1; i >= 0; i-- {
		g := s.segs[i]
		g.f.Close()
		if err := os.Remove(g.path); err != nil {
			s.segs = s.segs[:i+1]
			return s.failLocked(fmt.Errorf("raft log: remove %s: %w", g.path, err))
		}
	}
	s.segs = nil
	s.first, s.last = 0, 0
	if err := SyncDir(s.dir); err != nil {
		return s.failLocked(fmt.Errorf("raft log: sync dir: %w", err))
	}
	return nil
}

func (s *Store) deletePrefix(max uint64) error {
	n := 0
	for n < len(s.segs)-1 && s.segs[n].last() <= max {
		n++
	}
	for _, g := range s.segs[:n] {
		g.f.Close()
		if err := os.Remove(g.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return s.failLocked(fmt.Errorf("raft log: remove %s: %w", g.path, err))
		}
	}
	s.segs = append([]*segment(nil), s.segs[n:]...)
	s.first = max + 1
	if n > 0 {
		if err := SyncDir(s.dir); err != nil {
			return s.failLocked(fmt.Errorf("raft log: sync dir: %w", err))
		}
	}
	return nil
}

// deleteSuffix removes entries from min on. Later segments go first, newest
// first, then the segment holding min is cut: a crash at any point leaves a
// prefix of the log as it was.
func (s *Store) deleteSuffix(min uint64) error {
	k := s.segFor(min)
	removed := false
	for i := len(s.segs) - 1; i > k; i-- {
		g := s.segs[i]
		g.f.Close()
		if err := os.Remove(g.path); err != nil {
			s.segs = s.segs[:i+1]
			return s.failLocked(fmt.Errorf("raft log: remove %s: %w", g.path, err))
		}
		s.segs = s.segs[:i]
		removed = true
	}
	if removed {
		if err := SyncDir(s.dir); err != nil {
			return s.failLocked(fmt.Errorf("raft log: sync dir: %w", err))
		}
	}
	g := s.segs[k]
	i := int(min - g.first)
	cut := g.offs[i]
	if err := cutFile(g.f, cut, s.segSize); err != nil {
		return s.failLocked(fmt.Errorf("raft log %s: truncate: %w", g.path, err))
	}
	g.offs = g.offs[:i]
	g.size = cut
	s.last = min - 1 // min > s.first: the log keeps at least one entry
	return nil
}

// usable is the error a write gets from a closed store or one whose earlier
// write failed.
func usable(closed bool, failed error) error {
	switch {
	case closed:
		return errClosed
	case failed != nil:
		return fmt.Errorf("%w: %v", ErrFailed, failed)
	}
	return nil
}

func (s *Store) failLocked(err error) error {
	if s.failed == nil {
		s.failed = err
	}
	return err
}

// Close closes the segment files. Later calls fail.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.closeFiles()
}

func (s *Store) closeFiles() error {
	var errs []error
	for _, g := range s.segs {
		if g.f != nil {
			errs = append(errs, g.f.Close())
			g.f = nil
		}
	}
	return errors.Join(errs...)
}

// SyncDir fsyncs a directory, making the creation, removal and renaming of
// its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
