package state

import (
	"sort"
	"sync/atomic"
)

// HistoryTaskEvents bounds the task creations and deletions a replica
// keeps for watchers (WatchTasks): a watcher resuming from an older index
// is told to list the tasks again.
const HistoryTaskEvents = 100_000

// TaskEvent is one task created or deleted, at the log index of its
// command.
type TaskEvent struct {
	Index   uint64
	Deleted bool
	// Task is the task as created (its id alone for a deletion).
	Task Task
}

// taskEvent is a TaskEvent as the history keeps it: what a creation says
// of the task, without its state (a new task is always pending).
type taskEvent struct {
	index    uint64
	id       string
	standbys uint32
	weight   uint32
	deleted  bool
	stateful bool
}

func (e taskEvent) event() TaskEvent {
	out := TaskEvent{Index: e.index, Deleted: e.deleted, Task: Task{ID: e.id}}
	if !e.deleted {
		out.Task = Task{ID: e.id, Stateful: e.stateful, StandbyReplicas: e.standbys, Weight: e.weight,
			CreatedIndex: e.index, State: TaskStatePending, PendingReason: reasonUnassigned}
	}
	return out
}

// taskHistory is the recent task events, oldest first (in chunks, so
// that a growing history never copies what it holds), and the index up
// to which events have been dropped (or were never kept: before this
// replica's last snapshot restore).
type taskHistory struct {
	events    queue[taskEvent]
	compacted uint64
	changed   chan struct{}
	// handed: changed was given to a watcher since it was made, so the
	// next event must close it; writes pay for a new channel only then.
	handed atomic.Bool
}

func (h *taskHistory) notify() {
	if h.changed != nil && !h.handed.Swap(false) {
		return
	}
	if h.changed != nil {
		close(h.changed)
	}
	h.changed = make(chan struct{})
}

// created notes task t created at its CreatedIndex; deleted, task id
// deleted at index.
func (h *taskHistory) created(t Task) {
	h.add(taskEvent{index: t.CreatedIndex, id: t.ID, standbys: t.StandbyReplicas, weight: t.Weight, stateful: t.Stateful})
}

func (h *taskHistory) deleted(index uint64, id string) {
	h.add(taskEvent{index: index, id: id, deleted: true})
}

func (h *taskHistory) add(e taskEvent) {
	if h.events.len() >= HistoryTaskEvents {
		// Drop the oldest tenth at once; whole indexes only, so that a
		// batch entry's events stay together.
		for i := 0; h.events.len() > 0 && (i < HistoryTaskEvents/10 || h.events.front().index == h.compacted); i++ {
			h.compacted = h.events.pop().index
		}
	}
	h.events.push(e)
	h.notify()
}

// reset forgets every event: the state now comes from a snapshot taken at
// index, and what happened before it is not known here.
func (h *taskHistory) reset(index uint64) {
	h.events, h.compacted = queue[taskEvent]{}, index
	h.notify()
}

// TasksSince returns the task events after index from, in commit order,
// the applied index they run to, and a channel closed at the next event
// (or restore). ok is false when events after from are no longer kept:
// the caller lists the tasks again and watches from the index it listed
// at; compacted is then the oldest index it may resume from.
func (f *FSM) TasksSince(from uint64) (events []TaskEvent, applied uint64, ok bool, compacted uint64, changed <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h := &f.taskHist
	h.handed.Store(true)
	applied = f.applied.Load()
	if from < h.compacted {
		return nil, applied, false, h.compacted, h.changed
	}
	q := &h.events
	event := func(k int) *taskEvent { e, _ := q.at(q.first() + uint64(k)); return e }
	i := sort.Search(q.len(), func(k int) bool { return event(k).index > from })
	events = make([]TaskEvent, q.len()-i)
	for j := range events {
		events[j] = event(i + j).event()
	}
	return events, applied, true, h.compacted, h.changed
}
