package state

import (
	"maps"
	"slices"
	"time"
)

// Bounds of the assignment's history (watch.go), which lets a watcher that
// reconnects receive exactly the generations it missed. Older generations,
// or a history cleared by a snapshot restore, make it start again from a
// full copy.
const (
	// HistoryGenerations is the most generations the history keeps.
	HistoryGenerations = 4096
	// HistoryPlacements bounds the placements and removals it holds in
	// all; a single generation larger than that is not kept.
	HistoryPlacements = 200_000
)

// GenerationChange is what one assignment generation changed: the
// placements it set (each with its task's epoch) and the tasks that lost
// their placement (removed by the assignor, or deleted since the previous
// generation).
type GenerationChange struct {
	Generation uint64
	// Index is the log index of the entry that made the generation.
	Index   uint64
	Set     []Placement
	Removed []string
	// AppliedAt is when this node applied that entry, by its wall clock:
	// on the PRIMARY right after the commit, on a STANDBY once it learnt
	// of it, on any node replaying its log after a restart at the replay.
	// Not replicated and not in snapshots: each replica's own.
	AppliedAt time.Time
}

// history is the recent generations, oldest first, and the tasks deleted
// since the last one. Every replica builds the same one from the log it
// applies, from the point it last restored a snapshot.
type history struct {
	gens    []GenerationChange
	held    int
	deleted []string
	// lost: deletions overflowed the bound; the next generation starts
	// the history again.
	lost bool
	// changed is closed and replaced at each new generation and at each
	// restore.
	changed chan struct{}
	// now stamps each generation's AppliedAt (nil: time.Now).
	now func() time.Time
}

func (h *history) notify() {
	if h.changed != nil {
		close(h.changed)
	}
	h.changed = make(chan struct{})
}

// deletedTask notes a task deleted with a placement: the next generation
// lists it as removed.
func (h *history) deletedTask(id string) {
	if len(h.deleted) >= HistoryPlacements {
		h.lost = true
		return
	}
	h.deleted = append(h.deleted, id)
}

// add records a generation, stamped with the time it is applied, and
// drops the oldest ones beyond the bounds.
func (h *history) add(c GenerationChange) {
	if h.now != nil {
		c.AppliedAt = h.now()
	} else {
		c.AppliedAt = time.Now()
	}
	c.Removed = append(c.Removed, h.deleted...)
	h.deleted = nil
	if h.lost {
		h.gens, h.held, h.lost = nil, 0, false
	}
	n := len(c.Set) + len(c.Removed)
	if n > HistoryPlacements {
		h.gens, h.held = nil, 0
	} else {
		h.gens = append(h.gens, c)
		h.held += n
	}
	drop := 0
	for len(h.gens)-drop > HistoryGenerations || h.held > HistoryPlacements {
		h.held -= len(h.gens[drop].Set) + len(h.gens[drop].Removed)
		drop++
	}
	if drop > 0 {
		h.gens = slices.Delete(h.gens, 0, drop)
	}
	h.notify()
}

// reset forgets every generation (a snapshot replaced the state).
func (h *history) reset() {
	h.gens, h.held, h.deleted, h.lost = nil, 0, nil, false
	h.notify()
}

// since returns the generations after from, up to cur, and whether the
// history still has all of them.
func (h *history) since(from, cur uint64) ([]GenerationChange, bool) {
	if from == cur {
		return nil, true
	}
	if from > cur || len(h.gens) == 0 || h.gens[0].Generation > from+1 || h.gens[len(h.gens)-1].Generation != cur {
		return nil, false
	}
	i, _ := slices.BinarySearchFunc(h.gens, from+1, func(c GenerationChange, g uint64) int {
		switch {
		case c.Generation < g:
			return -1
		case c.Generation > g:
			return 1
		}
		return 0
	})
	return slices.Clone(h.gens[i:]), true
}

// AssignmentSince returns the generations after from, up to the current
// one, and a channel closed at the next change. ok is false when the
// history no longer has them all (or never had: from is ahead, or a
// snapshot was restored since): the caller then starts from a full copy
// (AssignmentWatch).
func (f *FSM) AssignmentSince(from uint64) (changes []GenerationChange, cur uint64, ok bool, changed <-chan struct{}) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	changes, ok = f.hist.since(from, f.assignGen)
	return changes, f.assignGen, ok, f.histChanged()
}

// AssignmentCopy returns the assignment's generation, the version of its
// map (see assignVer) and a copy of it, read at one instant.
func (f *FSM) AssignmentCopy() (gen, version uint64, a map[string]Placement) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.assignGen, f.assignVer, maps.Clone(f.assignment)
}

// AssignmentChanged is a channel closed at the next change of generation
// (or restore).
func (f *FSM) AssignmentChanged() <-chan struct{} {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.histChanged()
}

// DeletedSinceGeneration is how many tasks lost their placement by being
// deleted since the last generation: the assignor writes a generation for
// them, so that watchers learn of the deletions.
func (f *FSM) DeletedSinceGeneration() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.hist.deleted)
}

// histChanged returns the history's current change channel; callers hold
// f.mu (a read lock suffices: the channel is replaced under the write
// lock only).
func (f *FSM) histChanged() <-chan struct{} { return f.hist.changed }
