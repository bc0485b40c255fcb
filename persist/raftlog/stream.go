package raftlog

import (
	"encoding/binary"
	"errors"
	"os"
)

// streamChunk is how much of a segment a streamed check reads at a time:
// small enough to stay in the core's cache between the read and the
// checksum over it.
const streamChunk = 128 << 10

// window reads a file front to back through one buffer, so that a frame
// that straddles two reads is whole when it is looked at.
type window struct {
	f     *os.File
	size  int64  // the file's size
	buf   []byte // buf[:n] holds the file's bytes from start
	start int64
	n     int
}

// at returns the file's bytes from off, at least need of them or all that
// are left. off never moves backwards.
func (w *window) at(off int64, need int) ([]byte, error) {
	if rest := w.size - off; int64(need) > rest {
		need = int(rest)
	}
	if off+int64(need) > w.start+int64(w.n) {
		if err := w.fill(off, need); err != nil {
			return nil, err
		}
	}
	return w.buf[off-w.start : w.n], nil
}

// fill moves the bytes from off to the front of the buffer, grown to hold
// need of them, and fills it (need is at most what the file has left).
func (w *window) fill(off int64, need int) error {
	keep := 0
	if off < w.start+int64(w.n) {
		keep = copy(w.buf, w.buf[off-w.start:w.n])
	}
	w.start, w.n = off, keep
	if need > len(w.buf) {
		w.buf = append(w.buf[:keep], make([]byte, need-keep)...)
	}
	end := min(len(w.buf), int(w.size-off))
	m, err := w.f.ReadAt(w.buf[keep:end], off+int64(keep))
	w.n += m
	return err
}

// errNotClean is streamSegment's answer for a segment it cannot pass:
// the full check decides what is wrong with it.
var errNotClean = errors.New("segment not clean")

// streamSegment checks the segment at path, which should start at entry
// first, by reading it in chunks, and indexes its frames. It passes only
// a segment that the full check (scanSegment) passes as it is: a good
// header, frames, then zeros to a size no smaller than the header's.
// Anything else is errNotClean, or the read's error. Reading through a
// small buffer touches far less memory than mapping the file.
func streamSegment(path string, first uint64) (*segment, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	w := &window{f: f, size: fi.Size(), buf: make([]byte, streamChunk)}
	b, err := w.at(0, segHeaderSize)
	if err != nil {
		return nil, err
	}
	hdr, prealloc, err := checkSegHeader(b, first)
	if err != nil || w.size < prealloc {
		return nil, errNotClean
	}
	g := &segment{first: first, path: path, hdr: hdr, prealloc: prealloc}
	off := hdr
	for off < w.size {
		if b, err = w.at(off, frameHeaderSize); err != nil {
			return nil, err
		}
		if len(b) >= frameHeaderSize {
			if bodyLen := int(binary.LittleEndian.Uint32(b)); bodyLen >= bodyFixedSize && bodyLen <= bodyFixedSize+MaxEntrySize {
				if b, err = w.at(off, align8(frameHeaderSize+bodyLen)); err != nil {
					return nil, err
				}
			}
		}
		_, _, n, err := decodeFrame(b, g.first+uint64(len(g.offs)))
		if err != nil {
			break
		}
		g.offs = append(g.offs, off)
		off += int64(n)
	}
	g.size, g.written = off, off
	for at := off; at < w.size; {
		if b, err = w.at(at, streamChunk); err != nil {
			return nil, err
		}
		if !allZero(b) {
			return nil, errNotClean
		}
		at += int64(len(b))
	}
	return g, nil
}
