package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecodeFrame: any bytes decode to an error or to an entry that
// encodes back to the same frame.
func FuzzDecodeFrame(f *testing.F) {
	for _, i := range []uint64{1, 3, 5, 6} {
		f.Add(appendFrame(nil, entry(i), 1), i)
	}
	f.Add(make([]byte, 40), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, want uint64) {
		l, batch, n, err := decodeFrame(b, want)
		if err != nil {
			return
		}
		if n > len(b) || n%8 != 0 {
			t.Fatalf("frame length %d of %d bytes", n, len(b))
		}
		if l.Index != want {
			t.Fatalf("decoded entry %d, asked for %d", l.Index, want)
		}
		if re := appendFrame(nil, &l, batch); string(re) != string(b[:n]) {
			t.Fatalf("re-encoding differs:\n%x\n%x", re, b[:n])
		}
	})
}

// FuzzOpen writes a valid log of entries 1..10 followed by arbitrary bytes
// (in place of the zeros of its preallocated space) in its last segment. Open must not panic; when it accepts the file the
// log must read back whole, starting at 1, and take the next entry.
func FuzzOpen(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 100))
	f.Add(appendFrame(nil, entry(11), 11))
	f.Add(appendFrame(nil, entry(11), 11)[:30])
	f.Add(append(make([]byte, 16), appendFrame(nil, entry(12), 11)...))
	f.Add(append(make([]byte, 16), appendFrame(nil, entry(12), 12)...))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		opts := Options{SegmentSize: 4096}
		s, _, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		storeRange(t, s, 1, 10, 4)
		end := s.segs[0].size
		s.Close()
		path := filepath.Join(dir, segFileName(1))
		b, _ := os.ReadFile(path)
		// Over the zeros, keeping the file's preallocated size.
		if n := int(end) + len(tail); n > len(b) {
			b = append(b, make([]byte, n-len(b))...)
		}
		copy(b[end:], tail)
		os.WriteFile(path, b, 0o640)

		s, _, err = Open(dir, opts)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt or success", err)
			}
			return
		}
		defer s.Close()
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		if first != 1 || last < 10 {
			t.Fatalf("log is %d..%d, want 1..10 or more", first, last)
		}
		for i := first; i <= last; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil {
				t.Fatalf("GetLog(%d): %v", i, err)
			}
			if i <= 10 && !sameLog(&l, entry(i)) {
				t.Fatalf("entry %d changed", i)
			}
		}
		if err := s.StoreLogs([]*raft.Log{entry(last + 1)}); err != nil {
			t.Fatalf("StoreLogs after recovery: %v", err)
		}
	})
}
