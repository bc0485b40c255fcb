package raftlog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// zeroEntries zeroes the frames of entries from..to of the only segment
// of the log s held (s closed).
func zeroEntries(t *testing.T, path string, offs []int64, size int64, first, from, to uint64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := offs[from-first]
	end := size
	if int(to-first+1) < len(offs) {
		end = offs[to-first+1]
	}
	clear(b[start:end])
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

func TestDurable(t *testing.T) {
	type setup struct {
		path string
		offs []int64
		size int64
	}
	build := func(t *testing.T, dir string) setup {
		s, _ := open(t, dir, 0)
		storeRange(t, s, 1, 30, 5)
		g := s.segs[0]
		st := setup{path: g.path, offs: append([]int64(nil), g.offs...), size: g.size}
		s.Close()
		return st
	}
	cases := []struct {
		name    string
		damage  func(t *testing.T, dir string, st setup)
		durable uint64
		target  error  // nil: opens
		what    string // in the error
		last    uint64 // when it opens
	}{
		{"intact at the mark", nil, 30, nil, "", 30},
		{"intact below the mark", nil, 31, ErrLost, "ends after entry 30, but entries up to 31", 0},
		{"torn after the mark", func(t *testing.T, dir string, st setup) {
			zeroEntries(t, st.path, st.offs, st.size, 1, 27, 27) // 26..30 came in one batch
		}, 25, nil, "", 26},
		{"damage at the mark", func(t *testing.T, dir string, st setup) {
			zeroEntries(t, st.path, st.offs, st.size, 1, 27, 27)
		}, 28, ErrCorrupt, "entries up to 28 were durable, so this is damage", 0},
		{"damage below the mark", func(t *testing.T, dir string, st setup) {
			b, _ := os.ReadFile(st.path)
			b[st.offs[29]+frameHeaderSize] ^= 1 // entry 30, the last
			os.WriteFile(st.path, b, 0o640)
		}, 30, ErrCorrupt, "entry 30", 0},
		{"segment deleted", func(t *testing.T, dir string, st setup) {
			os.Remove(st.path)
		}, 30, ErrLost, "holds no segment, but entries up to 30", 0},
		{"cut at a frame boundary", func(t *testing.T, dir string, st setup) {
			// Kept at its full size, as if the frames never reached the disk.
			zeroEntries(t, st.path, st.offs, st.size, 1, 21, 30)
		}, 30, ErrLost, "ends after entry 20", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			st := build(t, dir)
			if c.damage != nil {
				c.damage(t, dir, st)
			}
			opts := Options{Durable: c.durable}
			if c.target != nil {
				mustFail(t, dir, opts, c.target, c.what)
				return
			}
			s, rec, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			checkLog(t, s, 1, c.last)
			if c.damage != nil && (rec.TornBytes == 0 || rec.TornAfter != c.last || rec.CutResumed) {
				t.Fatalf("recovery %+v, want torn bytes after entry %d", rec, c.last)
			}
		})
	}
}

// TestDurableAcrossSegments: the last segment deleted leaves the one
// before it ending below the mark.
func TestDurableAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	s, _ := open(t, dir, 1024)
	storeRange(t, s, 1, 100, 5)
	s.Close()
	m := segFiles(t, dir)
	os.Remove(m[len(m)-1])
	mustFail(t, dir, Options{SegmentSize: 1024, Durable: 100}, ErrLost, m[len(m)-2], "up to 100")
}

// TestCutFromResumes: a suffix delete a crash interrupted may leave any
// mix of the deleted frames and zeros; told the cut, Open zeroes them,
// where it would otherwise see damage followed by an intact later write.
func TestCutFromResumes(t *testing.T) {
	for _, c := range []struct {
		name     string
		from, to uint64 // zeroed
		last     uint64 // the log kept: a prefix of the old one
	}{
		{"first deleted frames zeroed", 31, 35, 30},
		{"middle frames zeroed", 38, 42, 37},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			s, _ := open(t, dir, 0)
			storeRange(t, s, 1, 60, 5)
			g := s.segs[0]
			offs, size := append([]int64(nil), g.offs...), g.size
			s.Close()
			zeroEntries(t, g.path, offs, size, 1, c.from, c.to)
			mustFail(t, dir, Options{Durable: 30}, ErrCorrupt, "later write follows intact")

			s, rec, err := Open(dir, Options{Durable: 30, CutFrom: 31})
			if err != nil {
				t.Fatal(err)
			}
			if !rec.CutResumed || rec.TornAfter != c.last {
				t.Fatalf("recovery %+v, want the cut resumed after %d", rec, c.last)
			}
			checkLog(t, s, 1, c.last)
			s.Close()
			b, _ := os.ReadFile(g.path)
			if !allZero(b[offs[c.last]:]) {
				t.Fatal("stale frames left after the resumed cut")
			}
			s, rec = open(t, dir, 0)
			if rec.TornBytes != 0 {
				t.Fatalf("second open: %+v", rec)
			}
			checkLog(t, s, 1, c.last)
			checkSizes(t, dir)
		})
	}
}

// TestDeletesKeepSegmentsWhole: deleting a suffix zeroes the frames, so no
// segment is ever shorter than its preallocated size, and the deleted
// frames cannot come back.
func TestDeletesKeepSegmentsWhole(t *testing.T) {
	dir := t.TempDir()
	const seg = 1024
	s, _ := open(t, dir, seg)
	storeRange(t, s, 1, 300, 10)
	for _, from := range []uint64{250, 151, 80} {
		k := s.segFor(from)
		g := s.segs[k]
		cut := g.offs[from-g.first]
		if err := s.DeleteRange(from, 400); err != nil {
			t.Fatal(err)
		}
		checkSizes(t, dir)
		b, _ := os.ReadFile(g.path)
		if !allZero(b[cut:]) {
			t.Fatalf("deleting from %d left bytes after offset %d of %s", from, cut, g.path)
		}
		checkLog(t, s, 1, from-1)
	}
	storeRange(t, s, 80, 120, 7)
	s, _ = reopen(t, s, dir, seg)
	checkLog(t, s, 1, 120)
	checkSizes(t, dir)
}

func segHeaderV1(first uint64) []byte {
	b := make([]byte, segHeaderSizeV1)
	copy(b, segMagicV1)
	binary.LittleEndian.PutUint64(b[8:], first)
	binary.LittleEndian.PutUint32(b[16:], crc32.Checksum(b[:16], castagnoli))
	return b
}

// TestVersion1Segments: segments written before the header recorded the
// preallocated size are read, taken as preallocated to DefaultSegmentSize,
// and appended to.
func TestVersion1Segments(t *testing.T) {
	dir := t.TempDir()
	b := segHeaderV1(1)
	for i := uint64(1); i <= 10; i++ {
		b = appendFrame(b, entry(i), 1)
	}
	path := filepath.Join(dir, segFileName(1))
	os.WriteFile(path, b, 0o640)
	mustFail(t, dir, Options{}, ErrLost, "shorter than the 16777216")

	os.WriteFile(path, append(b, make([]byte, DefaultSegmentSize-len(b))...), 0o640)
	s, _ := open(t, dir, 0)
	checkLog(t, s, 1, 10)
	storeRange(t, s, 11, 20, 3)
	s, _ = reopen(t, s, dir, 0)
	checkLog(t, s, 1, 20)
	if err := s.DeleteRange(15, 20); err != nil {
		t.Fatal(err)
	}
	s, _ = reopen(t, s, dir, 0)
	checkLog(t, s, 1, 14)
	checkSizes(t, dir)
}

func TestProbeSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "probe")
	if err := ProbeSpace(path, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("probe file left: %v", err)
	}
}
