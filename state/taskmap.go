package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// From snapshot version 11 on, each part of the tasks holds its items and
// its ids as the registry holds them in memory: the items' 24 bytes each
// in little-endian order, then the ids packed into partChunk chunks as an
// arena does, each item's key referring to its id's place. A restore from
// a snapshot file maps the file and uses those bytes where they lie, in
// the page cache, instead of decoding them into memory the process has
// never touched, which is most of what a restore costs. It checks every
// item and id as a decoding would (docs/design.md, "The data dir and
// durability"). A part is its item count, its ids' length, a byte giving
// the zeros that follow (so that the items start at a multiple of 8 bytes
// from the snapshot's start), the items, then the ids.
const (
	// snapshotMapped is the first snapshot version whose task parts hold
	// items and ids in their in-memory layout.
	snapshotMapped = 11
	// itemBytes is an item's size in a snapshot: key, created, standby,
	// weight and flags at the offsets taskItem has, then a zero byte.
	itemBytes = 24
	// maxPartIDBytes bounds the ids' length a part may claim for each of
	// its items: a longest id, and the most a chunk's end may leave unused.
	maxPartIDBytes = 2 * (maxIDLen + slotBytes)
)

// The layout itemBytes describes is taskItem's in memory.
var _ [itemBytes - unsafe.Sizeof(taskItem{})]struct{}
var _ [unsafe.Sizeof(taskItem{}) - itemBytes]struct{}

// littleEndian reports whether items in memory have the snapshot's byte
// order, so that the snapshot's bytes can be used as items.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// packNext is where a part's next id of n bytes goes, the last one having
// ended at offset o of chunk c: there, or at the start of the next chunk.
func packNext(c, o, n int) (int, int) {
	if o+roundedSlots(n)*slotBytes > partChunk {
		return c + 1, 0
	}
	return c, o
}

// appendItem appends it in the snapshot's layout.
func appendItem(b []byte, it taskItem) []byte {
	b = binary.LittleEndian.AppendUint64(b, it.key)
	b = binary.LittleEndian.AppendUint64(b, it.created)
	b = binary.LittleEndian.AppendUint32(b, it.standby)
	b = binary.LittleEndian.AppendUint16(b, it.weight)
	return append(b, it.flags, 0)
}

// writeMappedParts writes the count, then the tasks in parts of up to
// partTasks, each holding its items and packed ids; w counts from the
// start of the snapshot, so that the items can be padded to a multiple of
// 8 bytes.
func writeMappedParts(w *countWriter, v *registryView) error {
	if _, err := w.Write(binary.AppendUvarint(nil, uint64(v.len()))); err != nil {
		return err
	}
	pw := mappedPartWriter{w: w, items: make([]byte, 0, partTasks*itemBytes)}
	for _, blk := range v.blocks {
		for _, it := range blk.items {
			pw.add(it, keyOf(v.chunks, it))
			if pw.count == partTasks {
				if err := pw.flush(); err != nil {
					return err
				}
			}
		}
	}
	runtime.KeepAlive(v)
	return pw.flush()
}

// mappedPartWriter gathers a part of version 11.
type mappedPartWriter struct {
	w     *countWriter
	items []byte
	ids   []byte
	count int
	c, o  int    // where the part's next id goes
	base  uint64 // the arena index of the part's first chunk
}

// add packs it and its id into the part.
func (p *mappedPartWriter) add(it taskItem, id []byte) {
	n := len(id)
	p.c, p.o = packNext(p.c, p.o, n)
	at := p.c*partChunk + p.o
	end := at + roundedSlots(n)*slotBytes
	k := len(p.ids)
	p.ids = append(p.ids, make([]byte, end-k)...)
	copy(p.ids[at:], id)
	it.key = itemKey((p.base+uint64(p.c))<<arenaShift|uint64(p.o), n)
	p.items = appendItem(p.items, it)
	p.o += end - at
	p.count++
}

// flush writes the part, if it holds an item.
func (p *mappedPartWriter) flush() error {
	if p.count == 0 {
		return nil
	}
	hdr := binary.AppendUvarint(nil, uint64(p.count))
	hdr = binary.AppendUvarint(hdr, uint64(len(p.ids)))
	pad := (8 - (p.w.n+int64(len(hdr))+1)%8) % 8
	hdr = append(hdr, byte(pad))
	hdr = append(hdr, make([]byte, pad)...)
	for _, b := range [][]byte{hdr, p.items, p.ids} {
		if _, err := p.w.Write(b); err != nil {
			return err
		}
	}
	p.base += uint64(chunksOf(len(p.ids)))
	p.items, p.ids, p.count, p.c, p.o = p.items[:0], p.ids[:0], 0, 0, 0
	return nil
}

// chunksOf is how many chunks a part's n bytes of ids span.
func chunksOf(n int) int { return (n + partChunk - 1) / partChunk }

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// readMappedParts reads the tasks of a snapshot of version 11 or later
// from r, which reads src: where src maps its file, the parts' items and
// ids are the mapping's bytes; otherwise they are read into memory.
func readMappedParts(r *bufio.Reader, src *snapshotSource) (*registry, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("task count: %w", err)
	}
	parts, err := onWorkers((*taskPart).check, nil, func(jobs chan<- *taskPart, failed *atomic.Bool) ([]*taskPart, error) {
		return readMapped(r, src, n, jobs, failed)
	})
	if err != nil {
		return nil, err
	}
	reg, err := joinParts(n, parts)
	if err == nil && src != nil {
		reg.mapped = src.m
	}
	return reg, err
}

// readMapped reads parts until n tasks are read, handing each to jobs,
// and returns them in order. It stops early once failed is set.
func readMapped(r *bufio.Reader, src *snapshotSource, n uint64, jobs chan<- *taskPart, failed *atomic.Bool) ([]*taskPart, error) {
	var parts []*taskPart
	var seen, base uint64
	for seen < n && !failed.Load() {
		p, err := readMappedPart(r, src, seen, n-seen)
		if err != nil {
			return nil, fmt.Errorf("part at task %d: %w", seen, err)
		}
		p.base = base
		if base += uint64(len(p.chunks)); base >= 1<<(keyLenShift-arenaShift) {
			return nil, fmt.Errorf("part at task %d: the ids take more room than a registry has", seen)
		}
		parts = append(parts, p)
		jobs <- p
		seen += p.count
	}
	return parts, nil
}

// readMappedPart reads the part of tasks from first on, of which left
// remain: its header, then its items and ids.
func readMappedPart(r *bufio.Reader, src *snapshotSource, first, left uint64) (*taskPart, error) {
	count, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("count: %w", err)
	}
	l, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("ids' length: %w", err)
	}
	switch {
	case count == 0 || count > maxPartTasks || count > left:
		return nil, fmt.Errorf("%d tasks (1 to %d, and %d remain)", count, maxPartTasks, left)
	case l < count || l > count*maxPartIDBytes:
		return nil, fmt.Errorf("%d bytes of ids for %d tasks", l, count)
	}
	pad, err := r.ReadByte()
	if err == nil && pad > 7 {
		return nil, fmt.Errorf("padding of %d bytes (at most 7)", pad)
	}
	for i := byte(0); i < pad && err == nil; i++ {
		var b byte
		if b, err = r.ReadByte(); err == nil && b != 0 {
			err = fmt.Errorf("padding is not zero")
		}
	}
	if err != nil {
		return nil, fmt.Errorf("padding: %w", unexpected(err))
	}
	p := &taskPart{first: first, count: count}
	if p.items, err = readItems(r, src, int(count)); err != nil {
		return nil, fmt.Errorf("items: %w", unexpected(err))
	}
	if p.ids, err = src.bytes(r, int(l)); err != nil {
		return nil, fmt.Errorf("ids: %w", unexpected(err))
	}
	for c := 0; c*partChunk < len(p.ids); c++ {
		end := min((c+1)*partChunk, len(p.ids))
		p.chunks = append(p.chunks, p.ids[c*partChunk:end:end])
	}
	return p, nil
}

// unexpected is err, with an end of file in the middle of a part called
// so.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// readItems reads count items: the mapping's bytes where src maps its
// file, the items in the same byte order and aligned; a copy otherwise.
func readItems(r *bufio.Reader, src *snapshotSource, count int) ([]taskItem, error) {
	if b, ok, err := src.mapped(r, count*itemBytes, 8); ok || err != nil {
		if err != nil {
			return nil, err
		}
		// check checks their padding, on a worker: the first touch of the
		// mapping's pages is most of what reading them costs.
		return unsafe.Slice((*taskItem)(unsafe.Pointer(unsafe.SliceData(b))), count), nil
	}
	items := make([]taskItem, count)
	if littleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(items))), count*itemBytes)
		_, err := io.ReadFull(r, b)
		return items, err
	}
	b := make([]byte, count*itemBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	for i := range items {
		items[i] = itemFrom(b[i*itemBytes:])
	}
	return items, checkPadding(b)
}

// itemFrom is the item b holds in the snapshot's layout.
func itemFrom(b []byte) taskItem {
	return taskItem{key: binary.LittleEndian.Uint64(b), created: binary.LittleEndian.Uint64(b[8:]),
		standby: binary.LittleEndian.Uint32(b[16:]), weight: binary.LittleEndian.Uint16(b[20:]), flags: b[22]}
}

// checkPadding refuses items whose last byte is not zero.
func checkPadding(b []byte) error {
	for i := itemBytes - 1; i < len(b); i += itemBytes {
		if b[i] != 0 {
			return fmt.Errorf("item %d: padding is not zero", i/itemBytes)
		}
	}
	return nil
}

// check checks a part read by readMappedPart, as decode checks one of
// version 10, and that each item's key refers to where its id is packed
// and (where the items are the snapshot's bytes) that its last byte is
// zero, then makes its blocks of the items.
func (p *taskPart) check() {
	var prev []byte
	c, o := 0, 0
	for i := range p.items {
		it := &p.items[i]
		if littleEndian && (*[itemBytes]byte)(unsafe.Pointer(it))[itemBytes-1] != 0 {
			p.err = fmt.Errorf("item %d: padding is not zero", i)
			return
		}
		n := it.klen()
		if n == 0 || n > maxIDLen {
			p.err = fmt.Errorf("task %d: id of %d bytes (1 to %d allowed)", p.first+uint64(i), n, maxIDLen)
			return
		}
		c, o = packNext(c, o, n)
		at, size := c*partChunk+o, roundedSlots(n)*slotBytes
		switch {
		case it.key != itemKey((p.base+uint64(c))<<arenaShift|uint64(o), n):
			p.err = fmt.Errorf("task %d: key %#x, not the place of its id", p.first+uint64(i), it.key)
		case at+size > len(p.ids):
			p.err = fmt.Errorf("task %d: ids end at %d bytes, within its id", p.first+uint64(i), len(p.ids))
		case it.flags&^flagsMask != 0 || it.state() >= numStates:
			p.err = fmt.Errorf("task %d: flags %#x", p.first+uint64(i), it.flags)
		}
		if p.err != nil {
			return
		}
		id := p.ids[at : at+n]
		if i > 0 && bytes.Compare(prev, id) >= 0 {
			p.err = fmt.Errorf("task %d: id %q does not follow %q", p.first+uint64(i), id, prev)
			return
		}
		prev = id
		o += size
		p.used += uint64(size)
	}
	if end := c*partChunk + o; end != len(p.ids) {
		p.err = fmt.Errorf("tasks %d to %d: %d bytes of ids past theirs", p.first, p.first+p.count-1, len(p.ids)-end)
		return
	}
	p.blocks = make([]*block, 0, (len(p.items)+blockItems-1)/blockItems)
	for k := 0; k < len(p.items); k += blockItems {
		end := min(k+blockItems, len(p.items))
		p.blocks = append(p.blocks, &block{items: p.items[k:end:end]})
	}
}

// snapshotSource is what a restore reads: a snapshot file mapped into
// memory, or any reader.
type snapshotSource struct {
	rd   io.Reader
	file *os.File // the file rd reads from its start, where it hands it over
	m    *fileMap // nil unless the file is mapped
	off  int64    // bytes read from it
}

// snapshotFile is a reader of a snapshot file from its start, which can
// hand over the file itself.
type snapshotFile interface {
	SnapshotFile() *os.File
}

// newSnapshotSource is a source reading rd.
func newSnapshotSource(rd io.Reader) *snapshotSource {
	s := &snapshotSource{rd: rd}
	if f, ok := rd.(snapshotFile); ok && mapSnapshots {
		s.file = f.SnapshotFile()
	}
	return s
}

// useMapping maps the file rd reads, where rd handed it over and it maps:
// reads go on from the same offset in the mapping. Where it does not,
// reads go on from rd.
func (s *snapshotSource) useMapping() {
	if s.file != nil && s.m == nil {
		s.m = mapFile(s.file)
	}
}

// mappedRead is the most a Read of a mapped source copies.
const mappedRead = 4 << 10

// mapSnapshots lets tests read snapshot files without mapping them.
var mapSnapshots = true

func (s *snapshotSource) Read(p []byte) (int, error) {
	if s.m == nil {
		n, err := s.rd.Read(p)
		s.off += int64(n)
		return n, err
	}
	if s.off >= int64(len(s.m.b)) {
		return 0, io.EOF
	}
	// A little at a time: what is read from a mapping is mostly a part's
	// header, after which the part itself is taken from the mapping and
	// the rest of a larger read would be copied for nothing.
	n := copy(p[:min(len(p), mappedRead)], s.m.b[s.off:])
	s.off += int64(n)
	return n, nil
}

// mapped returns the next n bytes r reads from s as the mapping's bytes,
// and moves r past them; ok is false (and r not moved) where s maps no
// file, where memory's byte order is not the snapshot's, or where they do
// not start at a multiple of align.
func (s *snapshotSource) mapped(r *bufio.Reader, n int, align int64) (_ []byte, ok bool, _ error) {
	if s == nil || s.m == nil || !littleEndian {
		return nil, false, nil
	}
	at := s.off - int64(r.Buffered())
	if at%align != 0 {
		return nil, false, nil
	}
	if int64(n) > int64(len(s.m.b))-at {
		return nil, true, io.ErrUnexpectedEOF
	}
	s.off = at + int64(n)
	r.Reset(s)
	return s.m.b[at : at+int64(n) : at+int64(n)], true, nil
}

// bytes returns the next n bytes r reads from s: the mapping's where s
// maps its file, a copy otherwise.
func (s *snapshotSource) bytes(r *bufio.Reader, n int) ([]byte, error) {
	if b, ok, err := s.mapped(r, n, 1); ok || err != nil {
		return b, err
	}
	return readPart(r, nil, uint64(n))
}

// fileMap is a snapshot file mapped into memory, copy-on-write: a
// registry restored from it holds its items and ids there, and changes
// them in place as it would in its own memory. It is unmapped once
// nothing holds it: only a registry (which its views hold) does.
type fileMap struct {
	b []byte
}
