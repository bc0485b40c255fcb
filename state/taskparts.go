package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// From snapshot version 10 on, the tasks come in parts: the task count,
// then parts of records (as in version 9) until that count is reached,
// each part its record count and its length in bytes first. A restore
// reads the parts in order and decodes them on as many goroutines as the
// process has cores (up to maxRestoreWorkers), each part into blocks and
// arena chunks of its own, which are then joined: a large registry
// restores in a fraction of the time one goroutine takes, most of which
// is the first touch of the memory it fills (docs/design.md, "The data
// dir and durability").
const (
	// snapshotParts is the first snapshot version whose tasks come in
	// parts.
	snapshotParts = 10
	// partTasks is how many tasks a part holds as this binary writes
	// them (the last part may hold fewer).
	partTasks = 16384
	// maxPartTasks is the most a part may hold when read.
	maxPartTasks = 1 << 16
	// partChunk is the size of the arena chunks a part's ids are read
	// into.
	partChunk = 64 << 10
	// maxRestoreWorkers bounds the goroutines that decode parts.
	maxRestoreWorkers = 4
	// partReadStep is the most a part's buffer grows by before the bytes
	// it is grown for have been read, so that a part's claimed length
	// allocates no more than the file holds, by far.
	partReadStep = 1 << 20
)

// taskPart is one part of a snapshot's tasks as it is decoded: its
// records, and what they become.
type taskPart struct {
	first uint64 // the number of tasks before it
	count uint64
	buf   []byte // its records
	// base is the arena index of its first chunk; it may use limit
	// chunks from there.
	base  uint64
	limit int

	chunks [][]byte
	used   uint64
	blocks []*block
	err    error

	// From version 11 on, the part's items and ids as read.
	items []taskItem
	ids   []byte
}

// chunksFor is how many partChunk chunks the ids of count records of l
// bytes may take: at most l bytes of ids, each rounded up to whole slots,
// with less than one id plus a slot unused at the end of each chunk.
func chunksFor(count, l uint64) int {
	ids := l + count*(slotBytes-1)
	return int(ids/(partChunk-maxIDLen-slotBytes)) + 1
}

// alloc is arena.alloc within the part's chunks.
func (p *taskPart) alloc(n int) (uint64, []byte, error) {
	size := roundedSlots(n) * slotBytes
	k := len(p.chunks)
	if k == 0 || len(p.chunks[k-1])+size > cap(p.chunks[k-1]) {
		if k == p.limit {
			return 0, nil, fmt.Errorf("ids of tasks %d to %d take more than their %d bytes", p.first, p.first+p.count-1, len(p.buf))
		}
		p.chunks = append(p.chunks, make([]byte, 0, partChunk))
		k++
	}
	c := k - 1
	o := len(p.chunks[c])
	p.chunks[c] = p.chunks[c][:o+size]
	p.used += uint64(size)
	return (p.base+uint64(c))<<arenaShift | uint64(o), p.chunks[c][o : o+n], nil
}

// decode decodes the part's records into its blocks and chunks, in the
// order and with the checks of readTasks.
func (p *taskPart) decode(v uint32) {
	w := windowOf(p.buf)
	p.blocks = make([]*block, 0, (p.count+blockItems-1)/blockItems)
	var prev []byte
	for i := range p.count {
		id, it, err := readTaskRecord(w, v, p.first+i)
		if err != nil {
			p.err = err
			return
		}
		if i > 0 && bytes.Compare(prev, id) >= 0 {
			p.err = fmt.Errorf("task %d: id %q does not follow %q", p.first+i, id, prev)
			return
		}
		ref, dst, err := p.alloc(len(id))
		if err != nil {
			p.err = err
			return
		}
		copy(dst, id)
		it.key = itemKey(ref, len(id))
		if k := len(p.blocks); k == 0 || len(p.blocks[k-1].items) == blockItems {
			p.blocks = append(p.blocks, newBlock(0))
		}
		b := p.blocks[len(p.blocks)-1]
		b.items = append(b.items, it)
		prev = dst
	}
	if w.off != len(w.buf) {
		p.err = fmt.Errorf("tasks %d to %d: %d bytes past their records", p.first, p.first+p.count-1, len(w.buf)-w.off)
	}
}

// readTaskParts reads the tasks of a snapshot of version v (at least
// snapshotParts) into a new registry.
func readTaskParts(r *bufio.Reader, v uint32) (*registry, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("task count: %w", err)
	}
	// Buffers in flight: one being read, one per worker.
	bufs := make(chan []byte, restoreWorkers()+1)
	for range cap(bufs) {
		bufs <- nil
	}
	decode := func(p *taskPart) { p.decode(v) }
	done := func(p *taskPart) {
		bufs <- p.buf[:0]
		p.buf = nil
	}
	parts, err := onWorkers(decode, done, func(jobs chan<- *taskPart, failed *atomic.Bool) ([]*taskPart, error) {
		return readParts(r, n, jobs, bufs, failed)
	})
	if err != nil {
		return nil, err
	}
	return joinParts(n, parts)
}

// restoreWorkers is how many goroutines decode or check a snapshot's task
// parts: one per core, up to maxRestoreWorkers.
func restoreWorkers() int { return max(1, min(runtime.GOMAXPROCS(0), maxRestoreWorkers)) }

// onWorkers runs read, which hands parts to its jobs (and stops early
// once failed is set), while restoreWorkers goroutines run work on each
// part, then done (if not nil) whether or not it ran work; work that
// sets a part's err sets failed. Every goroutine has ended when it
// returns read's parts, or the first error: read's, or a part's.
func onWorkers(work, done func(*taskPart), read func(jobs chan<- *taskPart, failed *atomic.Bool) ([]*taskPart, error)) ([]*taskPart, error) {
	jobs := make(chan *taskPart)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range restoreWorkers() {
		wg.Go(func() {
			for p := range jobs {
				if !failed.Load() {
					if work(p); p.err != nil {
						failed.Store(true)
					}
				}
				if done != nil {
					done(p)
				}
			}
		})
	}
	parts, err := read(jobs, &failed)
	close(jobs)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	for _, p := range parts {
		if p.err != nil {
			return nil, p.err
		}
	}
	return parts, nil
}

// readParts reads parts until n tasks are read, handing each to jobs in a
// buffer taken from bufs, and returns them in order. It stops early once
// failed is set (a part did not decode).
func readParts(r *bufio.Reader, n uint64, jobs chan<- *taskPart, bufs chan []byte, failed *atomic.Bool) ([]*taskPart, error) {
	var parts []*taskPart
	var seen, base uint64
	for seen < n && !failed.Load() {
		count, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, fmt.Errorf("part at task %d: count: %w", seen, err)
		}
		l, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, fmt.Errorf("part at task %d: length: %w", seen, err)
		}
		switch {
		case count == 0 || count > maxPartTasks || count > n-seen:
			return nil, fmt.Errorf("part at task %d: %d tasks (1 to %d, and %d remain)", seen, count, maxPartTasks, n-seen)
		case l > count*maxTaskRecord:
			return nil, fmt.Errorf("part at task %d: %d bytes for %d tasks", seen, l, count)
		}
		p := &taskPart{first: seen, count: count, base: base, limit: chunksFor(count, l)}
		if base += uint64(p.limit); base >= 1<<(keyLenShift-arenaShift) {
			return nil, fmt.Errorf("part at task %d: the ids take more room than a registry has", seen)
		}
		buf := <-bufs
		if p.buf, err = readPart(r, buf, l); err != nil {
			return nil, fmt.Errorf("part at task %d: %w", seen, err)
		}
		parts = append(parts, p)
		jobs <- p
		seen += count
	}
	return parts, nil
}

// readPart reads l bytes into buf, reusing its room.
func readPart(r io.Reader, buf []byte, l uint64) ([]byte, error) {
	buf = buf[:0]
	for uint64(len(buf)) < l {
		step := int(min(l-uint64(len(buf)), partReadStep))
		k := len(buf)
		buf = slices.Grow(buf, step)[:k+step]
		if _, err := io.ReadFull(r, buf[k:]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
	}
	return buf, nil
}

// joinParts is the registry of n tasks the decoded parts hold, each
// part's ids above the one's before.
func joinParts(n uint64, parts []*taskPart) (*registry, error) {
	reg := newRegistry()
	if len(parts) == 0 {
		return reg, nil
	}
	last := parts[len(parts)-1]
	reg.arena.chunks = make([][]byte, last.base+uint64(len(last.chunks)))
	nb := 0
	for _, p := range parts {
		nb += len(p.blocks)
	}
	reg.blocks = make([]*block, 0, nb)
	for i, p := range parts {
		copy(reg.arena.chunks[p.base:], p.chunks)
		if i > 0 {
			prevBlocks := parts[i-1].blocks
			prev := prevBlocks[len(prevBlocks)-1].items
			a, b := reg.idOf(prev[len(prev)-1]), reg.idOf(p.blocks[0].items[0])
			if a >= b {
				return nil, fmt.Errorf("task %d: id %q does not follow %q", p.first, b, a)
			}
		}
		reg.blocks = append(reg.blocks, p.blocks...)
		reg.arena.used += p.used
	}
	reg.n = int(n)
	return reg, nil
}

// From version 10 on, the request id table comes first, also in parts:
// its entry count, then parts of records (as in version 9), each its
// record count and length first. The restore reads them all, then the
// tasks, while a goroutine of its own decodes the table.
const (
	// partEntries is how many request ids a part holds as this binary
	// writes them.
	partEntries = 4096
	// maxPartEntries is the most a part may hold when read.
	maxPartEntries = 1 << 16
	// dedupQueue is how many read parts may wait for their decoding
	// before the reading waits too.
	dedupQueue = 1024
)

// dedupRead is a request id table being decoded.
type dedupRead struct {
	done    chan struct{}
	failed  atomic.Bool
	table   *dedupTable // set before done is closed
	err     error       // the decoding's, set before done is closed
	readErr error
}

// dedupPart is one part of a request id table, read.
type dedupPart struct {
	first, count uint64
	buf          []byte
}

// readDedupParts reads the request id table of a snapshot of version v
// (at least snapshotParts) from r, which reads src (or nil), and returns
// once it is read; its decoding goes on until wait, which must be called
// while src is in use.
func readDedupParts(r *bufio.Reader, src *snapshotSource, v uint32) *dedupRead {
	d := &dedupRead{done: make(chan struct{})}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		d.readErr = fmt.Errorf("count: %w", err)
		close(d.done)
		return d
	}
	parts := make(chan dedupPart, dedupQueue)
	go d.decode(v, n, parts)
	defer close(parts)
	for seen := uint64(0); seen < n && !d.failed.Load(); {
		count, err := binary.ReadUvarint(r)
		if err != nil {
			d.readErr = fmt.Errorf("part at entry %d: count: %w", seen, err)
			return d
		}
		l, err := binary.ReadUvarint(r)
		if err != nil {
			d.readErr = fmt.Errorf("part at entry %d: length: %w", seen, err)
			return d
		}
		switch {
		case count == 0 || count > maxPartEntries || count > n-seen:
			d.readErr = fmt.Errorf("part at entry %d: %d entries (1 to %d, and %d remain)", seen, count, maxPartEntries, n-seen)
			return d
		case l > count*maxDedupRecord:
			d.readErr = fmt.Errorf("part at entry %d: %d bytes for %d entries", seen, l, count)
			return d
		}
		buf, err := src.bytes(r, int(l))
		if err != nil {
			d.readErr = fmt.Errorf("part at entry %d: %w", seen, unexpected(err))
			return d
		}
		parts <- dedupPart{first: seen, count: count, buf: buf}
		seen += count
	}
	return d
}

// decode builds the table of n entries from the parts: restoreWorkers
// goroutines parse parts into entries (and their keys' hashes), and this
// one adds each part's, in order. A parse's error, or an add's, stops the
// reading.
func (d *dedupRead) decode(v uint32, n uint64, parts <-chan dedupPart) {
	defer close(d.done)
	out := newDedupTable(n)
	jobs := make(chan *parsedPart)
	ordered := make(chan *parsedPart, dedupQueue)
	var wg sync.WaitGroup
	for range restoreWorkers() {
		clients := make(map[string]string)
		wg.Go(func() {
			for p := range jobs {
				p.parse(v, clients, &out.index)
				close(p.ready)
			}
		})
	}
	// Each part goes into ordered before a worker has it, so that the
	// parts are added in order however their parses end.
	wg.Go(func() {
		defer close(ordered)
		defer close(jobs)
		for p := range parts {
			pp := &parsedPart{dedupPart: p, ready: make(chan struct{})}
			ordered <- pp
			jobs <- pp
		}
	})
	for p := range ordered {
		<-p.ready
		if d.err != nil {
			continue
		}
		if d.err = out.addParsed(p); d.err != nil {
			d.failed.Store(true)
		}
	}
	wg.Wait()
	d.table = out
}

// parsedPart is a part of a request id table, parsed.
type parsedPart struct {
	dedupPart
	ready   chan struct{} // closed once parsed
	entries []dedupEntry
	hashes  []uint64 // of the entries' keys
	err     error
}

// parse parses the part's records, interning client ids in clients, and
// hashes their keys as x does.
func (p *parsedPart) parse(v uint32, clients map[string]string, x *dedupIndex) {
	w := windowOf(p.buf)
	p.entries = make([]dedupEntry, p.count)
	p.hashes = make([]uint64, p.count)
	for i := range p.entries {
		e, err := readDedupEntry(w, clients, v)
		if err != nil {
			p.err = fmt.Errorf("entry %d: %w", p.first+uint64(i), err)
			return
		}
		p.entries[i] = e
		p.hashes[i] = x.hash(dedupKey{e.Client, e.Request})
	}
	if w.off != len(w.buf) {
		p.err = fmt.Errorf("entries %d to %d: %d bytes past their records", p.first, p.first+p.count-1, len(w.buf)-w.off)
	}
}

// wait returns the table once decoded.
func (d *dedupRead) wait() (*dedupTable, error) {
	<-d.done
	if d.readErr != nil {
		return nil, d.readErr
	}
	if d.err != nil {
		return nil, d.err
	}
	return d.table, nil
}
