package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"
)

// The task registry holds every task without a pointer per task: blocks
// of fixed-size items in id order, and the ids' bytes in an arena of large
// chunks. The garbage collector sees two objects per block instead of
// several per task, and a snapshot is a copy-on-write view of the blocks
// (docs/design.md, "The task registry").

// taskItem is one task. It holds no pointer: its id is a reference into
// the registry's arena.
//
// The id's length shares key with its place in the arena, so that the
// weight fits in what was padding: an item stays 24 bytes.
type taskItem struct {
	key     uint64 // the id: its length<<keyLenShift | chunk<<arenaShift | offset
	created uint64
	standby uint32
	weight  uint16 // the task's weight − 1: 0 is weight 1, as in data written before weights
	flags   uint8
}

// keyLenShift places an id's length (at most maxIDLen, 9 bits) above its
// arena reference in taskItem.key; 35 bits of chunk index remain.
const keyLenShift = 55

// ref is the item's id's reference in the arena.
func (it taskItem) ref() uint64 { return it.key & (1<<keyLenShift - 1) }

// klen is the length of the item's id.
func (it taskItem) klen() int { return int(it.key >> keyLenShift) }

// itemKey is the key of an id of n bytes stored at ref.
func itemKey(ref uint64, n int) uint64 { return uint64(n)<<keyLenShift | ref }

// weightOf is a task's weight as an item stores it (0 counts as 1).
func weightOf(w uint32) uint16 { return uint16(max(w, 1) - 1) }

// weightFrom is Task.Weight of a stored weight: 0 for the default, 1.
func weightFrom(w uint16) uint32 {
	if w == 0 {
		return 0
	}
	return uint32(w) + 1
}

// taskItem flags: bit 0 is Stateful; bits 1–2 are the state.
const (
	flagStateful = 1 << 0
	stateShift   = 1
	stateMask    = 3 << stateShift
	flagsMask    = flagStateful | stateMask
)

// Task states as stored. The state and its pending reason are one of
// three pairs, set by submit and by the assignment.
const (
	stateUnassigned uint8 = iota // PENDING: no worker assigned
	stateNoWorker                // PENDING: no worker available
	stateAssigned                // ASSIGNED
	numStates
)

// Pending reasons.
const (
	reasonUnassigned = "no worker assigned"
	reasonNoWorker   = "no worker available"
)

func (it taskItem) state() uint8 { return (it.flags & stateMask) >> stateShift }

func (it taskItem) withState(s uint8) taskItem {
	it.flags = it.flags&^stateMask | s<<stateShift
	return it
}

// stateOfTask maps a task's state and reason (as older snapshots hold
// them) to the stored state.
func stateOfTask(t *Task) uint8 {
	switch {
	case t.State == TaskStateAssigned:
		return stateAssigned
	case t.PendingReason == reasonNoWorker:
		return stateNoWorker
	default:
		return stateUnassigned
	}
}

// Arena layout: chunks of up to 1 MiB (an id is at most maxIDLen bytes, so
// it never spans two), allocated in 8-byte slots so that a freed id's slots
// serve any id of the same rounded size.
const (
	arenaShift = 20
	arenaChunk = 1 << arenaShift
	minChunk   = 1 << 12
	slotBytes  = 8
)

// arena holds the ids' bytes. Bytes that a snapshot's view may still
// read are never rewritten while one is alive: ids freed then wait in
// pending until the last snapshot is released.
type arena struct {
	chunks [][]byte
	// free holds freed references by rounded size in slots.
	free    [maxIDLen/slotBytes + 1][]uint64
	pending []uint64 // freed while a snapshot was alive; the size is in the top bits
	// used is the bytes of live ids, rounded.
	used uint64
}

func roundedSlots(n int) int { return (n + slotBytes - 1) / slotBytes }

// put stores id and returns its reference.
func (a *arena) put(id string) uint64 {
	ref, dst := a.alloc(len(id))
	copy(dst, id)
	return ref
}

// alloc returns the reference of room for an id of n bytes, and that room.
func (a *arena) alloc(n int) (uint64, []byte) {
	slots := roundedSlots(n)
	size := slots * slotBytes
	a.used += uint64(size)
	if l := a.free[slots]; len(l) > 0 {
		ref := l[len(l)-1]
		a.free[slots] = l[:len(l)-1]
		c, o := ref>>arenaShift, ref&(arenaChunk-1)
		return ref, a.chunks[c][o : o+uint64(n)]
	}
	if k := len(a.chunks); k == 0 || len(a.chunks[k-1])+size > cap(a.chunks[k-1]) {
		// Chunks start small and double up to arenaChunk, so a small
		// registry stays small.
		c := minChunk
		if k > 0 {
			c = min(2*cap(a.chunks[k-1]), arenaChunk)
		}
		a.chunks = append(a.chunks, make([]byte, 0, c))
	}
	c := len(a.chunks) - 1
	o := len(a.chunks[c])
	a.chunks[c] = a.chunks[c][:o+size]
	return uint64(c)<<arenaShift | uint64(o), a.chunks[c][o : o+n]
}

// release frees an id's bytes: at once when no snapshot may read them,
// otherwise once none does (see flush).
func (a *arena) release(ref uint64, n int, snapshots bool) {
	slots := roundedSlots(n)
	a.used -= uint64(slots * slotBytes)
	if snapshots {
		a.pending = append(a.pending, uint64(slots)<<56|ref)
		return
	}
	a.free[slots] = append(a.free[slots], ref)
}

// flush makes the ids freed while snapshots were alive reusable; call it
// only when none is.
func (a *arena) flush() {
	for _, p := range a.pending {
		slots := p >> 56
		a.free[slots] = append(a.free[slots], p&(1<<56-1))
	}
	a.pending = a.pending[:0]
}

func keyOf(chunks [][]byte, it taskItem) []byte {
	ref := it.ref()
	c, o := ref>>arenaShift, ref&(arenaChunk-1)
	return chunks[c][o : o+uint64(it.klen())]
}

// blockItems is the most items a block holds.
const blockItems = 256

// block is a run of items in id order. A block a snapshot's view may read
// (gen older than the registry's) is never changed: a change replaces it
// with a copy.
type block struct {
	gen   uint64
	items []taskItem
}

func newBlock(gen uint64) *block { return &block{gen: gen, items: make([]taskItem, 0, blockItems)} }

// registry is the set of tasks: blocks of items in id order, each block's
// ids below the next's. Its mutating methods need the FSM's write lock;
// the others its read lock.
type registry struct {
	blocks []*block
	n      int
	// gen is the generation of blocks this registry may change in place;
	// every view moves it on.
	gen   uint64
	arena arena
	// snapshots counts the views not yet released.
	snapshots atomic.Int32
	// mapped is the snapshot file the registry was restored from, where
	// its first blocks and chunks lie, or nil.
	mapped *fileMap
}

func newRegistry() *registry { return &registry{} }

// idString is the id bytes as a string without a copy, valid while they
// do not change (under the FSM's lock, or in a view).
func idString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (r *registry) idOf(it taskItem) string { return idString(keyOf(r.arena.chunks, it)) }

func (r *registry) len() int { return r.n }

// find returns where id is, or would go: a block and a position in it.
func (r *registry) find(id string) (bi, ii int, found bool) {
	// The last block whose first id is at most id (or the first block).
	bi = sort.Search(len(r.blocks), func(i int) bool { return r.idOf(r.blocks[i].items[0]) > id }) - 1
	if bi < 0 {
		bi = 0
	}
	if len(r.blocks) == 0 {
		return 0, 0, false
	}
	items := r.blocks[bi].items
	ii = sort.Search(len(items), func(i int) bool { return r.idOf(items[i]) >= id })
	return bi, ii, ii < len(items) && r.idOf(items[ii]) == id
}

// get returns the item of the task with the id.
func (r *registry) get(id string) (taskItem, bool) {
	bi, ii, ok := r.find(id)
	if !ok {
		return taskItem{}, false
	}
	return r.blocks[bi].items[ii], true
}

// mutable returns block bi, replaced by a copy first when a view may
// read it.
func (r *registry) mutable(bi int) *block {
	b := r.blocks[bi]
	if b.gen != r.gen {
		nb := newBlock(r.gen)
		nb.items = append(nb.items, b.items...)
		r.blocks[bi] = nb
		b = nb
	}
	return b
}

// add adds a task unless its id is in the registry already; it returns
// the item added, or the one there and false. One search serves both.
func (r *registry) add(t *Task, state uint8) (taskItem, bool) {
	bi, ii, found := r.find(t.ID)
	if found {
		return r.blocks[bi].items[ii], false
	}
	r.reclaim()
	it := taskItem{key: itemKey(r.arena.put(t.ID), len(t.ID)), created: t.CreatedIndex, standby: t.StandbyReplicas, weight: weightOf(t.Weight)}
	if t.Stateful {
		it.flags |= flagStateful
	}
	it = it.withState(state)
	r.insertAt(bi, ii, it)
	return it, true
}

func (r *registry) insertAt(bi, ii int, it taskItem) {
	r.n++
	if len(r.blocks) == 0 {
		b := newBlock(r.gen)
		b.items = append(b.items, it)
		r.blocks = append(r.blocks, b)
		return
	}
	if len(r.blocks[bi].items) < blockItems {
		b := r.mutable(bi)
		b.items = slices.Insert(b.items, ii, it)
		return
	}
	// Make room by moving items to a neighbour with room, as a B*-tree
	// does: blocks then stay mostly full however ids arrive.
	if bi+1 < len(r.blocks) && len(r.blocks[bi+1].items) < blockItems-blockItems/8 {
		k := (blockItems - len(r.blocks[bi+1].items)) / 2
		b, next := r.mutable(bi), r.mutable(bi+1)
		next.items = slices.Insert(next.items, 0, b.items[len(b.items)-k:]...)
		b.items = b.items[:len(b.items)-k]
		if ii <= len(b.items) {
			b.items = slices.Insert(b.items, ii, it)
		} else {
			next.items = slices.Insert(next.items, ii-len(b.items), it)
		}
		return
	}
	if bi > 0 && len(r.blocks[bi-1].items) < blockItems-blockItems/8 {
		k := (blockItems - len(r.blocks[bi-1].items)) / 2
		prev, b := r.mutable(bi-1), r.mutable(bi)
		prev.items = append(prev.items, b.items[:k]...)
		b.items = slices.Delete(b.items, 0, k)
		if ii < k {
			prev.items = slices.Insert(prev.items, len(prev.items)-k+ii, it)
		} else {
			b.items = slices.Insert(b.items, ii-k, it)
		}
		return
	}
	old := r.blocks[bi].items
	if ii == len(old) || ii == 0 {
		// Past a full block's last id (or before the first block's first):
		// a new block beside it, leaving it full. Ids that arrive in order,
		// as from each of many writers counting up, then fill their
		// blocks; halving would leave every block behind them half empty.
		b := newBlock(r.gen)
		b.items = append(b.items, it)
		if ii > 0 {
			bi++
		}
		r.blocks = slices.Insert(r.blocks, bi, b)
		return
	}
	// Split a full block in halves, into new blocks (a view may read the
	// old one).
	left, right := newBlock(r.gen), newBlock(r.gen)
	left.items = append(left.items, old[:blockItems/2]...)
	right.items = append(right.items, old[blockItems/2:]...)
	if ii <= blockItems/2 {
		left.items = slices.Insert(left.items, ii, it)
	} else {
		right.items = slices.Insert(right.items, ii-blockItems/2, it)
	}
	r.blocks[bi] = left
	r.blocks = slices.Insert(r.blocks, bi+1, right)
}

// appendSorted adds an item whose id is above every id held.
func (r *registry) appendSorted(it taskItem) {
	r.n++
	if k := len(r.blocks); k == 0 || len(r.blocks[k-1].items) == blockItems {
		r.blocks = append(r.blocks, newBlock(r.gen))
	}
	b := r.mutable(len(r.blocks) - 1)
	b.items = append(b.items, it)
}

// set replaces a stored item with it (the same id).
func (r *registry) set(it taskItem) {
	bi, ii, ok := r.find(r.idOf(it))
	if !ok {
		panic("state: set of a task that is not in the registry")
	}
	r.mutable(bi).items[ii] = it
}

// remove deletes the task with the id and returns what it was.
func (r *registry) remove(id string) (Task, bool) {
	bi, ii, ok := r.find(id)
	if !ok {
		return Task{}, false
	}
	it := r.blocks[bi].items[ii]
	t := r.task(it)
	b := r.mutable(bi)
	b.items = slices.Delete(b.items, ii, ii+1)
	r.n--
	switch {
	case len(b.items) == 0:
		r.blocks = slices.Delete(r.blocks, bi, bi+1)
	case len(b.items) < blockItems/4 && bi+1 < len(r.blocks) && len(b.items)+len(r.blocks[bi+1].items) <= blockItems/2:
		// Merge a sparse block into a new one with its neighbour, so that
		// deletions do not leave many near-empty blocks.
		m := newBlock(r.gen)
		m.items = append(append(m.items, b.items...), r.blocks[bi+1].items...)
		r.blocks[bi] = m
		r.blocks = slices.Delete(r.blocks, bi+1, bi+2)
	}
	r.reclaim()
	r.arena.release(it.ref(), it.klen(), r.snapshots.Load() > 0)
	return t, true
}

// reclaim makes ids freed during snapshots reusable once none is alive.
func (r *registry) reclaim() {
	if len(r.arena.pending) > 0 && r.snapshots.Load() == 0 {
		r.arena.flush()
	}
}

// task returns the Task an item stands for.
func (r *registry) task(it taskItem) Task { return taskOf(r.arena.chunks, it) }

func taskOf(chunks [][]byte, it taskItem) Task {
	t := Task{ID: string(keyOf(chunks, it)), Stateful: it.flags&flagStateful != 0, StandbyReplicas: it.standby,
		Weight: weightFrom(it.weight), CreatedIndex: it.created}
	setState(&t, it.state())
	return t
}

// setState sets a task's state and pending reason from the stored state.
func setState(t *Task, s uint8) {
	switch s {
	case stateAssigned:
		t.State, t.PendingReason = TaskStateAssigned, ""
	case stateNoWorker:
		t.State, t.PendingReason = TaskStatePending, reasonNoWorker
	case stateUnassigned:
		t.State, t.PendingReason = TaskStatePending, reasonUnassigned
	default: // stateNone
		t.State, t.PendingReason = "", ""
	}
}

// ascendAfter calls fn for the items with ids above after, in order, until
// fn returns false.
func (r *registry) ascendAfter(after string, fn func(taskItem) bool) {
	bi, ii, found := r.find(after)
	if found {
		ii++
	}
	ascendBlocks(r.blocks, bi, ii, fn)
}

// ascendFrom calls fn for the items with ids from from on, in order, until
// fn returns false.
func (r *registry) ascendFrom(from string, fn func(taskItem) bool) {
	bi, ii, _ := r.find(from)
	ascendBlocks(r.blocks, bi, ii, fn)
}

func ascendBlocks(blocks []*block, bi, ii int, fn func(taskItem) bool) {
	for ; bi < len(blocks); bi, ii = bi+1, 0 {
		for _, it := range blocks[bi].items[ii:] {
			if !fn(it) {
				return
			}
		}
	}
}

// view returns the registry as of now, readable without the FSM's lock
// while the registry changes, until released.
func (r *registry) view() *registryView {
	r.snapshots.Add(1)
	r.gen++
	return &registryView{r: r, n: r.n, blocks: slices.Clone(r.blocks), chunks: slices.Clone(r.arena.chunks)}
}

// registryView is a registry as of one moment: its blocks, which the
// registry no longer changes in place, and the arena's chunks then.
// Chunks only grow past what the view's items reference, and freed bytes
// are not reused while it lives.
type registryView struct {
	r        *registry
	n        int
	blocks   []*block
	chunks   [][]byte
	released atomic.Bool
}

func (v *registryView) len() int { return v.n }

// release ends the view; it may be called more than once.
func (v *registryView) release() {
	if v.released.CompareAndSwap(false, true) {
		v.r.snapshots.Add(-1)
	}
}

// The registry in a snapshot: the number of tasks, then each task in id
// order as the id's length, the id, the created index, the standby
// replicas (uvarints, but for the id's bytes) and a flags byte; from
// version 8 on, then the weight − 1 (a uvarint).

// snapshotWeights is the first snapshot version whose task records (in
// the registry and the dedup table) carry weights.
const snapshotWeights = 8

// writeTasks writes the view's tasks in the binary form of a snapshot of
// the version given: from snapshotParts on, in parts.
func writeTasks(w io.Writer, v *registryView, version uint32) error {
	if version >= snapshotMapped {
		cw, ok := w.(*countWriter)
		if !ok {
			cw = &countWriter{w: w}
		}
		return writeMappedParts(cw, v)
	}
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriter(w)
	}
	var err error
	if version >= snapshotParts {
		err = writeTaskParts(bw, v)
	} else {
		err = writeTaskList(bw, v)
	}
	if err == nil && !ok {
		err = bw.Flush()
	}
	return err
}

// writeTaskList writes the count, then every record.
func writeTaskList(bw *bufio.Writer, v *registryView) error {
	// Whole blocks are encoded into buf and written in one piece: a
	// registry of millions is written with thousands of calls, not
	// millions.
	buf := make([]byte, 0, blockItems*maxTaskRecord)
	buf = binary.AppendUvarint(buf, uint64(v.len()))
	for _, blk := range v.blocks {
		for _, it := range blk.items {
			buf = appendTaskRecord(buf, v.chunks, it)
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		buf = buf[:0]
	}
	_, err := bw.Write(buf)
	return err
}

// writeTaskParts writes the count, then the records in parts of up to
// partTasks, each part its record count and byte length first.
func writeTaskParts(bw *bufio.Writer, v *registryView) error {
	hdr := binary.AppendUvarint(nil, uint64(v.len()))
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	pw := partWriter{bw: bw, part: make([]byte, 0, partTasks*32)}
	for _, blk := range v.blocks {
		for _, it := range blk.items {
			pw.part = appendTaskRecord(pw.part, v.chunks, it)
			if err := pw.added(partTasks); err != nil {
				return err
			}
		}
	}
	return pw.flush()
}

// partWriter writes records in parts, each its record count and byte
// length first.
type partWriter struct {
	bw    *bufio.Writer
	hdr   []byte
	part  []byte // the part's records so far
	count int
}

// added counts a record appended to part, and writes the part once it
// holds max.
func (p *partWriter) added(max int) error {
	if p.count++; p.count < max {
		return nil
	}
	return p.flush()
}

// flush writes the part, if it holds a record.
func (p *partWriter) flush() error {
	if p.count == 0 {
		return nil
	}
	p.hdr = binary.AppendUvarint(p.hdr[:0], uint64(p.count))
	p.hdr = binary.AppendUvarint(p.hdr, uint64(len(p.part)))
	if _, err := p.bw.Write(p.hdr); err != nil {
		return err
	}
	_, err := p.bw.Write(p.part)
	p.part, p.count = p.part[:0], 0
	return err
}

// appendTaskRecord appends an item's record.
func appendTaskRecord(buf []byte, chunks [][]byte, it taskItem) []byte {
	buf = binary.AppendUvarint(buf, uint64(it.klen()))
	buf = append(buf, keyOf(chunks, it)...)
	buf = binary.AppendUvarint(buf, it.created)
	buf = binary.AppendUvarint(buf, uint64(it.standby))
	buf = append(buf, it.flags)
	return binary.AppendUvarint(buf, uint64(it.weight))
}

// maxTaskRecord is the longest task record writeTasks writes.
const maxTaskRecord = 4*binary.MaxVarintLen64 + maxIDLen + 1

// readTasks reads the tasks writeTasks wrote, in a snapshot of version
// v, into a new registry. Ids must be in strictly increasing order (which
// also rules out duplicates), each within the length a command allows.
func readTasks(r *bufio.Reader, v uint32) (*registry, error) {
	if v >= snapshotMapped {
		return readMappedParts(r, nil)
	}
	if v >= snapshotParts {
		return readTaskParts(r, v)
	}
	w := newWindow(r)
	defer w.done()
	w.need(binary.MaxVarintLen64)
	n := w.uvarint()
	if w.err != nil {
		return nil, fmt.Errorf("task count: %w", w.err)
	}
	reg := newRegistry()
	var prev []byte
	for i := uint64(0); i < n; i++ {
		w.need(maxTaskRecord)
		id, it, err := readTaskRecord(w, v, i)
		if err != nil {
			return nil, err
		}
		if i > 0 && bytes.Compare(prev, id) >= 0 {
			return nil, fmt.Errorf("task %d: id %q does not follow %q", i, id, prev)
		}
		ref, dst := reg.arena.alloc(len(id))
		copy(dst, id)
		it.key = itemKey(ref, len(id))
		reg.appendSorted(it)
		prev = dst
	}
	return reg, nil
}

// readTaskRecord reads task i's record from w: its id, valid until w's
// next need, and its item but for the key.
func readTaskRecord(w *window, v uint32, i uint64) ([]byte, taskItem, error) {
	l := w.uvarint()
	if w.err == nil && (l == 0 || l > maxIDLen) {
		return nil, taskItem{}, fmt.Errorf("task %d: id of %d bytes (1 to %d allowed)", i, l, maxIDLen)
	}
	id := w.bytes(l)
	if w.err != nil {
		return nil, taskItem{}, fmt.Errorf("task %d: %w", i, w.err)
	}
	it := taskItem{created: w.uvarint(), standby: w.uvarint32("standby replicas"), flags: w.byte()}
	if v >= snapshotWeights {
		it.weight = w.weight()
	}
	switch {
	case w.err != nil:
		return nil, taskItem{}, fmt.Errorf("task %q: %w", id, w.err)
	case it.flags&^flagsMask != 0 || it.state() >= numStates:
		return nil, taskItem{}, fmt.Errorf("task %q: flags %#x", id, it.flags)
	}
	return id, it, nil
}

// weight reads a task record's weight − 1.
func (w *window) weight() uint16 {
	v := w.uvarint()
	if v >= MaxWeight {
		w.fail(fmt.Errorf("weight %d (at most %d)", v+1, MaxWeight))
		return 0
	}
	return uint16(v)
}

// registryOf returns a registry of tasks as older snapshots list them,
// refusing an id listed twice.
func registryOf(tasks []Task) (*registry, error) {
	slices.SortFunc(tasks, func(a, b Task) int { return strings.Compare(a.ID, b.ID) })
	reg := newRegistry()
	for i := range tasks {
		t := &tasks[i]
		if i > 0 && tasks[i-1].ID == t.ID {
			return nil, fmt.Errorf("task %q listed twice", t.ID)
		}
		if t.ID == "" || len(t.ID) > maxIDLen {
			return nil, fmt.Errorf("task id of %d bytes (1 to %d allowed)", len(t.ID), maxIDLen)
		}
		if t.Weight > MaxWeight {
			return nil, fmt.Errorf("task %q: weight %d (at most %d)", t.ID, t.Weight, MaxWeight)
		}
		reg.add(t, stateOfTask(t))
	}
	return reg, nil
}

// The dedup table in a snapshot: the number of entries, then each, oldest
// first, as the client id, the request id, the result's index and code,
// its task (id, created index, standby replicas, flags, and from version
// 8 on its weight − 1) and its error;
// strings are a uvarint length and the bytes, numbers uvarints. The
// task's flags are the registry's, with state 3 for a result whose task
// has no state (an unknown id's).
const (
	stateNone uint8 = 3
	maxErrLen       = 1 << 16
)

// writeDedup writes the view's entries in the binary form of a snapshot
// of the version given: from snapshotParts on, in parts.
func writeDedup(w io.Writer, v queueView[dedupEntry], version uint32) error {
	bw, ok := w.(*bufio.Writer)
	if !ok {
		bw = bufio.NewWriter(w)
	}
	b := binary.AppendUvarint(nil, uint64(v.len()))
	if _, err := bw.Write(b); err != nil {
		return err
	}
	parts := version >= snapshotParts
	pw := partWriter{bw: bw}
	for i, c := range v.chunks {
		if i == 0 {
			c = c[v.head:]
		}
		for i := range c {
			if !parts {
				b = appendDedupRecord(b[:0], &c[i])
				if _, err := bw.Write(b); err != nil {
					return err
				}
				continue
			}
			pw.part = appendDedupRecord(pw.part, &c[i])
			if err := pw.added(partEntries); err != nil {
				return err
			}
		}
	}
	if err := pw.flush(); err != nil {
		return err
	}
	if !ok {
		return bw.Flush()
	}
	return nil
}

// appendDedupRecord appends an entry's record.
func appendDedupRecord(b []byte, e *dedupEntry) []byte {
	b = appendString(b, e.Client)
	b = appendString(b, e.Request)
	b = binary.AppendUvarint(b, e.index)
	b = append(b, byte(e.code))
	b = appendString(b, e.taskID)
	b = binary.AppendUvarint(b, e.created)
	b = binary.AppendUvarint(b, uint64(e.standby))
	b = append(b, e.flags)
	b = binary.AppendUvarint(b, uint64(weightOf(e.weight)))
	var msg string
	if e.err != nil {
		msg = *e.err
	}
	return appendString(b, msg)
}

// dedupPresize bounds the room readDedup makes before it reads the
// entries a snapshot announces.
const dedupPresize = 1 << 20

// dedupTable is the request id table as a snapshot is read: the entries
// in index order and where each is.
type dedupTable struct {
	order queue[dedupEntry]
	index dedupIndex
}

func newDedupTable(n uint64) *dedupTable {
	return &dedupTable{index: newDedupIndex(int(min(n, dedupPresize)))}
}

// add appends e, refusing a request listed twice or out of index order.
func (d *dedupTable) add(e dedupEntry) error {
	if d.order.len() > 0 {
		if last, _ := d.order.at(d.order.pushed - 1); last.index > e.index {
			return fmt.Errorf("request ids out of index order (%d after %d)", e.index, last.index)
		}
	}
	// The entry goes in first, so that put can compare a key already
	// there with it (the table is dropped with the error).
	if seq := d.order.push(e); !d.index.put(&d.order, dedupKey{e.Client, e.Request}, seq) {
		return fmt.Errorf("request %q of client %q listed twice", e.Request, e.Client)
	}
	return nil
}

// addParsed appends a parsed part's entries, taking their memory for the
// queue, with the checks of add.
func (d *dedupTable) addParsed(p *parsedPart) error {
	if p.err != nil {
		return p.err
	}
	prev, ok := d.order.at(d.order.pushed - 1)
	for i := range p.entries {
		e := &p.entries[i]
		if ok && prev.index > e.index {
			return fmt.Errorf("entry %d: request ids out of index order (%d after %d)", p.first+uint64(i), e.index, prev.index)
		}
		prev, ok = e, true
	}
	base := d.order.pushed
	d.order.adopt(p.entries)
	for i := range p.entries {
		e := &p.entries[i]
		if !d.index.putHashed(&d.order, dedupKey{e.Client, e.Request}, base+uint64(i), p.hashes[i]) {
			return fmt.Errorf("entry %d: request %q of client %q listed twice", p.first+uint64(i), e.Request, e.Client)
		}
	}
	return nil
}

// maxDedupRecord is the longest entry writeDedup writes: three ids and
// an error, each with its length, and five numbers and two bytes.
const maxDedupRecord = 3*(binary.MaxVarintLen64+maxIDLen) + binary.MaxVarintLen64 + maxErrLen + 5*binary.MaxVarintLen64 + 2

// readDedup reads the entries writeDedup wrote in a snapshot of version v.
func readDedup(r *bufio.Reader, v uint32) (*dedupTable, error) {
	w := newWindow(r)
	defer w.done()
	w.need(binary.MaxVarintLen64)
	n := w.uvarint()
	if w.err != nil {
		return nil, fmt.Errorf("count: %w", w.err)
	}
	// The count is the file's word: room for at most a bounded number up
	// front, the rest as entries come.
	out := newDedupTable(n)
	clients := make(map[string]string)
	for i := uint64(0); i < n; i++ {
		w.need(maxDedupRecord)
		if err := out.read(w, clients, v, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// read reads entry i from w and adds it. A request id table holds many
// requests of few clients: clients interns their ids, so that each is one
// string, not one per entry.
func (d *dedupTable) read(w *window, clients map[string]string, v uint32, i uint64) error {
	e, err := readDedupEntry(w, clients, v)
	if err == nil {
		err = d.add(e)
	}
	if err != nil {
		return fmt.Errorf("entry %d: %w", i, err)
	}
	return nil
}

// readDedupEntry reads one entry of the request id table.
func readDedupEntry(w *window, clients map[string]string, v uint32) (dedupEntry, error) {
	client, request := w.str(maxIDLen), w.str(maxIDLen)
	var e dedupEntry
	e.index = w.uvarint()
	e.code = Code(w.byte())
	id := w.str(maxIDLen)
	e.created = w.uvarint()
	e.standby = w.uvarint32("standby replicas")
	e.flags = w.byte()
	if v >= snapshotWeights {
		e.weight = weightFrom(w.weight())
	}
	msg := w.str(maxErrLen)
	switch {
	case w.err != nil:
		return dedupEntry{}, w.err
	case e.code > CodeConflict:
		return dedupEntry{}, fmt.Errorf("result code %d", e.code)
	case e.flags&^flagsMask != 0:
		return dedupEntry{}, fmt.Errorf("flags %#x", e.flags)
	}
	var ok bool
	if e.Client, ok = clients[string(client)]; !ok {
		e.Client = string(client)
		clients[e.Client] = e.Client
	}
	// The request id and the task's id share one allocation.
	var sb strings.Builder
	sb.Grow(len(request) + len(id))
	sb.Write(request)
	sb.Write(id)
	s := sb.String()
	e.Request, e.taskID = s[:len(request)], s[len(request):]
	if len(msg) > 0 {
		m := string(msg)
		e.err = &m
	}
	return e, nil
}
