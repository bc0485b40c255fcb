package worker

import (
	"maps"
	"math"
	"slices"
	"time"
)

// Role is how a worker holds its copy of a task.
type Role int

// Roles of a copy. A copy the worker no longer holds keeps its state (and
// its lag) for a while as Unheld, so that a task coming back finds it warm.
const (
	Unheld Role = iota
	Active
	Standby
	Warmup
)

func (r Role) String() string {
	switch r {
	case Active:
		return "active"
	case Standby:
		return "standby"
	case Warmup:
		return "warmup"
	}
	return "unheld"
}

// SimConfig tunes the state simulation. Rates are in records per second.
type SimConfig struct {
	// RestoreRate is how fast a held copy (active, standby or warm-up)
	// catches up: its lag falls at this rate toward 0 and stays there.
	RestoreRate float64
	// GrowthRate is how fast an unheld copy falls behind.
	GrowthRate float64
	// InitialLag is the lag of a copy assigned to a worker that has no
	// state for it.
	InitialLag int64
	// DropLag and DropAfter bound an unheld copy: its state is dropped once
	// its lag exceeds DropLag or it has been unheld for DropAfter,
	// whichever comes first. Then the worker reports no lag for the task.
	DropLag   int64
	DropAfter time.Duration
}

// Sim is the simulated state of one worker: per task, the lag of its copy.
// It is pure (time passes only through Advance) and not safe for
// concurrent use.
type Sim struct {
	cfg    SimConfig
	copies map[string]*copyState
}

type copyState struct {
	role   Role
	lag    float64
	unheld time.Duration // time since the copy was last held
}

// NewSim returns a worker with no state.
func NewSim(cfg SimConfig) *Sim {
	return &Sim{cfg: cfg, copies: map[string]*copyState{}}
}

// Assign sets the copies the worker holds. A task it has no state for
// starts at InitialLag; a task it held and no longer does becomes Unheld
// and keeps its state until the drop bound. A task in more than one list
// takes the first of active, standby, warm-up.
func (s *Sim) Assign(actives, standbys, warmups []string) {
	want := map[string]Role{}
	for _, l := range []struct {
		tasks []string
		role  Role
	}{{warmups, Warmup}, {standbys, Standby}, {actives, Active}} {
		for _, t := range l.tasks {
			want[t] = l.role
		}
	}
	for t := range s.copies {
		if _, ok := want[t]; !ok {
			s.Release(t)
		}
	}
	for t, r := range want {
		s.Hold(t, r)
	}
}

// Hold makes the worker hold a copy of task in role r (Active, Standby or
// Warmup): a task it has no state for starts at InitialLag, one it keeps
// state for goes on from its lag.
func (s *Sim) Hold(task string, r Role) {
	c, ok := s.copies[task]
	if !ok {
		c = &copyState{lag: float64(max(s.cfg.InitialLag, 0))}
		s.copies[task] = c
	}
	c.role, c.unheld = r, 0
}

// Release makes task Unheld: the worker keeps its state until the drop
// bound. A task it has no state for is left alone.
func (s *Sim) Release(task string) {
	if c, ok := s.copies[task]; ok && c.role != Unheld {
		c.role, c.unheld = Unheld, 0
	}
}

// Advance lets d pass: held copies catch up at RestoreRate, unheld ones
// fall behind at GrowthRate. It returns the tasks whose held copy reached
// lag 0 and the tasks whose unheld state was dropped, both sorted.
func (s *Sim) Advance(d time.Duration) (caughtUp, dropped []string) {
	if d <= 0 {
		return nil, nil
	}
	sec := d.Seconds()
	for t, c := range s.copies {
		if c.role != Unheld {
			if c.lag > 0 {
				c.lag = max(c.lag-s.cfg.RestoreRate*sec, 0)
				if c.lag == 0 {
					caughtUp = append(caughtUp, t)
				}
			}
			continue
		}
		c.lag += s.cfg.GrowthRate * sec
		c.unheld += d
		if c.lag > float64(s.cfg.DropLag) || c.unheld >= s.cfg.DropAfter {
			delete(s.copies, t)
			dropped = append(dropped, t)
		}
	}
	slices.Sort(caughtUp)
	slices.Sort(dropped)
	return caughtUp, dropped
}

// Lags returns the lag of every task the worker has state for, in whole
// records (rounded up: a copy is caught up only at 0). A task the worker
// never held, or whose state it dropped, has no entry.
func (s *Sim) Lags() map[string]int64 {
	out := make(map[string]int64, len(s.copies))
	for t, c := range s.copies {
		out[t] = int64(math.Ceil(c.lag))
	}
	return out
}

// Lag returns one task's lag and whether the worker has state for it.
func (s *Sim) Lag(task string) (int64, bool) {
	c, ok := s.copies[task]
	if !ok {
		return 0, false
	}
	return int64(math.Ceil(c.lag)), true
}

// Role returns how the worker holds task (Unheld also when it has no state).
func (s *Sim) Role(task string) Role {
	if c, ok := s.copies[task]; ok {
		return c.role
	}
	return Unheld
}

// Tasks returns the tasks the worker has state for, sorted.
func (s *Sim) Tasks() []string { return slices.Sorted(maps.Keys(s.copies)) }
