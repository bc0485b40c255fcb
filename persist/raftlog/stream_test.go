package raftlog

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
)

// bigEntry is entry i with size bytes of data.
func bigEntry(i uint64, size int) *raft.Log {
	l := entry(i)
	l.Type, l.Data = raft.LogCommand, make([]byte, size)
	for j := range l.Data {
		l.Data[j] = byte(i + uint64(j)*7)
	}
	return l
}

// writeLog writes entries 1..n into dir, the sizes cycling through sizes,
// in batches of three, and returns the path of its first segment.
func writeLog(t *testing.T, dir string, segSize int64, n int, sizes []int) string {
	t.Helper()
	s, _, err := Open(dir, Options{SegmentSize: segSize})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var batch []*raft.Log
	for i := 1; i <= n; i++ {
		batch = append(batch, bigEntry(uint64(i), sizes[i%len(sizes)]))
		if len(batch) == 3 || i == n {
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	return filepath.Join(dir, segFileName(1))
}

// sameSegment reports whether two checks of a segment found the same.
func sameSegment(a, b *segment) bool {
	return a.first == b.first && a.hdr == b.hdr && a.prealloc == b.prealloc &&
		a.size == b.size && a.written == b.written && slices.Equal(a.offs, b.offs)
}

// TestStreamSegment: the chunked check indexes what the whole check
// indexes, with frames that straddle its reads and frames larger than
// one, and hands every segment it cannot pass to the whole check.
func TestStreamSegment(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		sizes []int
	}{
		{"small", 500, []int{10, 900, 3000}},
		{"across reads", 90, []int{streamChunk / 3, 7, streamChunk/2 + 5}},
		{"larger than a read", 12, []int{3*streamChunk + 11, 100, 2 * streamChunk}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeLog(t, t.TempDir(), 64<<20, tc.n, tc.sizes)
			got, err := streamSegment(path, 1)
			if err != nil {
				t.Fatalf("streamSegment: %v", err)
			}
			want, torn, err := scanWhole(path, 1, true, Options{})
			if err != nil || torn != nil {
				t.Fatalf("scanWhole: %v, torn %v", err, torn)
			}
			if !sameSegment(got, want) || len(got.offs) != tc.n {
				t.Fatalf("streamed %+v, whole %+v", got, want)
			}
		})
	}

	path := writeLog(t, t.TempDir(), 1<<20, 12, []int{streamChunk / 2})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := streamSegment(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"a byte in a frame", func(b []byte) []byte { b[g.offs[6]+40]++; return b }},
		{"a byte in the zeros", func(b []byte) []byte { b[len(b)-1] = 1; return b }},
		{"the header", func(b []byte) []byte { b[9]++; return b }},
		{"cut short", func(b []byte) []byte { return b[:len(b)-100] }},
		{"cut inside a frame", func(b []byte) []byte { return b[:g.offs[11]+100] }},
		{"cut inside the header", func(b []byte) []byte { return b[:10] }},
		{"empty", func(b []byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), segFileName(1))
			if err := os.WriteFile(p, tc.edit(slices.Clone(b)), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := streamSegment(p, 1); !errors.Is(err, errNotClean) {
				t.Fatalf("streamSegment: %v, want errNotClean", err)
			}
		})
	}
	if _, err := streamSegment(filepath.Join(t.TempDir(), "gone"), 1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("streamSegment of no file: %v", err)
	}
}

// FuzzStreamSegment: whatever a segment holds, the chunked check passes
// it only when the whole check passes it, with the same frames.
func FuzzStreamSegment(f *testing.F) {
	seg := func(frames ...*raft.Log) []byte {
		b := segHeader(1, 4096)
		for _, l := range frames {
			b = appendFrame(b, l, 1)
		}
		return append(b, make([]byte, 4096-len(b))...)
	}
	f.Add(seg())
	f.Add(seg(entry(1), entry(2), entry(3)))
	f.Add(seg(entry(1), bigEntry(2, 2000))[:3000])
	f.Add(seg(entry(1))[:20])
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, segFileName(1))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := streamSegment(path, 1)
		if err != nil {
			if !errors.Is(err, errNotClean) {
				t.Fatalf("streamSegment: %v", err)
			}
			return
		}
		want, torn, err := scanWhole(path, 1, true, Options{})
		if err != nil || torn != nil || !sameSegment(got, want) {
			t.Fatalf("streamed %+v; whole %+v, torn %v, %v", got, want, torn, err)
		}
	})
}
