package placement

import (
	"time"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/internal/fielderr"
)

// Config tunes the Service.
type Config struct {
	Assign assign.Config
	// SessionTimeout: a worker that sends nothing for this long is gone.
	SessionTimeout time.Duration
	// HeartbeatInterval is what workers are told to use.
	HeartbeatInterval time.Duration
	// GrantMargin separates a worker's active lease from its session: a
	// worker runs its actives at most SessionTimeout − GrantMargin after
	// sending its last acknowledged heartbeat, and a task it held is granted
	// elsewhere no sooner than SessionTimeout + GrantMargin after the
	// primary last heard from it (docs/design.md, "At most one active").
	// Zero means SessionTimeout/5.
	GrantMargin time.Duration
	// Settle is how long a new primary waits for workers before it plans;
	// zero means SessionTimeout. A cluster without any assignment yet has
	// nothing to preserve and plans at once.
	Settle time.Duration
	// Tick is the loop's period for session expiry and task-set checks;
	// it also spaces plans apart (zero means 100ms).
	Tick time.Duration
	// TaskReplan is the most that plans caused only by task-set changes are
	// spaced apart (zero means 1s): planning costs O(tasks), and a submit
	// storm must not make the primary re-plan every tick. Within it the
	// spacing follows the last plan's cost (taskReplanAfter), so that a
	// small registry places new tasks within a tick or two.
	TaskReplan time.Duration
	// MaxHold is the longest the primary holds a heartbeat whose answer
	// would not change, so that the worker learns of a change within a
	// round trip of it (docs/design.md, "Draining and leaving"). Zero
	// means HeartbeatInterval, at most MaxHoldLimit; negative: heartbeats
	// are answered at once.
	MaxHold time.Duration
	// ReplaceDelay is how long a worker whose session expired stays away
	// (assign.Worker.Away) before its copies are replaced; 0: at once. A
	// worker that leaves gracefully (its actives handed over: a planned
	// restart) is away too.
	ReplaceDelay time.Duration
}

// MaxReplaceDelay bounds ReplaceDelay: an away worker's standbys count
// for its tasks, and a worker that has not come back in a day is gone.
const MaxReplaceDelay = 24 * time.Hour

// MaxHoldLimit bounds MaxHold's default: a held heartbeat must be answered
// well within the client port's write timeout.
const MaxHoldLimit = 5 * time.Second

// Bounds of the worker session timings.
const (
	MinSessionTimeout    = 500 * time.Millisecond
	MaxSessionTimeout    = time.Hour
	MinHeartbeatInterval = 50 * time.Millisecond
)

// DefaultConfig returns the defaults of every setting; the config file's
// assignor section defaults to these.
func DefaultConfig() Config {
	return Config{
		Assign:            assign.DefaultConfig(),
		SessionTimeout:    10 * time.Second,
		HeartbeatInterval: time.Second,
		Tick:              100 * time.Millisecond,
		TaskReplan:        time.Second,
		MaxHold:           time.Second,
	}
}

// withDefaults returns c with the defaults of Settle, Tick and TaskReplan
// in place of those left zero.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Settle == 0 {
		c.Settle = c.SessionTimeout
	}
	c.GrantMargin = c.margin()
	if c.Tick <= 0 {
		c.Tick = d.Tick
	}
	if c.TaskReplan <= 0 {
		c.TaskReplan = d.TaskReplan
	}
	if c.MaxHold == 0 {
		c.MaxHold = min(c.HeartbeatInterval, MaxHoldLimit)
	}
	return c
}

// margin is GrantMargin, or its default when zero.
func (c Config) margin() time.Duration {
	if c.GrantMargin == 0 {
		return c.SessionTimeout / 5
	}
	return c.GrantMargin
}

// ActiveLease is how long a worker may run its actives after sending its
// last acknowledged heartbeat: SessionTimeout − GrantMargin.
func (c Config) ActiveLease() time.Duration { return c.SessionTimeout - c.margin() }

// Validate reports every invalid setting as a fielderr.List, each named
// by its field; the assignor's own settings (Assign, checked by
// assign.Config.Validate) are named under Assign.
func (c Config) Validate() error {
	var l fielderr.List
	l.AddUnder("Assign", c.Assign.Validate())
	if c.ReplaceDelay < 0 || c.ReplaceDelay > MaxReplaceDelay {
		l.Add("ReplaceDelay", "must be between 0s and %s (got %s)", MaxReplaceDelay, c.ReplaceDelay)
	}
	st, hb := c.SessionTimeout, c.HeartbeatInterval
	switch {
	case st < MinSessionTimeout || st > MaxSessionTimeout:
		l.Add("SessionTimeout", "must be between %s and %s (got %s)", MinSessionTimeout, MaxSessionTimeout, st)
	case hb < MinHeartbeatInterval:
		l.Add("HeartbeatInterval", "must be at least %s (got %s)", MinHeartbeatInterval, hb)
	case hb*2 > st:
		l.Add("HeartbeatInterval", "must be at most half of {SessionTimeout} (%s > %s/2)", hb, st)
	case c.GrantMargin < 0:
		l.Add("GrantMargin", "must not be negative (got %s)", c.GrantMargin)
	case c.ActiveLease() <= hb:
		// A lease no longer than the heartbeat interval runs out between
		// two heartbeats of a healthy worker.
		l.Add("GrantMargin", "{SessionTimeout} − {GrantMargin} (the active lease, %s) must exceed {HeartbeatInterval} (%s)", c.ActiveLease(), hb)
	}
	return l.Err()
}

// planBudget is how much of the primary's time plans caused only by new or
// deleted tasks may take: after a plan that took d, the next such plan
// waits d/planBudget.
const planBudget = 0.1

// taskReplanAfter is how long after a plan that took took the next plan
// caused only by task-set changes is due: took/planBudget, at least a tick
// and at most TaskReplan. Smaller, more frequent generations reach the
// watchers of the assignment in smaller bursts.
func (c Config) taskReplanAfter(took time.Duration) time.Duration {
	return min(max(time.Duration(float64(took)/planBudget), c.Tick), c.TaskReplan)
}
