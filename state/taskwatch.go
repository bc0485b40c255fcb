package state

import (
	"slices"
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

// taskHistory is the recent task events, oldest first, and the index up
// to which events have been dropped (or were never kept: before this
// replica's last snapshot restore).
type taskHistory struct {
	events    []taskEvent
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
	if len(h.events) >= HistoryTaskEvents {
		// Drop the oldest tenth at once, so that a busy registry does
		// not shift the slice on every event; whole indexes only, so
		// that a batch entry's events stay together.
		drop := HistoryTaskEvents / 10
		for drop < len(h.events) && h.events[drop].index == h.events[drop-1].index {
			drop++
		}
		h.compacted = h.events[drop-1].index
		h.events = slices.Delete(h.events, 0, drop)
	}
	h.events = append(h.events, e)
	h.notify()
}

// reset forgets every event: the state now comes from a snapshot taken at
// index, and what happened before it is not known here.
func (h *taskHistory) reset(index uint64) {
	h.events, h.compacted = nil, index
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
	i, _ := slices.BinarySearchFunc(h.events, from+1, func(e taskEvent, idx uint64) int {
		switch {
		case e.index < idx:
			return -1
		case e.index > idx:
			return 1
		}
		return 0
	})
	events = make([]TaskEvent, len(h.events)-i)
	for j, e := range h.events[i:] {
		events[j] = e.event()
	}
	return events, applied, true, h.compacted, h.changed
}
