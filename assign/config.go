package assign

import (
	"time"

	"github.com/xce/xce/internal/fielderr"
)

// Defaults and limits of Config, exported so that config loaders and
// operators' docs quote the same numbers as the assignor.
const (
	DefaultAcceptableRecoveryLag    int64         = 10000
	DefaultMaxWarmupReplicas        int           = 2
	DefaultNumStandbyReplicas       int           = 0
	DefaultProbingRebalanceInterval time.Duration = 10 * time.Minute
	MinProbingRebalanceInterval     time.Duration = time.Minute
	// MaxStandbyReplicas bounds NumStandbyReplicas and a task's own
	// StandbyReplicas: each standby is a full copy of a task's state.
	MaxStandbyReplicas = 16
	// MaxWeight bounds Task.Weight, so that weighted sums never overflow.
	MaxWeight = 1 << 16
	// MaxSpreadKeys bounds Config.SpreadBy.
	MaxSpreadKeys = 8
	// DefaultLoadTolerance is the band, in percent of the ideal, within
	// which BalanceLoad leaves a worker's reported load alone.
	DefaultLoadTolerance = 10
	// DefaultMaxLoadMoves bounds the actives one BalanceLoad plan moves.
	DefaultMaxLoadMoves = 8
)

// Values of Config.Balance.
const (
	// BalanceWeight balances task weights over capacity (the default).
	BalanceWeight = "weight"
	// BalanceLoad balances the actives' reported load over capacity within
	// Config.LoadTolerance percent, at most Config.MaxLoadMoves active
	// moves per plan, caught-up standbys first.
	BalanceLoad = "load"
)

// Config holds the cluster settings the assignor depends on; they are log
// entries in the controller, so every node plans with the same values.
type Config struct {
	// AcceptableRecoveryLag is the largest lag at which a worker counts as
	// caught up on a task (lag <= this); it decides whether an active may move
	// to a worker at once or needs a warm-up first.
	AcceptableRecoveryLag int64
	// MaxWarmupReplicas bounds the warm-ups in the whole assignment, because
	// every warm-up restores state and costs the cluster I/O; at least 1 so
	// that an unbalanced cluster can always make progress.
	MaxWarmupReplicas int
	// NumStandbyReplicas is how many standbys each stateful task gets, so that
	// a caught-up copy can take over when the active's worker dies; a task
	// whose Task.StandbyReplicas is above 0 gets that many instead.
	NumStandbyReplicas int
	// ProbingRebalanceInterval is how long the caller waits before planning
	// again after a Result with Followup; Plan only validates it, since a
	// pure function does not schedule anything.
	ProbingRebalanceInterval time.Duration
	// SpreadBy lists label keys, most important first: for each in turn,
	// the copies of a stateful task (active and standbys) take distinct
	// values as far as the workers allow. Spread comes before balance.
	SpreadBy []string
	// MinCopies is the fewest copies (active included) of a stateful task
	// kept on live workers while an Away worker holds others: below it,
	// replacements are made at once. 0 or 1: only the active.
	MinCopies int
	// Balance is BalanceWeight ("" means it) or BalanceLoad.
	Balance string
	// LoadTolerance is BalanceLoad's band in percent of the ideal load
	// (0 means DefaultLoadTolerance).
	LoadTolerance int
	// MaxLoadMoves bounds BalanceLoad's active moves per plan (0 means
	// DefaultMaxLoadMoves).
	MaxLoadMoves int
}

// DefaultConfig returns the settings of the reference design (Kafka Streams'
// defaults), so that callers only override what they mean to change.
func DefaultConfig() Config {
	return Config{
		AcceptableRecoveryLag:    DefaultAcceptableRecoveryLag,
		MaxWarmupReplicas:        DefaultMaxWarmupReplicas,
		NumStandbyReplicas:       DefaultNumStandbyReplicas,
		ProbingRebalanceInterval: DefaultProbingRebalanceInterval,
		Balance:                  BalanceWeight,
		LoadTolerance:            DefaultLoadTolerance,
		MaxLoadMoves:             DefaultMaxLoadMoves,
	}
}

// Validate reports every invalid setting as a fielderr.List, each named
// by its field.
func (c Config) Validate() error {
	var l fielderr.List
	if c.AcceptableRecoveryLag < 0 {
		l.Add("AcceptableRecoveryLag", "must not be negative")
	}
	if c.MaxWarmupReplicas < 1 {
		l.Add("MaxWarmupReplicas", "must be at least 1")
	}
	if c.NumStandbyReplicas < 0 {
		l.Add("NumStandbyReplicas", "must not be negative")
	} else if c.NumStandbyReplicas > MaxStandbyReplicas {
		l.Add("NumStandbyReplicas", "must be at most %d", MaxStandbyReplicas)
	}
	if c.ProbingRebalanceInterval < MinProbingRebalanceInterval {
		l.Add("ProbingRebalanceInterval", "must be at least %v", MinProbingRebalanceInterval)
	}
	if len(c.SpreadBy) > MaxSpreadKeys {
		l.Add("SpreadBy", "must list at most %d keys", MaxSpreadKeys)
	}
	seen := make(map[string]bool, len(c.SpreadBy))
	for _, k := range c.SpreadBy {
		switch {
		case !ValidLabelKey(k):
			l.Add("SpreadBy", "%q is not a label key (letters, digits, '.', '-', '_', '/', at most %d bytes)", k, MaxLabelBytes)
		case seen[k]:
			l.Add("SpreadBy", "%q is listed twice", k)
		}
		seen[k] = true
	}
	if c.MinCopies < 0 || c.MinCopies > MaxStandbyReplicas+1 {
		l.Add("MinCopies", "must be between 0 and %d", MaxStandbyReplicas+1)
	}
	switch c.Balance {
	case "", BalanceWeight, BalanceLoad:
	default:
		l.Add("Balance", "must be %q or %q (got %q)", BalanceWeight, BalanceLoad, c.Balance)
	}
	if c.LoadTolerance < 0 || c.LoadTolerance > 100 {
		l.Add("LoadTolerance", "must be between 0 and 100 percent")
	}
	if c.MaxLoadMoves < 0 {
		l.Add("MaxLoadMoves", "must not be negative")
	}
	return l.Err()
}
