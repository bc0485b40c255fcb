// Package state is the replicated state machine: tasks, the committed
// assignment, the outbox, the dedup table, the commands that change them
// and the versioned snapshot format. It applies committed entries as
// (index, term, data) whatever log carries them (docs/design.md, "Tasks,
// workers, assignments").
package state

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Task is a unit of work the controller places on workers.
type Task struct {
	ID              string `json:"id"`
	Stateful        bool   `json:"stateful,omitempty"`
	StandbyReplicas uint32 `json:"standby_replicas,omitempty"`
	// Weight is what the task costs relative to others, at most
	// MaxWeight. 0 means 1 (a task created before weights has 0), and the
	// FSM hands out 0 for 1, so that tasks, events and snapshots of
	// unweighted tasks read as before.
	Weight        uint32 `json:"weight,omitempty"`
	CreatedIndex  uint64 `json:"created_index"`
	State         string `json:"state,omitempty"`
	PendingReason string `json:"pending_reason,omitempty"`
}

// Task states.
const (
	// TaskStatePending is the state of a task that no worker holds.
	TaskStatePending = "PENDING"
	// TaskStateAssigned is the state of a task with an active worker.
	TaskStateAssigned = "ASSIGNED"
)

// Placement says where the copies of one task run. Placements stored in the
// FSM are never modified in place (a new generation replaces them), so
// readers may keep the slices they are given.
type Placement struct {
	Task     string   `json:"task"`
	Active   string   `json:"active,omitempty"`
	Standbys []string `json:"standbys,omitempty"`
	Warmups  []string `json:"warmups,omitempty"`
	// Epoch is the task's epoch (see FSM.TaskEpoch) on the placements the
	// FSM hands out. It is derived when the assignment is applied, never
	// commanded: CmdSetAssignment does not encode it, and placements in
	// deltas and in assignment events leave it zero.
	Epoch uint64 `json:"epoch,omitempty"`
}

// Event is a committed change that goes downstream through the outbox,
// keyed by its log index and, within a CmdBatch entry, by its position
// (docs/design.md, "Downstream writes and the epoch fence").
type Event struct {
	Index uint64 `json:"index"`
	// Seq is the event's command's position in its CmdBatch entry (0 for an
	// entry of one command): (Index, Seq) names one change.
	Seq    uint32 `json:"seq,omitempty"`
	Term   uint64 `json:"term"`
	Kind   string `json:"kind"`
	TaskID string `json:"task_id"`
	Task   Task   `json:"task"`
	// Key, when set, is the downstream record key (otherwise TaskID):
	// assignment changes are keyed by cluster id, so they stay in order.
	Key string `json:"key,omitempty"`
	// Generation, Placements and Removed describe an assignment change.
	Generation uint64      `json:"generation,omitempty"`
	Placements []Placement `json:"placements,omitempty"`
	Removed    []string    `json:"removed,omitempty"`
}

// Event kinds.
const (
	EventTaskSubmitted = "task_submitted"
	EventTaskDeleted   = "task_deleted"
	// EventAssignment carries one assignment generation's delta.
	EventAssignment = "assignment_changed"
)

// Code is the outcome of applying a command. Codes are stored in the dedup
// table and in snapshots: never renumber them.
type Code uint8

const (
	CodeOK            Code = 0
	CodeAlreadyExists Code = 1
	CodeNotFound      Code = 2
	CodeInvalid       Code = 3
	// CodeConflict: an assignment delta planned from another generation.
	CodeConflict Code = 4
)

// Result is what applying one command produced. A retried command with a
// known (client id, request id) gets the stored Result back, unchanged.
type Result struct {
	Index uint64 `json:"index"`
	Code  Code   `json:"code,omitempty"`
	Task  Task   `json:"task"`
	// Err describes a CodeInvalid result.
	Err string `json:"err,omitempty"`
}

// Dedup bounds. Entries expire by log index, never by wall clock, so every
// replica drops the same entries at the same index.
const (
	// DefaultDedupWindow is how many log indexes a request id is remembered for.
	DefaultDedupWindow = 1 << 20
	// DefaultDedupMaxEntries caps the remembered request ids across all clients.
	DefaultDedupMaxEntries = 100_000
)

type dedupKey struct{ client, request string }

// dedupRecord is a remembered request id and its Result as snapshots
// before version 6 list them in their JSON body.
type dedupRecord struct {
	Client  string `json:"client"`
	Request string `json:"request"`
	Result  Result `json:"result"`
}

// dedupEntry is a remembered request id and its Result as the request id
// table holds it: the Result's task as the registry stores a task (its
// state and pending reason in flags, as snapshots write them), its error
// apart, since few results have one. A restart rebuilds every entry, so
// each byte is one the new process writes for the first time.
type dedupEntry struct {
	Client, Request, taskID string
	err                     *string
	index, created          uint64
	standby, weight         uint32
	code                    Code
	// flags are flagStateful and the state, stateNone for a result whose
	// task has none (an unknown id's).
	flags uint8
}

// entryOf is the entry of a request's Result.
func entryOf(client, request string, r Result) dedupEntry {
	st := stateNone
	if r.Task.State != "" || r.Task.PendingReason != "" {
		st = stateOfTask(&r.Task)
	}
	e := dedupEntry{Client: client, Request: request, taskID: r.Task.ID, index: r.Index, created: r.Task.CreatedIndex,
		standby: r.Task.StandbyReplicas, weight: r.Task.Weight, code: r.Code, flags: st << stateShift}
	if r.Task.Stateful {
		e.flags |= flagStateful
	}
	if r.Err != "" {
		// A copy of its own: &r.Err would move every r to the heap.
		err := r.Err
		e.err = &err
	}
	return e
}

// result is the Result e holds.
func (e *dedupEntry) result() Result {
	r := Result{Index: e.index, Code: e.code, Task: Task{ID: e.taskID, CreatedIndex: e.created,
		StandbyReplicas: e.standby, Weight: e.weight, Stateful: e.flags&flagStateful != 0}}
	setState(&r.Task, (taskItem{flags: e.flags}).state())
	if e.err != nil {
		r.Err = *e.err
	}
	return r
}

// record is e as older snapshots and the tests list it.
func (e *dedupEntry) record() dedupRecord {
	return dedupRecord{Client: e.Client, Request: e.Request, Result: e.result()}
}

// FSM is the replicated state machine: tasks, the assignment, the outbox
// and the dedup table. One goroutine applies entries, in log order (Apply,
// ApplyBatch, Advance); readers take the read lock.
type FSM struct {
	clusterID  string
	window     uint64
	maxEntries int

	mu sync.RWMutex
	// batchRoom holds the commands of the last batch applied, as room for
	// the next one's.
	batchRoom []Command
	// restoredAt and restoreTook are when the last Restore ended and how
	// long it took (zero: none yet).
	restoredAt  time.Time
	restoreTook time.Duration
	// tasks is the task registry; a snapshot takes a copy-on-write view
	// of it.
	tasks *registry
	// dedup finds a request id's entry's sequence number in order, which
	// holds the Result once.
	dedup dedupIndex
	// order holds dedup entries in apply order (hence index order), so
	// expiry pops from the front.
	order queue[dedupEntry]

	// taskVer counts changes of the task set.
	taskVer uint64

	// outbox holds the events not yet known to be published, in index
	// order; published is the replicated watermark below which they were
	// dropped.
	outbox    []Event
	published uint64

	// assignGen is the assignment's generation; assignment maps task id to
	// its placement (only tasks that exist).
	assignGen  uint64
	assignment map[string]Placement
	// assignVer counts changes of the assignment map (a new generation, or a
	// deleted task dropping its placement), so readers can cache indexes.
	assignVer uint64
	// hist is the recent generations, for watchers (watch.go).
	hist history
	// taskHist is the recent task creations and deletions, for watchers
	// (taskwatch.go).
	taskHist taskHistory
	// epochs maps task id to its epoch (see TaskEpoch), for tasks that
	// exist and ever had an active worker; every stored placement carries
	// its task's epoch as well.
	epochs map[string]uint64

	// members is the member table (see MemberRecord), by id.
	members map[string]MemberRecord

	// drained are the drained workers (see EncodeDrain); drainVer counts
	// their changes.
	drained  map[string]struct{}
	drainVer uint64

	// frozen: an operator froze the placement (CmdSetPlacementFrozen).
	frozen bool

	// workerAddrs are the workers' client addresses by worker id (see
	// EncodeWorkerAddr); workerAddrVer counts their changes.
	workerAddrs   map[string]string
	workerAddrVer uint64

	applied   atomic.Uint64
	dedupHits atomic.Uint64
	// writes counts the commands applied since this FSM was made: what a
	// restart replays since the last snapshot.
	writes atomic.Uint64
	// sawBatch is set once this FSM applied a CmdBatch entry (not carried
	// by snapshots).
	sawBatch atomic.Bool
	// appliedCh is closed and replaced after every apply.
	appliedCh atomic.Pointer[chan struct{}]
}

// NewFSM returns an empty state machine for the cluster.
func NewFSM(clusterID string) *FSM {
	f := &FSM{
		clusterID:   clusterID,
		window:      DefaultDedupWindow,
		maxEntries:  DefaultDedupMaxEntries,
		tasks:       newRegistry(),
		dedup:       newDedupIndex(0),
		assignment:  make(map[string]Placement),
		epochs:      make(map[string]uint64),
		members:     make(map[string]MemberRecord),
		drained:     make(map[string]struct{}),
		workerAddrs: make(map[string]string),
	}
	f.hist.notify()
	f.taskHist.notify()
	ch := make(chan struct{})
	f.appliedCh.Store(&ch)
	return f
}

// WaitApplied returns once the FSM has applied index, or ErrStopped when stop
// closes first.
func (f *FSM) WaitApplied(stop <-chan struct{}, index uint64) error {
	for {
		ch := *f.appliedCh.Load()
		if f.applied.Load() >= index {
			return nil
		}
		select {
		case <-ch:
		case <-stop:
			return ErrStopped
		}
	}
}

// AppliedCh returns a channel closed at the next apply.
func (f *FSM) AppliedCh() <-chan struct{} { return *f.appliedCh.Load() }

// ErrStopped is returned by waits cut short by shutdown.
var ErrStopped = errors.New("stopped")

func (f *FSM) signalApplied() {
	ch := make(chan struct{})
	old := f.appliedCh.Swap(&ch)
	close(*old)
}

// SetDedupLimits changes the dedup bounds; every replica must use the same
// values. For tests.
func (f *FSM) SetDedupLimits(window uint64, maxEntries int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.window, f.maxEntries = window, maxEntries
}

// AppliedIndex is the index of the last entry applied to this FSM.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// AppliedBatch reports whether this FSM has applied a CmdBatch entry since
// the process started: every voter of the cluster applied log format 2 when
// it was written.
func (f *FSM) AppliedBatch() bool { return f.sawBatch.Load() }

// Writes is how many commands this FSM applied since it was made (a
// batch entry counts each of its commands).
func (f *FSM) Writes() uint64 { return f.writes.Load() }

// DedupHits counts retried writes answered from the dedup table.
func (f *FSM) DedupHits() uint64 { return f.dedupHits.Load() }

// Entry is one committed log entry as the state machine applies it.
type Entry struct {
	Index uint64
	Term  uint64
	// Data is the encoded command (see DecodeCommand).
	Data []byte
	// NoCommand marks an entry of the log's own (a membership change, a
	// leader's no-op): it carries no command and only advances the
	// applied index.
	NoCommand bool
}

// Apply applies the command data committed at index in term and returns
// its Result (a BatchResult for a CmdBatch entry).
func (f *FSM) Apply(index, term uint64, data []byte) any {
	f.mu.Lock()
	defer f.signalApplied()
	defer f.mu.Unlock()
	return f.applyLocked(Entry{Index: index, Term: term, Data: data})
}

// ApplyBatch applies entries in order under one lock and returns one
// response per entry (nil for a NoCommand entry).
func (f *FSM) ApplyBatch(entries []Entry) []any {
	out := make([]any, len(entries))
	f.mu.Lock()
	defer f.signalApplied()
	defer f.mu.Unlock()
	for i, e := range entries {
		out[i] = f.applyLocked(e)
	}
	return out
}

// Advance counts the entry at index, which carries no command (a
// membership change), as applied, so the applied index keeps pace with
// every entry of the log.
func (f *FSM) Advance(index uint64) {
	f.applied.Store(index)
	f.signalApplied()
}

func (f *FSM) applyLocked(l Entry) any {
	defer f.applied.Store(l.Index)
	if l.NoCommand {
		return nil
	}
	f.expireLocked(l.Index)
	c, err := decodeCommand(l.Data, f.batchRoom)
	if err != nil {
		return Result{Index: l.Index, Code: CodeInvalid, Err: err.Error()}
	}
	if c.Type == CmdBatch {
		// The next batch is decoded into the same room: nothing keeps
		// a command past its apply.
		f.batchRoom = c.Batch
		f.sawBatch.Store(true)
		out := make(BatchResult, len(c.Batch))
		for i := range c.Batch {
			out[i] = f.applyCommandLocked(l, uint32(i), &c.Batch[i])
		}
		return out
	}
	return f.applyCommandLocked(l, 0, &c)
}

// BatchResult is the outcome of a CmdBatch entry: one Result per command,
// in order.
type BatchResult []Result

// applyCommandLocked applies one command of entry l; seq is its position
// in a CmdBatch (0 otherwise), which numbers its event within the entry.
func (f *FSM) applyCommandLocked(l Entry, seq uint32, c *Command) Result {
	f.writes.Add(1)
	key := dedupKey{c.ClientID, c.RequestID}
	if c.RequestID != "" {
		if seq, ok := f.dedup.find(&f.order, key); ok {
			if e, ok := f.order.at(seq); ok {
				f.dedupHits.Add(1)
				return e.result()
			}
		}
	}
	var r Result
	switch c.Type {
	case CmdNoop:
		return Result{Index: l.Index}
	case CmdTrimOutbox:
		f.trimLocked(c.UpTo)
		return Result{Index: l.Index}
	case CmdSetAssignment:
		return f.assignLocked(l, &c.Assign)
	case CmdSetMember:
		return f.setMemberLocked(l.Index, c.Member)
	case CmdRemoveMember:
		return f.removeMemberLocked(l.Index, c.Member.ID)
	case CmdSetWorkerDrain:
		return f.drainLocked(l.Index, c.Worker, c.Drained)
	case CmdSetPlacementFrozen:
		f.frozen = c.Frozen
		return Result{Index: l.Index}
	case CmdSetWorkerAddr:
		return f.setWorkerAddrLocked(l.Index, c.Worker, c.Addr)
	case CmdSubmitTask:
		r = f.submitLocked(l.Index, c.Task)
		if r.Code == CodeOK {
			f.outbox = append(f.outbox, Event{Index: l.Index, Seq: seq, Term: l.Term, Kind: EventTaskSubmitted, TaskID: r.Task.ID, Task: r.Task})
		}
	case CmdDeleteTask:
		r = f.deleteLocked(l.Index, c.Task.ID)
		if r.Code == CodeOK {
			f.outbox = append(f.outbox, Event{Index: l.Index, Seq: seq, Term: l.Term, Kind: EventTaskDeleted, TaskID: r.Task.ID, Task: r.Task})
		}
	}
	if c.RequestID != "" {
		f.rememberLocked(entryOf(c.ClientID, c.RequestID, r))
	}
	return r
}

func (f *FSM) submitLocked(index uint64, t Task) Result {
	t.CreatedIndex = index
	if old, added := f.tasks.add(&t, stateUnassigned); !added {
		return Result{Index: index, Code: CodeAlreadyExists, Task: f.tasks.task(old)}
	}
	t.State = TaskStatePending
	t.PendingReason = reasonUnassigned
	f.taskVer++
	f.taskHist.created(t)
	return Result{Index: index, Task: t}
}

func (f *FSM) deleteLocked(index uint64, id string) Result {
	old, ok := f.tasks.remove(id)
	if !ok {
		return Result{Index: index, Code: CodeNotFound, Task: Task{ID: id}}
	}
	// The epoch goes with the task: one submitted again under the same id
	// counts from zero.
	delete(f.epochs, id)
	if _, ok := f.assignment[id]; ok {
		delete(f.assignment, id)
		f.assignVer++
		f.hist.deletedTask(id)
	}
	f.taskVer++
	f.taskHist.deleted(index, id)
	return Result{Index: index, Task: old}
}

// assignLocked applies an assignment delta. Placements of tasks deleted
// since the plan are skipped; every replica skips the same ones. A
// placement that gives its task an active worker other than the one it had
// (none counts as other) starts a new epoch of the task (docs/design.md,
// "Tasks, workers, assignments").
func (f *FSM) assignLocked(l Entry, d *AssignmentDelta) Result {
	if d.Base != f.assignGen {
		return Result{Index: l.Index, Code: CodeConflict, Err: fmt.Sprintf("assignment delta from generation %d, current is %d", d.Base, f.assignGen)}
	}
	f.assignGen = d.Generation
	f.assignVer++
	ev := Event{Index: l.Index, Term: l.Term, Kind: EventAssignment, Key: f.clusterID, Generation: d.Generation}
	gc := GenerationChange{Generation: d.Generation, Index: l.Index}
	for _, p := range d.Set {
		old, ok := f.tasks.get(p.Task)
		if !ok {
			continue
		}
		ev.Placements = append(ev.Placements, p)
		if p.Active != "" && p.Active != f.assignment[p.Task].Active {
			f.epochs[p.Task]++
		}
		p.Epoch = f.epochs[p.Task]
		f.assignment[p.Task] = p
		gc.Set = append(gc.Set, p)
		if p.Active != "" {
			f.tasks.set(old.withState(stateAssigned))
		} else {
			f.tasks.set(old.withState(stateNoWorker))
		}
	}
	for _, id := range d.Removed {
		if _, ok := f.assignment[id]; !ok {
			continue
		}
		delete(f.assignment, id)
		if old, ok := f.tasks.get(id); ok {
			f.tasks.set(old.withState(stateUnassigned))
		}
		ev.Removed = append(ev.Removed, id)
	}
	f.outbox = append(f.outbox, ev)
	gc.Removed = slices.Clone(ev.Removed)
	f.hist.add(gc)
	return Result{Index: l.Index}
}

// Assignment returns the assignment's generation and a copy of its map
// (the placements themselves are shared: they are never modified). Each
// placement carries its task's epoch.
func (f *FSM) Assignment() (uint64, map[string]Placement) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.assignGen, maps.Clone(f.assignment)
}

// TaskEpoch returns the epoch of the task: how many times the committed
// assignment gave it a new active worker (a non-empty active other than the
// one it had just before, the first one included). A task that loses its
// active keeps its epoch; 0 means it never had one, or does not exist. A
// deleted task's epoch goes with it. Every placement Assignment returns
// carries its task's epoch too.
func (f *FSM) TaskEpoch(id string) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.epochs[id]
}

// AssignmentGeneration returns the assignment's generation and the version
// of the assignment map (see assignVer).
func (f *FSM) AssignmentGeneration() (gen, version uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.assignGen, f.assignVer
}

// AllTasks returns every task, in id order, and the version of the task
// set (it changes when a task is created or deleted).
func (f *FSM) AllTasks() ([]Task, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Task, 0, f.tasks.len())
	ascendBlocks(f.tasks.blocks, 0, 0, func(it taskItem) bool {
		out = append(out, f.tasks.task(it))
		return true
	})
	return out, f.taskVer
}

// TaskVersion returns the version of the task set.
func (f *FSM) TaskVersion() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.taskVer
}

func (f *FSM) rememberLocked(e dedupEntry) {
	// A request id is remembered only when it was not found.
	f.dedup.put(&f.order, dedupKey{e.Client, e.Request}, f.order.push(e))
	for f.order.len() > f.maxEntries {
		f.popLocked()
	}
}

// expireLocked forgets request ids older than the window at index.
func (f *FSM) expireLocked(index uint64) {
	for f.order.len() > 0 && f.order.front().index+f.window <= index {
		f.popLocked()
	}
}

func (f *FSM) popLocked() {
	seq := f.order.first()
	e := f.order.pop()
	f.dedup.remove(dedupKey{e.Client, e.Request}, seq)
}

// trimLocked drops the events up to upTo, which are published downstream.
func (f *FSM) trimLocked(upTo uint64) {
	if upTo <= f.published {
		return
	}
	f.published = upTo
	i, _ := slices.BinarySearchFunc(f.outbox, upTo+1, func(e Event, idx uint64) int { return cmp.Compare(e.Index, idx) })
	if i == 0 {
		return
	}
	// Keep the array, so the appends that follow do not regrow it, unless
	// it is large and far larger than what is left (an outage's backlog
	// drained).
	if rest := len(f.outbox) - i; cap(f.outbox) > 1<<16 && cap(f.outbox) > 4*rest {
		// A new array: append(f.outbox[:0:0], …) of nothing would keep
		// pointing into the old one, and keep it alive.
		f.outbox = append(make([]Event, 0, rest), f.outbox[i:]...)
		return
	}
	n := copy(f.outbox, f.outbox[i:])
	clear(f.outbox[n:])
	f.outbox = f.outbox[:n]
}

// EventsAfter returns up to limit outbox events with an index above after,
// in index order, and never part of an entry's events: the last entry's
// are all included even past limit (a CmdBatch holds at most MaxBatch),
// since the published watermark is an index.
func (f *FSM) EventsAfter(after uint64, limit int) []Event {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(f.outbox, after+1, func(e Event, idx uint64) int { return cmp.Compare(e.Index, idx) })
	j := min(len(f.outbox), i+max(limit, 0))
	for j > i && j < len(f.outbox) && f.outbox[j].Index == f.outbox[j-1].Index {
		j++
	}
	return slices.Clone(f.outbox[i:j])
}

// Outbox reports the replicated published watermark, the number of events
// held, and how many of them lie above after.
func (f *FSM) Outbox(after uint64) (published uint64, held, pending int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(f.outbox, after+1, func(e Event, idx uint64) int { return cmp.Compare(e.Index, idx) })
	return f.published, len(f.outbox), len(f.outbox) - i
}

// Task returns the task with the id from the applied state.
func (f *FSM) Task(id string) (Task, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	it, ok := f.tasks.get(id)
	if !ok {
		return Task{}, false
	}
	return f.tasks.task(it), true
}

// NumTasks is the number of tasks in the applied state.
func (f *FSM) NumTasks() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.tasks.len()
}

// Tasks returns up to limit tasks with ids greater than after, in id order,
// and whether more follow.
func (f *FSM) Tasks(after string, limit int) ([]Task, bool) {
	return f.TasksWithPrefix("", after, limit)
}

// TasksWithPrefix returns up to limit tasks whose ids start with prefix
// and are greater than after, in id order, and whether more follow.
func (f *FSM) TasksWithPrefix(prefix, after string, limit int) ([]Task, bool) {
	limit = max(limit, 0)
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Task, 0, min(limit, f.tasks.len()))
	more := false
	each := func(it taskItem) bool {
		t := f.tasks.task(it)
		if !strings.HasPrefix(t.ID, prefix) {
			return false // ids in order: none further has the prefix
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, t)
		return true
	}
	if after < prefix {
		f.tasks.ascendFrom(prefix, each)
	} else {
		f.tasks.ascendAfter(after, each)
	}
	return out, more
}

// LastRestore is when the last snapshot restore ended and how long it
// took (zero: none since the FSM was made).
func (f *FSM) LastRestore() (at time.Time, took time.Duration) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.restoredAt, f.restoreTook
}

// Placement returns the task's placement in the applied assignment.
func (f *FSM) Placement(id string) (Placement, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.assignment[id]
	return p, ok
}

// TaskMove is one kept generation's placement of a task; Placement is
// zero (Removed) when the generation removed the task's.
type TaskMove struct {
	Generation uint64
	AppliedAt  time.Time
	Placement  Placement
	Removed    bool
}

// TaskMoves returns the task's placements in the generations this replica
// still keeps (its recent history), oldest first.
func (f *FSM) TaskMoves(id string) []TaskMove {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []TaskMove
	for _, g := range f.hist.gens {
		for _, p := range g.Set {
			if p.Task == id {
				out = append(out, TaskMove{Generation: g.Generation, AppliedAt: g.AppliedAt, Placement: p})
			}
		}
		if slices.Contains(g.Removed, id) {
			out = append(out, TaskMove{Generation: g.Generation, AppliedAt: g.AppliedAt, Removed: true})
		}
	}
	return out
}

// DedupLen is the number of remembered request ids.
func (f *FSM) DedupLen() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.dedup.len()
}

// Snapshot format. The header is a magic string and a version; a node restores
// every version up to its own, so a snapshot written by the previous release
// always loads.
const (
	snapshotMagic   = "XCESNAP\n"
	snapshotVersion = 11
)

// ErrBadSnapshot is returned for a snapshot that is not ours, is newer than
// this binary, or does not decode.
var ErrBadSnapshot = errors.New("bad snapshot")

// snapshotV1 is the first release's body: tasks and the dedup table.
type snapshotV1 struct {
	ClusterID    string        `json:"cluster_id"`
	AppliedIndex uint64        `json:"applied_index"`
	Tasks        []Task        `json:"tasks"`
	Dedup        []dedupRecord `json:"dedup"`
	DedupWindow  uint64        `json:"dedup_window"`
	DedupMax     int           `json:"dedup_max"`
}

// snapshotV2 adds the outbox and its published watermark.
type snapshotV2 struct {
	snapshotV1
	Outbox    []Event `json:"outbox"`
	Published uint64  `json:"published"`
}

// snapshotV3 adds the task assignment.
type snapshotV3 struct {
	snapshotV2
	AssignmentGeneration uint64      `json:"assignment_generation"`
	Assignment           []Placement `json:"assignment"`
}

// snapshotV4 adds the member table.
type snapshotV4 struct {
	snapshotV3
	Members []MemberRecord `json:"members"`
}

// snapshotV5 adds the task epochs. Placements in its assignment leave
// their epoch out: Epochs is the one place a snapshot keeps them. Version
// 6 has the same body; it changed only how tasks and request ids are
// written.
type snapshotV5 struct {
	snapshotV4
	Epochs []taskEpoch `json:"epochs"`
}

// snapshotV7 adds the drained workers.
type snapshotV7 struct {
	snapshotV5
	Drained []string `json:"drained"`
}

// snapshotV8 adds whether the placement is frozen; its task records (in
// the binary part) carry weights.
type snapshotV8 struct {
	snapshotV7
	PlacementFrozen bool `json:"placement_frozen"`
}

// snapshotV9 adds the workers' client addresses.
type snapshotV9 struct {
	snapshotV8
	WorkerAddrs map[string]string `json:"worker_addrs"`
}

// snapshotBody is the body of snapshotVersion, the version this release
// writes.
type snapshotBody = snapshotV9

// taskEpoch is one task's epoch in a snapshot.
type taskEpoch struct {
	Task  string `json:"task"`
	Epoch uint64 `json:"epoch"`
}

// Snapshot holds the state as of one index: the tasks are a
// copy-on-write view of the registry, the rest is copied. Release it once
// written.
type Snapshot struct {
	s      snapshotBody
	tasks  *registryView
	dedup  queueView[dedupEntry]
	writes uint64
	// version is the format Write writes: snapshotVersion but in tests.
	version uint32
}

// Writes is FSM.Writes when the snapshot was taken.
func (s *Snapshot) Writes() uint64 { return s.writes }

// Release lets the registry reuse what the snapshot kept alive. A
// snapshot never released costs memory, not correctness.
func (s *Snapshot) Release() { s.tasks.release() }

// Snapshot copies the state under the lock (taking a view of the
// registry changes it: what the view holds must then be copied before it
// changes); the copy is written out by Write without holding it.
func (f *FSM) Snapshot() *Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := snapshotBody{snapshotV8: snapshotV8{snapshotV7: snapshotV7{snapshotV5: snapshotV5{snapshotV4: snapshotV4{snapshotV3: snapshotV3{snapshotV2: snapshotV2{snapshotV1: snapshotV1{
		ClusterID:    f.clusterID,
		AppliedIndex: f.applied.Load(),
		DedupWindow:  f.window,
		DedupMax:     f.maxEntries,
	}, Outbox: slices.Clone(f.outbox), Published: f.published},
		AssignmentGeneration: f.assignGen,
		Assignment:           make([]Placement, 0, len(f.assignment)),
	}, Members: make([]MemberRecord, 0, len(f.members))},
		Epochs: make([]taskEpoch, 0, len(f.epochs)),
	}, Drained: slices.AppendSeq(make([]string, 0, len(f.drained)), maps.Keys(f.drained))}, PlacementFrozen: f.frozen},
		WorkerAddrs: maps.Clone(f.workerAddrs)}
	for id, e := range f.epochs {
		s.Epochs = append(s.Epochs, taskEpoch{Task: id, Epoch: e})
	}
	for _, m := range f.members {
		s.Members = append(s.Members, m)
	}
	// A clone of the registry, not a copy: copying a large registry while
	// Apply waits, and the garbage collection that much allocation
	// forces, held a node long enough for its peers to miss heartbeats.
	tasks := f.tasks.view()
	for _, p := range f.assignment {
		p.Epoch = 0 // kept in Epochs
		s.Assignment = append(s.Assignment, p)
	}
	// Sorting (for a deterministic file) happens in Write, off the lock
	// that Apply waits for.
	return &Snapshot{s: s, tasks: tasks, dedup: f.order.view(), writes: f.writes.Load()}
}

// Write writes the snapshot to w in the current format. A caller that
// gets an error discards what was written.
func (s *Snapshot) Write(w io.Writer) error {
	slices.SortFunc(s.s.Assignment, func(a, b Placement) int { return strings.Compare(a.Task, b.Task) })
	slices.SortFunc(s.s.Members, func(a, b MemberRecord) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(s.s.Epochs, func(a, b taskEpoch) int { return strings.Compare(a.Task, b.Task) })
	slices.Sort(s.s.Drained)
	bw := bufio.NewWriterSize(w, 1<<20)
	version := s.version
	if version == 0 {
		version = snapshotVersion
	}
	if err := writeSnapshot(bw, &s.s, s.tasks, s.dedup, version); err != nil {
		return err
	}
	return bw.Flush()
}

// writeSnapshot writes the header, the tasks and the dedup table in
// binary, then the rest of s as JSON, with both lists empty, in the layout
// of version (snapshotVersion, or in tests 9, whose body is the same).
func writeSnapshot(w io.Writer, s *snapshotBody, tasks *registryView, dedup queueView[dedupEntry], version uint32) error {
	var hdr [len(snapshotMagic) + 4]byte
	copy(hdr[:], snapshotMagic)
	binary.BigEndian.PutUint32(hdr[len(snapshotMagic):], version)
	if version >= snapshotMapped {
		// The task parts align their items to the snapshot's start.
		w = &countWriter{w: w}
	}
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if version >= snapshotParts {
		// The request ids first: a restore decodes them while it reads
		// the tasks.
		if err := writeDedup(w, dedup, version); err != nil {
			return err
		}
		if err := writeTasks(w, tasks, version); err != nil {
			return err
		}
		return writeBody(w, s, nil)
	}
	if err := writeTasks(w, tasks, version); err != nil {
		return err
	}
	if err := writeDedup(w, dedup, version); err != nil {
		return err
	}
	return writeBody(w, s, nil)
}

// writeBody writes the same JSON document json.Marshal(s) would, but
// element by element: marshalling a large registry in one piece held the
// whole document in memory and the GC it caused stalled the node long
// enough for its peers to miss heartbeats.
func writeBody(w io.Writer, s *snapshotBody, tasks []*Task) error {
	ew := &errWriter{w: w}
	enc := json.NewEncoder(ew)
	field := func(name string, v any, first bool) {
		if !first {
			ew.write(",")
		}
		ew.write(`"` + name + `":`)
		if ew.err == nil {
			ew.err = enc.Encode(v)
		}
	}
	ew.write("{")
	field("cluster_id", s.ClusterID, true)
	field("applied_index", s.AppliedIndex, false)
	ew.write(`,"tasks":[`)
	for i, t := range tasks {
		if i > 0 {
			ew.write(",")
		}
		if ew.err == nil {
			ew.err = enc.Encode(t)
		}
	}
	ew.write(`],"dedup":[`)
	for i := range s.Dedup {
		if i > 0 {
			ew.write(",")
		}
		if ew.err == nil {
			ew.err = enc.Encode(&s.Dedup[i])
		}
	}
	ew.write("]")
	field("dedup_window", s.DedupWindow, false)
	field("dedup_max", s.DedupMax, false)
	ew.write(`,"outbox":[`)
	for i := range s.Outbox {
		if i > 0 {
			ew.write(",")
		}
		if ew.err == nil {
			ew.err = enc.Encode(&s.Outbox[i])
		}
	}
	ew.write("]")
	field("published", s.Published, false)
	field("assignment_generation", s.AssignmentGeneration, false)
	ew.write(`,"assignment":[`)
	for i := range s.Assignment {
		if i > 0 {
			ew.write(",")
		}
		if ew.err == nil {
			ew.err = enc.Encode(&s.Assignment[i])
		}
	}
	ew.write(`],"members":[`)
	for i := range s.Members {
		if i > 0 {
			ew.write(",")
		}
		if ew.err == nil {
			ew.err = enc.Encode(&s.Members[i])
		}
	}
	ew.write(`],"epochs":[`)
	for i := range s.Epochs {
		if i > 0 {
			ew.write(",")
		}
		if ew.err == nil {
			ew.err = enc.Encode(&s.Epochs[i])
		}
	}
	ew.write("]")
	field("drained", s.Drained, false)
	field("placement_frozen", s.PlacementFrozen, false)
	field("worker_addrs", s.WorkerAddrs, false)
	ew.write("}\n")
	return ew.err
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) write(s string) { _, _ = e.Write([]byte(s)) }

// readSnapshot reads a snapshot of any version this binary reads: its
// tasks as a registry, its request ids as a table, the rest as the newest
// body (what a version lacks is left empty), and its version.
func readSnapshot(rd io.Reader) (*snapshotBody, *registry, *dedupTable, uint32, error) {
	src := newSnapshotSource(rd)
	r := bufio.NewReaderSize(src, snapshotBuffer)
	var hdr [len(snapshotMagic) + 4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%w: header: %v", ErrBadSnapshot, err)
	}
	if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return nil, nil, nil, 0, fmt.Errorf("%w: not an xce snapshot", ErrBadSnapshot)
	}
	v := binary.BigEndian.Uint32(hdr[len(snapshotMagic):])
	var s snapshotBody
	var body any
	switch v {
	case 1:
		body = &s.snapshotV1
	case 2:
		body = &s.snapshotV2
	case 3:
		body = &s.snapshotV3
	case 4:
		body = &s.snapshotV4
	case 5, 6:
		body = &s.snapshotV5
	case 7:
		body = &s.snapshotV7
	case 8:
		body = &s.snapshotV8
	case 9, 10, 11:
		body = &s
	default:
		return nil, nil, nil, 0, fmt.Errorf("%w: version %d is newer than this binary reads (%d)", ErrBadSnapshot, v, snapshotVersion)
	}
	var tasks *registry
	var dedup *dedupTable
	if v >= snapshotMapped {
		src.useMapping()
	}
	if v >= snapshotParts {
		d := readDedupParts(r, src, v)
		terr := d.readErr
		switch {
		case terr != nil:
		case v >= snapshotMapped:
			tasks, terr = readMappedParts(r, src)
		default:
			tasks, terr = readTasks(r, v)
		}
		var derr error
		dedup, derr = d.wait()
		// The table was decoded from the mapping's bytes, if any.
		runtime.KeepAlive(src)
		switch {
		case derr != nil:
			return nil, nil, nil, 0, fmt.Errorf("%w: version %d request ids: %v", ErrBadSnapshot, v, derr)
		case terr != nil:
			return nil, nil, nil, 0, fmt.Errorf("%w: version %d tasks: %v", ErrBadSnapshot, v, terr)
		}
		return readBody(r, &s, body, tasks, dedup, v)
	}
	if v >= 6 {
		var err error
		if tasks, err = readTasks(r, v); err != nil {
			return nil, nil, nil, 0, fmt.Errorf("%w: version %d tasks: %v", ErrBadSnapshot, v, err)
		}
		if dedup, err = readDedup(r, v); err != nil {
			return nil, nil, nil, 0, fmt.Errorf("%w: version %d request ids: %v", ErrBadSnapshot, v, err)
		}
	}
	return readBody(r, &s, body, tasks, dedup, v)
}

// readBody reads the JSON body of a snapshot of version v into body (a
// part of s) and returns what readSnapshot does.
func readBody(r *bufio.Reader, s *snapshotBody, body any, tasks *registry, dedup *dedupTable, v uint32) (*snapshotBody, *registry, *dedupTable, uint32, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(body); err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%w: version %d body: %v", ErrBadSnapshot, v, err)
	}
	if v >= 6 {
		if len(s.Tasks) > 0 || len(s.Dedup) > 0 {
			return nil, nil, nil, 0, fmt.Errorf("%w: version %d lists tasks or request ids in its body", ErrBadSnapshot, v)
		}
		return s, tasks, dedup, v, nil
	}
	tasks, err := registryOf(s.Tasks)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%w: version %d: %v", ErrBadSnapshot, v, err)
	}
	dedup = newDedupTable(uint64(len(s.Dedup)))
	for _, e := range s.Dedup {
		if err := dedup.add(entryOf(e.Client, e.Request, e.Result)); err != nil {
			return nil, nil, nil, 0, fmt.Errorf("%w: version %d: %v", ErrBadSnapshot, v, err)
		}
	}
	s.Tasks, s.Dedup = nil, nil
	return s, tasks, dedup, v, nil
}

// Restore replaces the state with the snapshot read from r. A snapshot of
// another cluster is refused, and a failed Restore changes nothing.
func (f *FSM) Restore(r io.Reader) error {
	start := time.Now()
	s, tasks, dedup, version, err := readSnapshot(r)
	if err != nil {
		return err
	}
	if s.ClusterID != f.clusterID {
		return fmt.Errorf("%w: snapshot of cluster %q, this node is in cluster %q", ErrBadSnapshot, s.ClusterID, f.clusterID)
	}
	assignment := make(map[string]Placement, len(s.Assignment))
	for _, p := range s.Assignment {
		assignment[p.Task] = p
	}
	epochs, err := restoreEpochs(version, s, tasks, assignment)
	if err != nil {
		return err
	}
	members := make(map[string]MemberRecord, len(s.Members))
	for _, m := range s.Members {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadSnapshot, err)
		}
		if _, dup := members[m.ID]; dup {
			return fmt.Errorf("%w: member %s listed twice", ErrBadSnapshot, m.ID)
		}
		members[m.ID] = m
	}
	drained, err := restoreDrained(s.Drained)
	if err != nil {
		return err
	}
	workerAddrs, err := restoreWorkerAddrs(s.WorkerAddrs)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restoredAt, f.restoreTook = time.Now(), time.Since(start)
	f.tasks, f.dedup, f.order = tasks, dedup.index, dedup.order
	f.taskVer++
	f.outbox, f.published = s.Outbox, s.Published
	f.assignGen, f.assignment, f.epochs = s.AssignmentGeneration, assignment, epochs
	f.assignVer++
	f.hist.reset()
	f.members = members
	f.drained = drained
	f.drainVer++
	f.frozen = s.PlacementFrozen
	f.workerAddrs = workerAddrs
	f.workerAddrVer++
	if s.DedupWindow > 0 {
		f.window = s.DedupWindow
	}
	if s.DedupMax > 0 {
		f.maxEntries = s.DedupMax
	}
	f.applied.Store(s.AppliedIndex)
	f.taskHist.reset(s.AppliedIndex)
	f.signalApplied()
	return nil
}

// restoreEpochs returns the task epochs of a snapshot and sets each
// placement's epoch from them; every placement must be of a task that
// exists. Version 5 lists the epochs; they must name existing tasks, once
// each, with an epoch above zero, and cover every placement with an active
// worker. Older versions predate epochs: a task
// with an active worker restores with epoch 1, any other with 0 (its
// history is not in the snapshot; docs/design.md, "Tasks, workers,
// assignments").
func restoreEpochs(version uint32, s *snapshotBody, tasks *registry, assignment map[string]Placement) (map[string]uint64, error) {
	epochs := make(map[string]uint64, len(s.Epochs))
	if version < 5 {
		for id, p := range assignment {
			if p.Active != "" {
				epochs[id] = 1
			}
		}
	}
	for _, e := range s.Epochs {
		switch _, exists := tasks.get(e.Task); {
		case !exists:
			return nil, fmt.Errorf("%w: epoch of task %q, which does not exist", ErrBadSnapshot, e.Task)
		case e.Epoch == 0:
			return nil, fmt.Errorf("%w: epoch 0 listed for task %q", ErrBadSnapshot, e.Task)
		}
		if _, dup := epochs[e.Task]; dup {
			return nil, fmt.Errorf("%w: epoch of task %q listed twice", ErrBadSnapshot, e.Task)
		}
		epochs[e.Task] = e.Epoch
	}
	for id, p := range assignment {
		if _, exists := tasks.get(id); !exists {
			return nil, fmt.Errorf("%w: placement of task %q, which does not exist", ErrBadSnapshot, id)
		}
		if p.Epoch != 0 {
			return nil, fmt.Errorf("%w: placement of task %q carries an epoch (epochs are listed apart)", ErrBadSnapshot, id)
		}
		if p.Active != "" && epochs[id] == 0 {
			return nil, fmt.Errorf("%w: task %q has an active worker and no epoch", ErrBadSnapshot, id)
		}
		p.Epoch = epochs[id]
		assignment[id] = p
	}
	return epochs, nil
}
