// Package autopilot decides when a Raft cluster promotes a non-voter and
// removes a dead voter, as Consul's autopilot does with its server
// stabilization (docs/design.md, "Membership"). It is pure: the caller
// passes the servers as the leader sees them and the time, and carries out
// the action it is given.
package autopilot

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xce/xce/internal/fielderr"
)

// Config tunes the decisions. The config file's autopilot section
// defaults to DefaultConfig.
type Config struct {
	// StabilizationTime is how long a non-voter must stay healthy before
	// it is promoted: a node that restarts in a loop, or whose link
	// flaps, never becomes a voter.
	StabilizationTime time.Duration
	// MaxLag is how many log entries a server may be behind the leader
	// and still be healthy.
	MaxLag uint64
	// LastContactThreshold is how long ago the leader may last have heard
	// from a server that is healthy.
	LastContactThreshold time.Duration
	// CleanupDeadServers lets autopilot remove a voter that has been
	// unhealthy for DeadServerTimeout, once a stabilized non-voter is
	// ready to take its place.
	CleanupDeadServers bool
	// DeadServerTimeout is how long a voter must be unhealthy before
	// CleanupDeadServers removes it; at least LastContactThreshold.
	DeadServerTimeout time.Duration
}

// DefaultConfig returns the defaults:
//   - StabilizationTime 10 s, as Consul: long enough to see a node stay up
//     through several of its own restarts' worth of heartbeats, short
//     enough that a replacement votes soon after it caught up.
//   - MaxLag 1024 entries: a follower this close catches up within one
//     AppendEntries round of the leader's batches; one further behind is
//     still copying the log or a snapshot.
//   - LastContactThreshold 2 s: ten of raft's default heartbeat timeouts,
//     so one lost heartbeat or a GC pause does not count as unhealthy.
//   - CleanupDeadServers off: removing a voter shrinks what the cluster
//     survives, so an operator opts in.
//   - DeadServerTimeout 30 s: longer than a node takes to restart (an
//     upgrade restarts every node in turn), three stabilization times.
func DefaultConfig() Config {
	return Config{
		StabilizationTime:    10 * time.Second,
		MaxLag:               1024,
		LastContactThreshold: 2 * time.Second,
		CleanupDeadServers:   false,
		DeadServerTimeout:    30 * time.Second,
	}
}

// Bounds of Config.
const (
	maxDuration = 24 * time.Hour
	maxMaxLag   = 1 << 40
)

// Validate reports every invalid setting as a fielderr.List, each named
// by its field.
func (c Config) Validate() error {
	var l fielderr.List
	if c.StabilizationTime < 0 || c.StabilizationTime > maxDuration {
		l.Add("StabilizationTime", "must be between 0s and %s (got %s)", maxDuration, c.StabilizationTime)
	}
	if c.MaxLag < 1 || c.MaxLag > maxMaxLag {
		l.Add("MaxLag", "must be between 1 and %d (got %d)", uint64(maxMaxLag), c.MaxLag)
	}
	lct := c.LastContactThreshold
	if lct <= 0 || lct > maxDuration {
		l.Add("LastContactThreshold", "must be between 1ns and %s (got %s)", maxDuration, lct)
	}
	switch d := c.DeadServerTimeout; {
	case d <= 0 || d > maxDuration:
		l.Add("DeadServerTimeout", "must be between 1ns and %s (got %s)", maxDuration, d)
	case d < lct:
		l.Add("DeadServerTimeout", "must not be less than {LastContactThreshold} (%s < %s)", d, lct)
	}
	return l.Err()
}

// Server is one member as the leader sees it.
type Server struct {
	ID     string
	Voter  bool
	Leader bool
	// LastContact is how long ago the leader last heard from it; negative
	// when unknown.
	LastContact time.Duration
	// Lag is how many entries it is behind the leader's last index.
	Lag uint64
}

// Healthy: the leader, or a server heard from within LastContactThreshold
// and at most MaxLag entries behind.
func (c Config) Healthy(s Server) bool {
	return s.Leader || s.LastContact >= 0 && s.LastContact <= c.LastContactThreshold && s.Lag <= c.MaxLag
}

// States of a server.
const (
	// StateVoter: a voter, healthy or not.
	StateVoter = "voter"
	// StateCatchingUp: a non-voter that is not healthy (behind, or not
	// heard from).
	StateCatchingUp = "catching_up"
	// StateStabilizing: a healthy non-voter, healthy for less than
	// StabilizationTime.
	StateStabilizing = "stabilizing"
	// StateNonvoter: a stabilized non-voter waiting for its turn (a
	// configuration change is pending, or this step acts on another).
	StateNonvoter = "nonvoter"
	// StatePromoting: the non-voter this step's action promotes.
	StatePromoting = "promoting"
)

// ServerState is what autopilot makes of one server at one step.
type ServerState struct {
	ID      string
	Voter   bool
	Leader  bool
	Healthy bool
	State   string
	// HealthySince is when it became healthy (zero when not healthy);
	// UnhealthySince when it stopped being so (zero when healthy). Both
	// count from the first step that saw the server.
	HealthySince, UnhealthySince time.Time
}

// Kinds of Action.
type Kind int

const (
	Promote Kind = iota + 1
	Remove
)

func (k Kind) String() string {
	switch k {
	case Promote:
		return "promote"
	case Remove:
		return "remove"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Action is one membership change to make.
type Action struct {
	Kind   Kind
	ID     string
	Reason string
}

// Decision is a step's outcome: each server's state, by ID, and at most
// one action.
type Decision struct {
	States []ServerState
	Action *Action
}

// Autopilot remembers, per server, since when it has been healthy or
// unhealthy; nothing else.
type Autopilot struct {
	cfg   Config
	since map[string]health
}

type health struct {
	healthy bool
	since   time.Time
}

// New returns an Autopilot with cfg (Validate it first).
func New(cfg Config) *Autopilot {
	return &Autopilot{cfg: cfg, since: map[string]health{}}
}

// Forget drops what a knows of id, so that a server removed and added
// again under the same id between two steps starts its stabilization
// afresh.
func (a *Autopilot) Forget(id string) { delete(a.since, id) }

// Step takes the servers of the latest configuration as the leader sees
// them, whether that configuration is still pending, and the time, and
// decides. Rules:
//   - at most one action, and none while a configuration is pending: raft
//     applies one change at a time and each decision needs the last one's
//     outcome;
//   - promote the non-voter healthy for the longest, once that is at least
//     StabilizationTime;
//   - with CleanupDeadServers, remove a voter unhealthy for at least
//     DeadServerTimeout, never the leader, only while a stabilized
//     non-voter is ready to take its place, and only if the remaining
//     voters still have a healthy quorum. Removal goes before the
//     promotion: the replacement is promoted at the next step. The order
//     keeps the rule free of memory (once promoted, the replacement is no
//     longer visible as one) and the cluster never grows past its size,
//     while each step keeps a healthy quorum as promoting first would.
//
// Non-voters are never removed: one still copying a large snapshot looks
// unhealthy for as long as the copy takes.
func (a *Autopilot) Step(servers []Server, pending bool, now time.Time) Decision {
	seen := make(map[string]bool, len(servers))
	for _, s := range servers {
		seen[s.ID] = true
		h := a.cfg.Healthy(s)
		if old, ok := a.since[s.ID]; !ok || old.healthy != h {
			a.since[s.ID] = health{healthy: h, since: now}
		}
	}
	for id := range a.since {
		if !seen[id] {
			delete(a.since, id)
		}
	}

	states := make([]ServerState, 0, len(servers))
	var ready []ServerState // stabilized non-voters
	voters, healthyVoters := 0, 0
	for _, s := range servers {
		h := a.since[s.ID]
		st := ServerState{ID: s.ID, Voter: s.Voter, Leader: s.Leader, Healthy: h.healthy}
		if h.healthy {
			st.HealthySince = h.since
		} else {
			st.UnhealthySince = h.since
		}
		switch {
		case s.Voter:
			st.State = StateVoter
			voters++
			if h.healthy {
				healthyVoters++
			}
		case !h.healthy:
			st.State = StateCatchingUp
		case now.Sub(h.since) < a.cfg.StabilizationTime:
			st.State = StateStabilizing
		default:
			st.State = StateNonvoter
			ready = append(ready, st)
		}
		states = append(states, st)
	}
	slices.SortFunc(states, func(x, y ServerState) int { return strings.Compare(x.ID, y.ID) })
	slices.SortFunc(ready, func(x, y ServerState) int {
		if c := x.HealthySince.Compare(y.HealthySince); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	d := Decision{States: states}
	if pending || len(ready) == 0 {
		return d
	}
	if a.cfg.CleanupDeadServers {
		// Healthy voters stay as they are when an unhealthy one goes.
		quorum := (voters-1)/2 + 1
		var dead []ServerState
		for _, st := range states {
			if st.Voter && !st.Healthy && !st.Leader && now.Sub(st.UnhealthySince) >= a.cfg.DeadServerTimeout {
				dead = append(dead, st)
			}
		}
		slices.SortFunc(dead, func(x, y ServerState) int {
			if c := x.UnhealthySince.Compare(y.UnhealthySince); c != 0 {
				return c
			}
			return strings.Compare(x.ID, y.ID)
		})
		if len(dead) > 0 && healthyVoters >= quorum {
			v := dead[0]
			d.Action = &Action{Kind: Remove, ID: v.ID, Reason: fmt.Sprintf(
				"voter unhealthy since %s (at least %s); %s is ready to replace it and %d of the %d remaining voters are healthy",
				v.UnhealthySince.Format(time.RFC3339), a.cfg.DeadServerTimeout, ready[0].ID, healthyVoters, voters-1)}
			return d
		}
	}
	p := ready[0]
	d.Action = &Action{Kind: Promote, ID: p.ID, Reason: fmt.Sprintf(
		"healthy since %s, at least the stabilization time %s", p.HealthySince.Format(time.RFC3339), a.cfg.StabilizationTime)}
	for i := range d.States {
		if d.States[i].ID == p.ID {
			d.States[i].State = StatePromoting
		}
	}
	return d
}
