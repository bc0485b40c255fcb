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
// entry ("00000000000000000001.log"). A segment starts with a header and
// holds frames, each 8-byte aligned:
//
//	header (32 bytes): magic "xcelog02", first index, preallocated size,
//	        CRC-32C of the three, 4 zero bytes
//	frame:
//	len   uint32  body length
//	crc   uint32  CRC-32C of len, index, term, batch and body
//	index uint64
//	term  uint64
//	batch uint64  index of the first entry of the StoreLogs call it came in
//	body  type (1 byte), appended-at (int64 ns), data length (uint32), data, extensions
//	pad   zeros to the next multiple of 8
//
// Segments written before the preallocated size was recorded have a 24-byte
// header (magic "xcelog01", first index, CRC-32C of the two, 4 zero bytes)
// and were preallocated to DefaultSegmentSize; both versions are read.
//
// A segment is created whole (header synced and space allocated before it is
// renamed into the directory) and never shrinks: deleted frames are
// overwritten with zeros. So a segment file shorter than its preallocated
// size was cut by something else, and Open refuses it (ErrLost).
//
// Entries are contiguous across segments; a segment is sealed once the next
// one exists.
//
// # Recovery
//
// Open reads every segment and checks every frame. A write cut short by a
// crash can only damage the end of the last segment, after everything
// acknowledged: such a tail is zeroed. The disk may have kept some of that
// write's frames and not others, so intact frames of the same batch may
// follow the damage. The caller may also tell Open the last index it knows
// was durable (Options.Durable, kept outside the log): damage at or below
// it is not a torn write, and a log ending before it has lost entries.
// Damage anywhere else (a bad frame in a sealed segment, a gap between
// segments, a bad frame followed by an intact frame of a later batch) fails
// Open with ErrCorrupt or ErrLost and changes nothing, so a node never
// starts with acknowledged entries silently missing.
//
// # Failures
//
// A failed write is reported as a *WriteError. Most leave the files as they
// were acknowledged (a segment that could not be created, frames that could
// not be written past the last acknowledged one), and the next StoreLogs
// simply tries again. A failed sync does not: the kernel may have dropped
// the pages it could not write, so what the file holds is unknown. That
// failure is sticky (errors.Is(err, ErrFailed)): every later write fails
// until the node restarts and Open checks the files again.
package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrCorrupt means a segment file could not be read back as written.
var ErrCorrupt = errors.New("raft log is corrupt")

// ErrLost means entries the log once held durably are missing: a segment
// is shorter than it was written, missing between two others, or the log
// ends before Options.Durable.
var ErrLost = errors.New("raft log lost entries")

// ErrFailed matches (errors.Is) the WriteError of a failed sync and every
// error the store returns after one. The store refuses writes from then on.
var ErrFailed = errors.New("raft log store failed")

// stickyAdvice ends the message of a sticky failure.
const stickyAdvice = "what the disk holds is unknown: restart the node once the disk is healthy; it re-checks every frame at start"

// WriteError is a failed write, sync or file operation of the store.
// errors.Is sees through it to the cause (syscall.ENOSPC, syscall.EDQUOT,
// syscall.EIO, ...).
type WriteError struct {
	Path string // the file or directory
	Op   string // what failed
	Err  error  // the cause
	// Sticky: a sync failed, the store refuses writes until the node
	// restarts (errors.Is(err, ErrFailed)). Otherwise the files hold what
	// was acknowledged and the next write tries again.
	Sticky bool
}

func (e *WriteError) Error() string {
	msg := fmt.Sprintf("raft log %s: %s: %v", e.Path, e.Op, e.Err)
	if e.Sticky {
		msg += "; " + stickyAdvice
	}
	return msg
}

func (e *WriteError) Unwrap() error { return e.Err }

// Is makes a sticky WriteError match ErrFailed.
func (e *WriteError) Is(target error) bool { return target == ErrFailed && e.Sticky }

const (
	segMagicV1      = "xcelog01"
	segMagic        = "xcelog02"
	segHeaderSizeV1 = 24
	segHeaderSize   = 32
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

// syncData makes a segment's appended frames durable; tests replace it to
// make a sync fail.
var syncData = fdatasync

// Options tune Open.
type Options struct {
	// SegmentSize is the size past which a new segment is started, and the
	// space a new segment is given; zero means DefaultSegmentSize.
	SegmentSize int64
	// Prescan, if set, is a check of the segments begun earlier
	// (StartPrescan): Open waits for it and takes what it found.
	Prescan *Prescan
	// prescan marks the options of a Prescan's own check.
	prescan bool
	// Durable is the last index the caller knows the log made durable, or
	// zero. The log must hold it unless it was deleted since (the caller
	// lowers its record before deleting the end of the log). Open refuses a
	// log that ends before it (ErrLost) and a damaged frame at or below it
	// (ErrCorrupt): that is not the tail of an unacknowledged write.
	Durable uint64
	// CutFrom, when not zero, is the first index of a suffix delete that
	// may have been interrupted: frames from it on may be any mix of the
	// deleted frames and zeros, and Open zeroes them from the first damaged
	// one without looking further.
	CutFrom uint64
}

// Recovery says what Open found.
type Recovery struct {
	Segments int
	// TornBytes were zeroed at the end of TornFile, after entry TornAfter
	// (0: the segment kept no entry): the tail of a write a crash
	// interrupted, or damage to entries after Options.Durable; Open cannot
	// tell them apart.
	TornBytes int64
	TornFile  string
	TornAfter uint64
	// CutResumed is set when the zeroed bytes were left by an interrupted
	// suffix delete (at or after Options.CutFrom).
	CutResumed bool
}

type segment struct {
	first    uint64
	path     string
	f        *os.File
	hdr      int64   // header size: where the first frame starts
	prealloc int64   // the file's size when it was created
	offs     []int64 // offs[i] is where entry first+i starts
	size     int64   // end of the last complete frame
	// written is the furthest end of any write attempted in the file: a
	// failed write may have left bytes past size.
	written int64
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
	failed      *WriteError
	closed      bool
}

var _ raft.LogStore = (*Store)(nil)
var _ raft.MonotonicLogStore = (*Store)(nil)

// Open opens or creates the log in dir. A damaged log fails with ErrCorrupt,
// one that lost entries with ErrLost, and either is left as it was found.
func Open(dir string, opts Options) (*Store, Recovery, error) {
	if opts.SegmentSize <= 0 {
		opts.SegmentSize = DefaultSegmentSize
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, Recovery{}, err
	}
	names, err := segmentNames(dir)
	if err != nil {
		return nil, Recovery{}, err
	}
	s := &Store{dir: dir, segSize: opts.SegmentSize}
	// Check everything before changing anything.
	tail, err := s.scan(names, opts)
	if err == nil {
		var rec Recovery
		if rec, err = s.repair(tail); err == nil {
			return s, rec, nil
		}
	}
	s.closeFiles()
	return nil, Recovery{}, err
}

// torn is a segment's damaged tail that Open zeroes: bytes at to end.
type torn struct {
	g       *segment
	at, end int64
	resumed bool // left by an interrupted suffix delete
}

// scan reads and checks every segment, in order, into s.segs, and sets
// s.first and s.last. It changes no file; it returns the tail to zero, if
// any.
func (s *Store) scan(names []segName, opts Options) (*torn, error) {
	var tail *torn
	for _, r := range scanSegments(s.dir, names, opts) {
		g, t, err := r.g, r.t, r.err
		if err != nil {
			return nil, err
		}
		if t != nil {
			tail = t
		}
		if len(s.segs) > 0 {
			prev := s.segs[len(s.segs)-1]
			if len(prev.offs) == 0 {
				return nil, fmt.Errorf("%w: %s holds no entry but is followed by %s", ErrCorrupt, prev.path, g.path)
			}
			if prev.last()+1 != g.first {
				return nil, fmt.Errorf("%w: %s ends at entry %d but %s starts at %d: the entries between are missing",
					ErrLost, prev.path, prev.last(), g.path, g.first)
			}
		}
		s.segs = append(s.segs, g)
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
	if opts.Durable != 0 && s.last < opts.Durable {
		if len(s.segs) == 0 {
			return nil, fmt.Errorf("%w: %s holds no segment, but entries up to %d were made durable", ErrLost, s.dir, opts.Durable)
		}
		g := s.segs[len(s.segs)-1]
		return nil, fmt.Errorf("%w: %s ends after %s, but entries up to %d were made durable", ErrLost, g.path, describeEnd(g), opts.Durable)
	}
	return tail, nil
}

// scanned is what scanSegment returned for a segment.
type scanned struct {
	g   *segment
	t   *torn
	err error
}

// scanSegments scans the segments in dir on as many goroutines as the
// process has cores: each segment's check stands alone, and a restart
// waits for them all. The results are in the segments' order.
func scanSegments(dir string, names []segName, opts Options) []scanned {
	var pre []scanned
	if p := opts.Prescan; p != nil {
		<-p.done
		if slices.Equal(p.names, names) {
			pre = p.out
		}
	}
	out := make([]scanned, len(names))
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i, n := range names {
		if pre != nil && pre[i].err != errUndecided {
			out[i] = pre[i]
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			g, t, err := scanSegment(filepath.Join(dir, n.name), n.first, i == len(names)-1, opts)
			out[i] = scanned{g, t, err}
		})
	}
	wg.Wait()
	return out
}

// Prescan is Open's check of the segments, begun before Open is called,
// while the caller does what Open's options wait on. It changes nothing.
type Prescan struct {
	done  chan struct{} // closed once out is set
	names []segName
	out   []scanned
}

// errUndecided marks a segment whose frames end in damage: whether that
// is a torn write depends on Open's options, so Open checks it again.
var errUndecided = errors.New("damaged frames, left to Open")

// StartPrescan begins checking the segments in dir on goroutines of its
// own. Pass it to Open (Options.Prescan), which takes what it found where
// it finds the same segments by name; nothing may write to dir in between.
// Where Open is not called, Wait for it.
func StartPrescan(dir string) *Prescan {
	p := &Prescan{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		names, err := listSegments(dir)
		if err != nil {
			return
		}
		p.names = names
		p.out = scanSegments(dir, names, Options{prescan: true})
	}()
	return p
}

// Wait waits for the check to end.
func (p *Prescan) Wait() {
	if p != nil {
		<-p.done
	}
}

// scanSegment reads the segment at path, which should start at entry
// first, and indexes its frames; a damaged tail of the last segment is
// returned as torn when it may be the end of an interrupted write.
func scanSegment(path string, first uint64, isLast bool, opts Options) (*segment, *torn, error) {
	// Most segments are clean: the chunked check passes them. The rest
	// are looked at whole, to tell damage from a torn write and say where.
	if g, err := streamSegment(path, first); err == nil {
		return g, nil, nil
	}
	return scanWhole(path, first, isLast, opts)
}

// scanWhole is scanSegment's check of a segment mapped (or read) whole.
func scanWhole(path string, first uint64, isLast bool, opts Options) (_ *segment, _ *torn, err error) {
	b, done, err := readSegment(path)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	// A file cut short under the mapping faults on read: an error, not a
	// crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: read failed: %v", ErrCorrupt, path, r)
		}
	}()
	hdr, prealloc, err := checkSegHeader(b, first)
	if errors.Is(err, errHeaderShort) {
		return nil, nil, fmt.Errorf("%w: %s is %d bytes, cut short inside its header", ErrLost, path, len(b))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	g := &segment{first: first, path: path, hdr: hdr, prealloc: prealloc}
	off := hdr
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
	g.size, g.written = off, off
	if int64(len(b)) < prealloc {
		return nil, nil, fmt.Errorf("%w: %s is %d bytes, shorter than the %d it was created with: cut short after %s",
			ErrLost, path, len(b), prealloc, describeEnd(g))
	}
	// Past the last frame a segment holds zeros: its preallocated, unused
	// space.
	if ferr == nil || allZero(b[off:]) {
		return g, nil, nil
	}
	if opts.prescan {
		return nil, nil, errUndecided
	}
	want := g.first + uint64(len(g.offs))
	switch {
	case !isLast:
		return nil, nil, fmt.Errorf("%w: %s: entry %d at offset %d: %v", ErrCorrupt, path, want, off, ferr)
	case opts.CutFrom != 0 && want >= opts.CutFrom:
		// Left by an interrupted suffix delete.
		return g, &torn{g: g, at: off, end: off + lastNonZero(b[off:]), resumed: true}, nil
	case want <= opts.Durable:
		return nil, nil, fmt.Errorf("%w: %s: entry %d at offset %d: %v; entries up to %d were durable, so this is damage, not a torn write",
			ErrCorrupt, path, want, off, ferr, opts.Durable)
	}
	if at, idx, found := findLaterBatch(b, off+8, want); found {
		return nil, nil, fmt.Errorf("%w: %s: entry %d at offset %d: %v; entry %d of a later write follows intact at offset %d, so this is not a torn write",
			ErrCorrupt, path, want, off, ferr, idx, at)
	}
	return g, &torn{g: g, at: off, end: off + lastNonZero(b[off:])}, nil
}

// repair opens the checked segments and zeroes the torn tail, if any.
func (s *Store) repair(tail *torn) (Recovery, error) {
	var rec Recovery
	for _, g := range s.segs {
		f, err := os.OpenFile(g.path, os.O_RDWR, 0)
		if err != nil {
			return rec, err
		}
		g.f = f
	}
	if tail != nil {
		// Zeroed, not truncated: the segment keeps its preallocated size.
		if err := zeroRange(tail.g.f, tail.at, tail.end); err != nil {
			return rec, fmt.Errorf("raft log %s: zero a torn write: %w", tail.g.path, err)
		}
		if err := syncData(tail.g.f); err != nil {
			return rec, fmt.Errorf("raft log %s: zero a torn write: sync: %w", tail.g.path, err)
		}
		rec.TornBytes, rec.TornFile, rec.CutResumed = tail.end-tail.at, tail.g.path, tail.resumed
		if len(tail.g.offs) > 0 {
			rec.TornAfter = tail.g.last()
		} else if tail.g.first > 1 {
			rec.TornAfter = tail.g.first - 1
		}
	}
	rec.Segments = len(s.segs)
	return rec, nil
}

// describeEnd says where a segment's intact entries end.
func describeEnd(g *segment) string {
	if len(g.offs) == 0 {
		return "its header, with no entry"
	}
	return fmt.Sprintf("entry %d", g.last())
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
	for _, e := range ents {
		if name := e.Name(); strings.HasSuffix(name, segSuffix+tmpSuffix) {
			// A segment being created when the process died; it was
			// never renamed into the log.
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return nil, err
			}
		}
	}
	return listSegments(dir)
}

// listSegments lists the segments in dir, in order, changing nothing.
func listSegments(dir string) ([]segName, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []segName
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, segSuffix+tmpSuffix) {
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

// errHeaderShort: the file ends inside its header.
var errHeaderShort = errors.New("header cut short")

// checkSegHeader checks the header of a segment named for entry first and
// returns its size and the segment's preallocated size.
func checkSegHeader(b []byte, first uint64) (hdr, prealloc int64, err error) {
	if len(b) < segHeaderSizeV1 {
		return 0, 0, errHeaderShort
	}
	le := binary.LittleEndian
	var got uint64
	switch string(b[:8]) {
	case segMagic:
		if len(b) < segHeaderSize {
			return 0, 0, errHeaderShort
		}
		if crc32.Checksum(b[:24], castagnoli) != le.Uint32(b[24:]) {
			return 0, 0, errors.New("header checksum mismatch")
		}
		got, hdr, prealloc = le.Uint64(b[8:]), segHeaderSize, int64(le.Uint64(b[16:]))
		if prealloc < segHeaderSize || prealloc > 1<<40 {
			return 0, 0, fmt.Errorf("header says preallocated size %d", prealloc)
		}
	case segMagicV1:
		if crc32.Checksum(b[:16], castagnoli) != le.Uint32(b[16:]) {
			return 0, 0, errors.New("header checksum mismatch")
		}
		got, hdr, prealloc = le.Uint64(b[8:]), segHeaderSizeV1, DefaultSegmentSize
	default:
		return 0, 0, errors.New("not a segment file (bad magic)")
	}
	if got != first {
		return 0, 0, fmt.Errorf("header says first entry %d, file name says %d", got, first)
	}
	return hdr, prealloc, nil
}

// segHeader is the header of a segment starting at entry first and
// preallocated to size bytes.
func segHeader(first uint64, size int64) []byte {
	b := make([]byte, segHeaderSize)
	copy(b, segMagic)
	binary.LittleEndian.PutUint64(b[8:], first)
	binary.LittleEndian.PutUint64(b[16:], uint64(size))
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], castagnoli))
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

var zeros [64 << 10]byte

// zeroRange overwrites [from, to) of f with zeros, unsynced. The file keeps
// its size and its allocated space.
func zeroRange(f *os.File, from, to int64) error {
	for off := from; off < to; {
		n := min(to-off, int64(len(zeros)))
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// preallocate makes f at least size bytes long, with the space allocated
// where the file system can: appends then change no file size, so each
// append's fdatasync flushes its data only.
func preallocate(f *os.File, size int64) error {
	ok, err := fallocate(f, 0, size)
	if err != nil || ok {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < size {
		// A sparse extension: the file has its full size, and the space
		// is taken as it is written.
		return f.Truncate(size)
	}
	return nil
}

// ProbeSpace checks that a file system takes a new segment: it creates the
// file at path with size bytes allocated (written with zeros where space
// cannot be allocated ahead), syncs it and removes it. A full disk fails
// it with an error matching syscall.ENOSPC or syscall.EDQUOT.
func ProbeSpace(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	err = func() error {
		ok, err := fallocate(f, 0, size)
		if err != nil {
			return err
		}
		if !ok {
			if err := zeroRange(f, 0, size); err != nil {
				return err
			}
		}
		return f.Sync()
	}()
	return errors.Join(err, f.Close(), os.Remove(path))
}

// allZero reports whether b holds only zeros. It compares a block at a
// time against zeros, which the runtime does many bytes to an
// instruction: a segment's unused space is most of what Open reads.
func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

var zeroBlock [4096]byte

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
// frame's length with its padding. The entry's slices are views of b:
// checking a segment copies nothing, and a caller that keeps the entry
// past b's life copies them.
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
		l.Data = body[bodyFixedSize : bodyFixedSize+dataLen : bodyFixedSize+dataLen]
	}
	if ext := body[bodyFixedSize+dataLen:]; len(ext) > 0 {
		l.Extensions = ext[:len(ext):len(ext)]
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
	// The entry's slices are views of b, which is its own.
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
//
// A storage failure returns a *WriteError. When the batch spans segments,
// the entries of the segments written before the failure are stored
// (LastIndex says how far). A failure to create a segment or to write
// frames leaves what was acknowledged intact, and the next call tries
// again; a failed sync is sticky (errors.Is(err, ErrFailed)).
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
	defer func() {
		if cap(s.buf) > 4<<20 {
			s.buf = nil // do not keep a huge batch's buffer
		}
	}()
	// Frames go in runs, one per segment they land in.
	var offs []int64
	i := 0
	for i < len(logs) {
		if tail == nil || (len(tail.offs) > 0 && tail.size >= tail.prealloc) {
			g, err := s.newSegment(logs[i].Index)
			if err != nil {
				return err
			}
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
			if j > i && size+int64(len(s.buf)) >= tail.prealloc {
				break
			}
			offs = append(offs, size+int64(len(s.buf)))
			s.buf = appendFrame(s.buf, logs[j], next)
		}
		tail.written = max(tail.written, size+int64(len(s.buf)))
		if _, err := tail.f.WriteAt(s.buf, size); err != nil {
			// Nothing past size was acknowledged and size is unchanged:
			// the next call writes there again. The pages were never
			// reported synced, so rewriting them is safe.
			return &WriteError{Path: tail.path, Op: fmt.Sprintf("write entries %d-%d at offset %d", logs[i].Index, logs[j-1].Index, size), Err: err}
		}
		if err := syncData(tail.f); err != nil {
			return s.fail(&WriteError{Path: tail.path, Op: fmt.Sprintf("sync entries %d-%d", logs[i].Index, logs[j-1].Index), Err: err, Sticky: true})
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
	return nil
}

// newSegment creates the segment whose first entry is first, whole: its
// header synced and its space allocated before it enters the directory. A
// failure leaves the directory as it was (the error is not sticky) unless
// the half-made segment could not be taken out again.
func (s *Store) newSegment(first uint64) (*segment, error) {
	path := filepath.Join(s.dir, segFileName(first))
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, &WriteError{Path: tmp, Op: "create segment", Err: err}
	}
	op, renamed := "", false
	err = func() error {
		op = "write segment header"
		if _, err := f.Write(segHeader(first, s.segSize)); err != nil {
			return err
		}
		op = "allocate segment space"
		if err := preallocate(f, s.segSize); err != nil {
			return err
		}
		op = "sync new segment"
		if err := f.Sync(); err != nil {
			return err
		}
		op = "rename new segment"
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
		renamed = true
		op = "sync directory"
		return SyncDir(s.dir)
	}()
	if err == nil {
		// Under its own name, which errors then show.
		g, oerr := os.OpenFile(path, os.O_RDWR, 0)
		f.Close()
		if oerr == nil {
			return &segment{first: first, path: path, f: g, hdr: segHeaderSize, prealloc: s.segSize, size: segHeaderSize, written: segHeaderSize}, nil
		}
		op, err = "open new segment", oerr
	} else {
		f.Close()
	}
	werr := &WriteError{Path: tmp, Op: op, Err: err}
	if !renamed {
		os.Remove(tmp)
		return nil, werr
	}
	// A segment with no entry would be harmless at the end of the log, but
	// the log may go on elsewhere (after a suffix delete): take it out.
	werr.Path = path
	if rerr := os.Remove(path); rerr != nil {
		werr.Sticky = true
		werr.Err = errors.Join(err, rerr)
	} else if serr := SyncDir(s.dir); serr != nil {
		werr.Sticky = true
		werr.Err = errors.Join(err, serr)
	}
	if werr.Sticky {
		return nil, s.fail(werr)
	}
	return nil, werr
}

func (s *Store) fail(err *WriteError) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failLocked(err)
}

// DeleteRange implements raft.LogStore. Raft deletes a prefix (after a
// snapshot), a suffix (entries a new leader overrides), or everything; a
// range strictly inside the log is refused. A suffix is gone from the disk
// before DeleteRange returns; a deleted prefix may come back after a crash,
// which is harmless: those entries are committed and precede the rest. A
// failure is sticky: what the files hold is then unknown.
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

// deleteAll removes every segment, newest first: a crash leaves a prefix of
// the log.
func (s *Store) deleteAll() error {
	for i := len(s.segs) - 1; i >= 0; i-- {
		g := s.segs[i]
		g.f.Close()
		if err := os.Remove(g.path); err != nil {
			s.segs = s.segs[:i+1]
			return s.failLocked(&WriteError{Path: g.path, Op: "remove", Err: err, Sticky: true})
		}
	}
	s.segs = nil
	s.first, s.last = 0, 0
	if err := SyncDir(s.dir); err != nil {
		return s.failLocked(&WriteError{Path: s.dir, Op: "sync directory", Err: err, Sticky: true})
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
			return s.failLocked(&WriteError{Path: g.path, Op: "remove", Err: err, Sticky: true})
		}
	}
	s.segs = append([]*segment(nil), s.segs[n:]...)
	s.first = max + 1
	if n > 0 {
		if err := SyncDir(s.dir); err != nil {
			return s.failLocked(&WriteError{Path: s.dir, Op: "sync directory", Err: err, Sticky: true})
		}
	}
	return nil
}

// deleteSuffix removes entries from min on. Later segments go first, newest
// first, then the frames from min on in the segment holding it are zeroed
// (the file keeps its preallocated size). A crash while later segments go
// leaves a prefix of the log; one while frames are zeroed may leave any mix
// of them and zeros, which Open zeroes when told the cut (Options.CutFrom).
func (s *Store) deleteSuffix(min uint64) error {
	k := s.segFor(min)
	removed := false
	for i := len(s.segs) - 1; i > k; i-- {
		g := s.segs[i]
		g.f.Close()
		if err := os.Remove(g.path); err != nil {
			s.segs = s.segs[:i+1]
			return s.failLocked(&WriteError{Path: g.path, Op: "remove", Err: err, Sticky: true})
		}
		s.segs = s.segs[:i]
		removed = true
	}
	if removed {
		if err := SyncDir(s.dir); err != nil {
			return s.failLocked(&WriteError{Path: s.dir, Op: "sync directory", Err: err, Sticky: true})
		}
	}
	g := s.segs[k]
	i := int(min - g.first)
	cut := g.offs[i]
	if err := zeroRange(g.f, cut, max(g.size, g.written)); err != nil {
		return s.failLocked(&WriteError{Path: g.path, Op: fmt.Sprintf("zero entries from %d", min), Err: err, Sticky: true})
	}
	if err := syncData(g.f); err != nil {
		return s.failLocked(&WriteError{Path: g.path, Op: fmt.Sprintf("sync the deletion of entries from %d", min), Err: err, Sticky: true})
	}
	g.offs = g.offs[:i]
	g.size, g.written = cut, cut
	s.last = min - 1 // min > s.first: the log keeps at least one entry
	return nil
}

// usable is the error a write gets from a closed store or one whose sync
// failed earlier.
func usable(closed bool, failed *WriteError) error {
	switch {
	case closed:
		return errClosed
	case failed != nil:
		return fmt.Errorf("raft log store failed earlier: %w", failed)
	}
	return nil
}

// failLocked makes err, a sticky failure, the store's: writes fail from now
// on. Callers hold mu.
func (s *Store) failLocked(err *WriteError) error {
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
