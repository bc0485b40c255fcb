package state

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// snapshotBuffer is the read buffer a snapshot is decoded through: records
// are decoded in place from it (see window), so it holds the largest.
const snapshotBuffer = 256 << 10

// window decodes a snapshot's binary records in place, from the buffer
// of the bufio.Reader they are read through, instead of one field at a
// time through its methods: a restore decodes millions of records and
// reads its file about as fast as it decodes them.
//
// The methods on a window record its first error and return zero values
// after it, so a record is decoded first and checked once.
type window struct {
	r   *bufio.Reader
	buf []byte // the peeked bytes
	off int    // how many of them are decoded
	err error
}

func newWindow(r *bufio.Reader) *window { return &window{r: r} }

// windowOf is a window over b alone: its input ends where b does.
func windowOf(b []byte) *window { return &window{buf: b} }

// need makes at least n unread bytes available, fewer only where the
// input ends first. n must not exceed the reader's buffer.
func (w *window) need(n int) {
	if w.err != nil || len(w.buf)-w.off >= n || w.r == nil {
		return
	}
	if n > w.r.Size() {
		w.err = fmt.Errorf("a record of up to %d bytes needs a larger read buffer than %d", n, w.r.Size())
		return
	}
	w.done()
	b, err := w.r.Peek(n)
	if err != nil && !errors.Is(err, io.EOF) {
		w.err = err
		return
	}
	if len(b) == n {
		// Everything buffered, not only what was asked.
		b, _ = w.r.Peek(w.r.Buffered())
	}
	w.buf = b
}

// done hands the decoded bytes back to the reader, whose next reads
// follow them. Call it before reading the reader directly.
func (w *window) done() {
	if w.r == nil {
		return
	}
	if w.off > 0 {
		// Discarding buffered bytes cannot fail.
		_, _ = w.r.Discard(w.off)
	}
	w.buf, w.off = nil, 0
}

func (w *window) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *window) uvarint() uint64 {
	if w.err != nil {
		return 0
	}
	v, n := binary.Uvarint(w.buf[w.off:])
	switch {
	case n == 0:
		w.fail(io.ErrUnexpectedEOF)
		return 0
	case n < 0:
		w.fail(errors.New("a varint overflows 64 bits"))
		return 0
	}
	w.off += n
	return v
}

func (w *window) byte() byte {
	if w.err != nil {
		return 0
	}
	if w.off == len(w.buf) {
		w.fail(io.ErrUnexpectedEOF)
		return 0
	}
	w.off++
	return w.buf[w.off-1]
}

// bytes returns the next n bytes, valid until the next need.
func (w *window) bytes(n uint64) []byte {
	if w.err != nil {
		return nil
	}
	if n > uint64(len(w.buf)-w.off) {
		w.fail(io.ErrUnexpectedEOF)
		return nil
	}
	b := w.buf[w.off : w.off+int(n)]
	w.off += int(n)
	return b
}

// str returns a length-prefixed string of at most max bytes, valid until
// the next need.
func (w *window) str(max uint64) []byte {
	l := w.uvarint()
	if l > max {
		w.fail(fmt.Errorf("a string of %d bytes (at most %d)", l, max))
		return nil
	}
	return w.bytes(l)
}

// uvarint32 reads a uvarint that must fit 32 bits; what names it in the error.
func (w *window) uvarint32(what string) uint32 {
	v := w.uvarint()
	if v > 1<<32-1 {
		w.fail(fmt.Errorf("%d %s", v, what))
		return 0
	}
	return uint32(v)
}
