package raftlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func open(t *testing.T, dir string, segSize int64) (*Store, Recovery) {
	t.Helper()
	s, rec, err := Open(dir, Options{SegmentSize: segSize})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, rec
}

func entry(i uint64) *raft.Log {
	l := &raft.Log{Index: i, Term: 1 + i/10, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry-%d-%s", i, strings.Repeat("x", int(i%37))))}
	if i%3 == 0 {
		l.Extensions = []byte{byte(i), 0, 1}
	}
	if i%2 == 0 {
		l.AppendedAt = time.Unix(1700000000, int64(i)).UTC()
	}
	if i%5 == 0 {
		l.Data = nil
		l.Type = raft.LogNoop
	}
	return l
}

func storeRange(t *testing.T, s *Store, from, to uint64, batch int) {
	t.Helper()
	for i := from; i <= to; {
		var logs []*raft.Log
		for j := 0; j < batch && i <= to; j++ {
			logs = append(logs, entry(i))
			i++
		}
		if err := s.StoreLogs(logs); err != nil {
			t.Fatalf("StoreLogs(%d..%d): %v", logs[0].Index, logs[len(logs)-1].Index, err)
		}
	}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

// checkLog asserts the store holds exactly entries first..last as entry()
// makes them.
func checkLog(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("log is %d..%d, want %d..%d", f, l, first, last)
	}
	for _, i := range []uint64{first - 1, last + 1} {
		var got raft.Log
		if err := s.GetLog(i, &got); i != 0 && !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) outside %d..%d: %v, want ErrLogNotFound", i, first, last, err)
		}
	}
	if first == 0 {
		return
	}
	for i := first; i <= last; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if want := entry(i); !sameLog(&got, want) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, *want)
		}
	}
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(m)
	return m
}

func dirHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	for _, p := range segFiles(t, dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(p), len(b))
		h.Write(b)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func reopen(t *testing.T, s *Store, dir string, segSize int64) (*Store, Recovery) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return open(t, dir, segSize)
}

func TestStoreAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	checkLog(t, s, 0, 0)
	storeRange(t, s, 1, 100, 7)
	if err := s.StoreLog(entry(101)); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 1, 101)
	s, rec := reopen(t, s, dir, 0)
	if rec.TornBytes != 0 || rec.Segments != 1 {
		t.Fatalf("clean reopen reported %+v", rec)
	}
	checkLog(t, s, 1, 101)
	storeRange(t, s, 102, 120, 5)
	s, _ = reopen(t, s, dir, 0)
	checkLog(t, s, 1, 120)
}

func TestFirstEntryMayStartAnywhere(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1000, 1010, 3)
	s, _ = reopen(t, s, dir, 0)
	checkLog(t, s, 1000, 1010)
}

func TestRefusesGapsAndOverlaps(t *testing.T) {
	s, _ := open(t, t.TempDir(), 0)
	storeRange(t, s, 1, 10, 10)
	for _, logs := range [][]*raft.Log{
		{entry(12)},
		{entry(10)},
		{entry(11), entry(13)},
	} {
		if err := s.StoreLogs(logs); err == nil || !strings.Contains(err.Error(), "contiguous") {
			t.Fatalf("StoreLogs(%d..): %v, want a contiguity error", logs[0].Index, err)
		}
	}
	checkLog(t, s, 1, 10)
	// A refused batch is not a failed store.
	storeRange(t, s, 11, 12, 2)
	checkLog(t, s, 1, 12)
}

func TestSegmentsRoll(t *testing.T) {
	dir := t.TempDir()
	const seg = 1024
	s, _ := open(t, dir, seg)
	storeRange(t, s, 1, 300, 9)
	n := len(segFiles(t, dir))
	if n < 10 {
		t.Fatalf("%d segments for 300 entries at %d bytes a segment", n, seg)
	}
	checkLog(t, s, 1, 300)
	s, rec := reopen(t, s, dir, seg)
	if rec.Segments != n {
		t.Fatalf("reopen found %d segments, want %d", rec.Segments, n)
	}
	checkLog(t, s, 1, 300)
}

func TestDeletePrefix(t *testing.T) {
	dir := t.TempDir()
	const seg = 1024
	s, _ := open(t, dir, seg)
	storeRange(t, s, 1, 300, 10)
	before := len(segFiles(t, dir))
	if err := s.DeleteRange(1, 200); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 201, 300)
	if after := len(segFiles(t, dir)); after >= before {
		t.Fatalf("deleting 200 of 300 entries kept all %d segments", after)
	}
	storeRange(t, s, 301, 310, 4)
	// Entries of the first kept segment before 201 may come back after a
	// restart; entries of removed segments must not, and the log stays
	// contiguous.
	s, _ = reopen(t, s, dir, seg)
	f, _ := s.FirstIndex()
	if f > 201 || f < 150 {
		t.Fatalf("first index after reopen %d", f)
	}
	checkLog(t, s, f, 310)
}

func TestDeleteSuffixIsDurable(t *testing.T) {
	dir := t.TempDir()
	const seg = 1024
	s, _ := open(t, dir, seg)
	storeRange(t, s, 1, 300, 10)
	if err := s.DeleteRange(150, 300); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 1, 149)
	// The overriding entries differ from the deleted ones.
	over := &raft.Log{Index: 150, Term: 99, Type: raft.LogCommand, Data: []byte("new leader")}
	if err := s.StoreLogs([]*raft.Log{over}); err != nil {
		t.Fatal(err)
	}
	s, _ = reopen(t, s, dir, seg)
	if l, _ := s.LastIndex(); l != 150 {
		t.Fatalf("last index after reopen %d, want 150", l)
	}
	var got raft.Log
	if err := s.GetLog(150, &got); err != nil || !sameLog(&got, over) {
		t.Fatalf("GetLog(150) = %+v, %v; want the overriding entry", got, err)
	}
	// Delete a suffix that starts a segment exactly, then one inside the
	// first segment.
	s.DeleteRange(150, 150)
	storeRange(t, s, 150, 160, 11)
	s.DeleteRange(2, 160)
	checkLog(t, s, 1, 1)
	s, _ = reopen(t, s, dir, seg)
	checkLog(t, s, 1, 1)
	storeRange(t, s, 2, 5, 2)
	checkLog(t, s, 1, 5)
}

func TestDeleteAllThenStartElsewhere(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 1024)
	storeRange(t, s, 1, 100, 10)
	if err := s.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	checkLog(t, s, 0, 0)
	if n := len(segFiles(t, dir)); n != 0 {
		t.Fatalf("%d segment files left after deleting everything", n)
	}
	// After a snapshot restore the log starts past a gap.
	storeRange(t, s, 500, 510, 3)
	s, _ = reopen(t, s, dir, 1024)
	checkLog(t, s, 500, 510)
}

func TestDeleteInsideRefused(t *testing.T) {
	s, _ := open(t, t.TempDir(), 0)
	storeRange(t, s, 1, 10, 10)
	if err := s.DeleteRange(3, 5); err == nil {
		t.Fatal("deleting 3-5 of 1-10 succeeded")
	}
	checkLog(t, s, 1, 10)
	// Ranges outside the log delete nothing.
	for _, r := range [][2]uint64{{11, 20}, {0, 0}, {5, 4}} {
		if err := s.DeleteRange(r[0], r[1]); err != nil {
			t.Fatalf("DeleteRange(%d, %d): %v", r[0], r[1], err)
		}
	}
	checkLog(t, s, 1, 10)
}

// lastSeg returns the path and bytes of the newest segment.
func lastSeg(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	m := segFiles(t, dir)
	b, err := os.ReadFile(m[len(m)-1])
	if err != nil {
		t.Fatal(err)
	}
	return m[len(m)-1], b
}

func TestTornTailIsCut(t *testing.T) {
	for _, keep := range []int{-1, -9, -17, -30, -100} {
		t.Run(fmt.Sprint(keep), func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir, 0)
			storeRange(t, s, 1, 20, 4)
			end20 := s.segs[0].size
			storeRange(t, s, 21, 24, 4) // the batch the crash tears
			end24 := s.segs[0].size
			s.Close()
			path, b := lastSeg(t, dir)
			from := end24 + int64(keep)
			if from < end20 {
				t.Skip("cut reaches into an acknowledged batch")
			}
			if allZero(b[from:end24]) {
				t.Skip("the cut bytes are padding, zero already")
			}
			// The disk kept the start of the write, not its end.
			clear(b[from:end24])
			os.WriteFile(path, b, 0o640)
			s, rec := open(t, dir, 0)
			if rec.TornBytes == 0 || rec.TornFile != path {
				t.Fatalf("Open reported %+v for a tail cut by %d", rec, -keep)
			}
			l, _ := s.LastIndex()
			if l < 20 || l > 23 {
				t.Fatalf("last index %d after tearing the batch 21..24", l)
			}
			if rec.TornAfter != l {
				t.Fatalf("TornAfter %d, last index %d", rec.TornAfter, l)
			}
			checkLog(t, s, 1, l)
			checkSizes(t, dir)
			storeRange(t, s, l+1, 30, 3)
			s, rec = reopen(t, s, dir, 0)
			if rec.TornBytes != 0 {
				t.Fatalf("second reopen cut %d more bytes", rec.TornBytes)
			}
			checkLog(t, s, 1, 30)
		})
	}
}

// checkSizes asserts no segment in dir is shorter than its preallocated
// size.
func checkSizes(t *testing.T, dir string) {
	t.Helper()
	for _, p := range segFiles(t, dir) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		first, _ := strconv.ParseUint(strings.TrimSuffix(filepath.Base(p), segSuffix), 10, 64)
		_, prealloc, err := checkSegHeader(b, first)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if int64(len(b)) < prealloc {
			t.Fatalf("%s is %d bytes, shorter than its preallocated %d", p, len(b), prealloc)
		}
	}
}

func TestZeroTailIsFreeSpace(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 20, 4)
	s.Close()
	path, b := lastSeg(t, dir)
	if len(b) != DefaultSegmentSize {
		t.Fatalf("segment is %d bytes, want it preallocated to %d", len(b), DefaultSegmentSize)
	}
	// Beyond its preallocated size, as when a batch overran it.
	os.WriteFile(path, append(b, make([]byte, 4096)...), 0o640)
	s, rec := open(t, dir, 0)
	if rec.TornBytes != 0 {
		t.Fatalf("TornBytes %d for a tail of zeros", rec.TornBytes)
	}
	checkLog(t, s, 1, 20)
}

// TestShortSegmentIsLost: a segment is created whole and never shrinks, so
// one shorter than its preallocated size was cut by something else: cut at
// a frame boundary (which reads back as a shorter log that is whole), to
// its header, inside its header, or emptied.
func TestShortSegmentIsLost(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 20, 4)
	end10 := s.segs[0].offs[10]
	s.Close()
	path, orig := lastSeg(t, dir)
	for _, c := range []struct {
		name string
		size int64
		what string
	}{
		{"frame boundary", end10, "cut short after entry 10"},
		{"header", segHeaderSize, "cut short after its header"},
		{"inside header", 10, "cut short inside its header"},
		{"inside header past its first 24 bytes", 28, "is 28 bytes, cut short inside its header"},
		{"empty", 0, "is 0 bytes"},
		{"one byte short", int64(len(orig)) - 1, "shorter than the 16777216"},
	} {
		t.Run(c.name, func(t *testing.T) {
			os.WriteFile(path, orig[:c.size], 0o640)
			mustFail(t, dir, Options{}, ErrLost, c.what, path)
		})
	}
	os.WriteFile(path, orig, 0o640)
	s, _ = open(t, dir, 0)
	checkLog(t, s, 1, 20)
}

// TestNewSegmentNameTaken: a file a new segment cannot start in (left by
// a crash mid-creation, before the fix of this log) is refused at Open,
// not removed: it is the last segment, cut short.
func TestNewSegmentNameTaken(t *testing.T) {
	for _, size := range []int{0, 10} {
		dir := t.TempDir()
		s, _ := open(t, dir, 0)
		storeRange(t, s, 1, 20, 4)
		s.Close()
		os.WriteFile(filepath.Join(dir, segFileName(21)), make([]byte, size), 0o640)
		mustFail(t, dir, Options{}, ErrLost, segFileName(21))
	}
}

// mustFail checks Open fails with target, mentioning each of what, and
// leaves the files as they were.
func mustFail(t *testing.T, dir string, opts Options, target error, what ...string) {
	t.Helper()
	before := dirHash(t, dir)
	s, _, err := Open(dir, opts)
	if err == nil {
		l, _ := s.LastIndex()
		s.Close()
		t.Fatalf("Open succeeded (last index %d), want %v (%q)", l, target, what)
	}
	if !errors.Is(err, target) {
		t.Fatalf("Open: %v; want %v", err, target)
	}
	for _, w := range what {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("Open: %v; want it to mention %q", err, w)
		}
	}
	if dirHash(t, dir) != before {
		t.Fatal("a failed Open changed the files")
	}
}

func mustCorrupt(t *testing.T, dir string, segSize int64, what string) {
	t.Helper()
	mustFail(t, dir, Options{SegmentSize: segSize}, ErrCorrupt, what)
}

func TestDamageInsideLastSegmentIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 50, 5)
	end := s.segs[0].size
	s.Close()
	path, b := lastSeg(t, dir)
	b[end/2] ^= 0x40
	os.WriteFile(path, b, 0o640)
	mustCorrupt(t, dir, 0, "of a later write follows intact")
}

// TestTornBatchKeepsOtherFrames: a crash may leave any part of the last
// batch on disk, a damaged frame with intact frames of the same batch
// after it. That is a torn write, not corruption.
func TestTornBatchKeepsOtherFrames(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 20, 5)
	storeRange(t, s, 21, 26, 6) // the torn batch
	off := s.segs[0].offs[21-1]
	s.Close()
	path, b := lastSeg(t, dir)
	b[off+frameHeaderSize] ^= 0x01 // entry 21's body; 22..26 stay intact
	os.WriteFile(path, b, 0o640)
	s, rec := open(t, dir, 0)
	if rec.TornBytes == 0 {
		t.Fatal("no torn bytes reported")
	}
	checkLog(t, s, 1, 20)
	storeRange(t, s, 21, 30, 4)
	s, _ = reopen(t, s, dir, 0)
	checkLog(t, s, 1, 30)
}

func TestDamageInSealedSegmentIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 1024)
	storeRange(t, s, 1, 100, 5)
	s.Close()
	m := segFiles(t, dir)
	for _, mutate := range []struct {
		name   string
		f      func([]byte) []byte
		target error
		what   string
	}{
		{"flip", func(b []byte) []byte { b[len(b)-12] ^= 1; return b }, ErrCorrupt, "checksum"},
		{"pad", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, ErrCorrupt, "padding"},
		{"cut", func(b []byte) []byte { return b[:len(b)-3] }, ErrCorrupt, "cut short"},
		{"cut to header", func(b []byte) []byte { return b[:segHeaderSize] }, ErrLost, "cut short after its header"},
		{"header", func(b []byte) []byte { b[3] = 'X'; return b }, ErrCorrupt, "magic"},
		{"empty", func(b []byte) []byte { return nil }, ErrLost, "cut short inside its header"},
	} {
		t.Run(mutate.name, func(t *testing.T) {
			orig, _ := os.ReadFile(m[1])
			defer os.WriteFile(m[1], orig, 0o640)
			if len(orig) < 1024+3 {
				t.Fatalf("segment of %d bytes: want its last frame past its preallocated 1024", len(orig))
			}
			os.WriteFile(m[1], mutate.f(append([]byte(nil), orig...)), 0o640)
			mustFail(t, dir, Options{SegmentSize: 1024}, mutate.target, mutate.what)
		})
	}
	t.Run("gap", func(t *testing.T) {
		orig, _ := os.ReadFile(m[1])
		defer os.WriteFile(m[1], orig, 0o640)
		os.Remove(m[1])
		mustFail(t, dir, Options{SegmentSize: 1024}, ErrLost, "starts at", "missing")
	})
	t.Run("renamed", func(t *testing.T) {
		os.Rename(m[1], m[1]+".x.log")
		defer os.Rename(m[1]+".x.log", m[1])
		mustCorrupt(t, dir, 1024, "not a segment file")
	})
	// All restored: it opens.
	s, _ = open(t, dir, 1024)
	checkLog(t, s, 1, 100)
}

func TestReadDetectsDamage(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 10, 10)
	path, b := lastSeg(t, dir)
	g := s.segs[0]
	b[g.offs[4]+frameHeaderSize+2] ^= 0xff // inside entry 5's body
	os.WriteFile(path, b, 0o640)
	var got raft.Log
	if err := s.GetLog(5, &got); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetLog of a damaged entry: %v, want ErrCorrupt", err)
	}
	if err := s.GetLog(6, &got); err != nil {
		t.Fatalf("GetLog of an intact entry: %v", err)
	}
}

// TestFailedWriteRetries: a write that fails before its sync touched
// nothing acknowledged; the next call writes at the same offset.
func TestFailedWriteRetries(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 10, 10)
	g := s.segs[0]
	g.f.Close() // the next write fails
	err := s.StoreLogs([]*raft.Log{entry(11), entry(12)})
	var we *WriteError
	if !errors.As(err, &we) || we.Sticky || errors.Is(err, ErrFailed) || we.Path != g.path {
		t.Fatalf("write to a closed file: %v, want a WriteError on %s that is not sticky", err, g.path)
	}
	if l, _ := s.LastIndex(); l != 10 {
		t.Fatalf("last index %d after a failed write, want 10", l)
	}
	f, ferr := os.OpenFile(g.path, os.O_RDWR, 0)
	if ferr != nil {
		t.Fatal(ferr)
	}
	g.f = f // the disk is back
	storeRange(t, s, 11, 15, 5)
	checkLog(t, s, 1, 15)
	s, _ = reopen(t, s, dir, 0)
	checkLog(t, s, 1, 15)
}

// TestFailedSyncIsSticky: after a failed fdatasync what the file holds is
// unknown; every write fails until a restart, which checks the files.
func TestFailedSyncIsSticky(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 0)
	storeRange(t, s, 1, 10, 10)
	eio := syscall.EIO
	syncData = func(*os.File) error { return eio }
	err := s.StoreLogs([]*raft.Log{entry(11)})
	syncData = fdatasync
	if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "restart the node once the disk is healthy") {
		t.Fatalf("failed sync: %v, want ErrFailed wrapping EIO and saying what to do", err)
	}
	for _, err := range []error{s.StoreLogs([]*raft.Log{entry(11)}), s.DeleteRange(5, 10)} {
		if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "failed earlier") {
			t.Fatalf("write after a failed sync: %v, want ErrFailed", err)
		}
	}
	if l, _ := s.LastIndex(); l != 10 {
		t.Fatalf("last index %d after a failed sync, want 10", l)
	}
	// Entry 11 reached the page cache; the restart finds it (the disk kept
	// it here), or would cut it as a torn write.
	s, _ = reopen(t, s, dir, 0)
	l, _ := s.LastIndex()
	if l != 10 && l != 11 {
		t.Fatalf("last index after restart %d", l)
	}
	checkLog(t, s, 1, l)
}

// TestNewSegmentFailureRetries: a segment that cannot be created leaves no
// file behind and fails only that call.
func TestNewSegmentFailureRetries(t *testing.T) {
	dir := t.TempDir()
	const seg = 1024
	s, _ := open(t, dir, seg)
	storeRange(t, s, 1, 40, 10)
	next := s.last + 1
	for len(s.segs[len(s.segs)-1].offs) > 0 && s.segs[len(s.segs)-1].size < seg {
		storeRange(t, s, next, next, 1)
		next++
	}
	// The next entry needs a new segment; a directory (that cannot be
	// removed) sits where its temporary file goes.
	block := filepath.Join(dir, segFileName(next)+tmpSuffix)
	os.MkdirAll(filepath.Join(block, "x"), 0o750)
	err := s.StoreLogs([]*raft.Log{entry(next)})
	var we *WriteError
	if !errors.As(err, &we) || we.Sticky || !strings.Contains(err.Error(), "create segment") {
		t.Fatalf("new segment blocked: %v, want a WriteError that is not sticky", err)
	}
	if l, _ := s.LastIndex(); l != next-1 {
		t.Fatalf("last index %d, want %d", l, next-1)
	}
	os.RemoveAll(block)
	storeRange(t, s, next, next+20, 3)
	checkLog(t, s, 1, next+20)
	if m, _ := filepath.Glob(filepath.Join(dir, "*"+tmpSuffix)); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}
	s, _ = reopen(t, s, dir, seg)
	checkLog(t, s, 1, next+20)
	checkSizes(t, dir)
}

func TestClosedStoreRefuses(t *testing.T) {
	s, _ := open(t, t.TempDir(), 0)
	storeRange(t, s, 1, 3, 3)
	s.Close()
	var l raft.Log
	if err := s.GetLog(1, &l); err == nil {
		t.Fatal("GetLog on a closed store succeeded")
	}
	if err := s.StoreLogs([]*raft.Log{entry(4)}); err == nil {
		t.Fatal("StoreLogs on a closed store succeeded")
	}
}

func TestOversizedEntryRefused(t *testing.T) {
	s, _ := open(t, t.TempDir(), 0)
	big := &raft.Log{Index: 1, Term: 1, Data: make([]byte, MaxEntrySize+1)}
	if err := s.StoreLogs([]*raft.Log{big}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("oversized entry: %v", err)
	}
	storeRange(t, s, 1, 2, 2)
	checkLog(t, s, 1, 2)
}

func TestReadsDuringWrites(t *testing.T) {
	s, _ := open(t, t.TempDir(), 4096)
	storeRange(t, s, 1, 10, 10)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				f, _ := s.FirstIndex()
				l, _ := s.LastIndex()
				for i := f; i <= l && f != 0; i += 7 {
					var got raft.Log
					err := s.GetLog(i, &got)
					if errors.Is(err, raft.ErrLogNotFound) {
						continue // compacted meanwhile
					}
					if err != nil || !sameLog(&got, entry(i)) {
						errs <- fmt.Errorf("GetLog(%d) = %+v, %v", i, got, err)
						return
					}
				}
			}
		}()
	}
	for i := uint64(11); i <= 500; i += 10 {
		storeRange(t, s, i, i+9, 10)
		if i%100 == 1 {
			if err := s.DeleteRange(1, i-50); err != nil {
				t.Error(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A prescan changes nothing, and Open with it finds what Open alone does:
// on a log of several segments, on one whose tail a crash tore (which the
// prescan leaves to Open), and when a segment appeared after the prescan.
func TestPrescan(t *testing.T) {
	build := func(t *testing.T, tear bool) string {
		dir := t.TempDir()
		s, _ := open(t, dir, 4096)
		storeRange(t, s, 1, 150, 4)
		end := s.segs[len(s.segs)-1].size
		s.Close()
		if len(segFiles(t, dir)) < 3 {
			t.Fatalf("weak test: %d segments", len(segFiles(t, dir)))
		}
		if tear {
			path, b := lastSeg(t, dir)
			clear(b[end-5 : end])
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
		}
		// A segment being created when the process died.
		if err := os.WriteFile(filepath.Join(dir, "00000000000000000999.log.tmp"), []byte("x"), 0o640); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name  string
		tear  bool
		added bool // a segment appears between the prescan and Open
	}{{"intact", false, false}, {"torn tail", true, false}, {"segment added", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			alone, with := build(t, tc.tear), build(t, tc.tear)
			before := dirHash(t, with)
			p := StartPrescan(with)
			p.Wait()
			if dirHash(t, with) != before || len(segFiles(t, with)) != len(segFiles(t, alone)) {
				t.Fatal("the prescan changed the log")
			}
			if _, err := os.Stat(filepath.Join(with, "00000000000000000999.log.tmp")); err != nil {
				t.Fatalf("the prescan removed a file: %v", err)
			}
			if tc.added {
				for _, dir := range []string{alone, with} {
					s, _ := open(t, dir, 4096)
					storeRange(t, s, 151, 250, 4)
					s.Close()
				}
			}
			a, arec, err := Open(alone, Options{SegmentSize: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			w, wrec, err := Open(with, Options{SegmentSize: 4096, Prescan: p})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			af, _ := a.FirstIndex()
			al, _ := a.LastIndex()
			wf, _ := w.FirstIndex()
			wl, _ := w.LastIndex()
			if af != wf || al != wl || (arec.TornBytes == 0) != (wrec.TornBytes == 0) || (wrec.TornBytes != 0) != tc.tear {
				t.Fatalf("alone %d..%d %+v, with a prescan %d..%d %+v", af, al, arec, wf, wl, wrec)
			}
			checkLog(t, w, wf, wl)
		})
	}
	// Open takes what the prescan found rather than reading a segment
	// again: damage done after the prescan goes unseen (the caller changes
	// nothing between the two).
	dir := build(t, false)
	p := StartPrescan(dir)
	p.Wait()
	first := segFiles(t, dir)[0]
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(first, b, 0o640); err != nil {
		t.Fatal(err)
	}
	s, _, err := Open(dir, Options{SegmentSize: 4096, Prescan: p})
	if err != nil {
		t.Fatalf("Open read the segment again: %v", err)
	}
	s.Close()
	if _, _, err := Open(dir, Options{SegmentSize: 4096}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open alone: %v", err)
	}
}
