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
}

// DefaultConfig returns the settings of the reference design (Kafka Streams'
// defaults), so that callers only override what they mean to change.
func DefaultConfig() Config {
	return Config{
		AcceptableRecoveryLag:    DefaultAcceptableRecoveryLag,
		MaxWarmupReplicas:        DefaultMaxWarmupReplicas,
		NumStandbyReplicas:       DefaultNumStandbyReplicas,
		ProbingRebalanceInterval: DefaultProbingRebalanceInterval,
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
	return l.Err()
}
