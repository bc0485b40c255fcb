package ha

import (
	"context"
	"errors"
	"time"
)

// Errors of an election backend.
var (
	// ErrNotLeader means this node does not hold the role.
	ErrNotLeader = errors.New("not the leader")
	// ErrShutdown means the backend has been shut down.
	ErrShutdown = errors.New("election backend is shut down")
	// ErrTimeout means the backend did not answer before the deadline.
	ErrTimeout = errors.New("raft timed out")
	// ErrNothingToSnapshot means no entry was applied since the node
	// started: there is no state to snapshot.
	ErrNothingToSnapshot = errors.New("nothing new to snapshot")
)

// Signal is a wake-up from an election backend: the controller re-reads
// View on each (and periodically). A signal that names a Peer also says
// that the leader's heartbeats to that voter failed (with its last contact)
// or resumed, which is what write quorum needs.
type Signal struct {
	Peer string
	// Resumed: heartbeats to Peer succeed again; otherwise they fail.
	Resumed     bool
	LastContact time.Time
}

// Backend is an election backend, as the controller drives it: Raft (the
// default) or the Kafka-coordinated one.
type Backend interface {
	// Signals delivers wake-ups. It drops when full: readers treat a
	// signal as "look again" and re-read View.
	Signals() <-chan Signal
	View() Observed
	CommitIndex() uint64
	AppliedIndex() uint64
	// Barrier returns once every entry committed before it is applied.
	Barrier(ctx context.Context) error
	// Apply commits cmd and returns the FSM's response and the entry's index.
	Apply(ctx context.Context, cmd []byte) (any, uint64, error)
	// VerifyLeader confirms that this node still holds the role.
	VerifyLeader(ctx context.Context) error
	TransferLeadership() error
	Shutdown() error
}

// RosterEntry is one member of a Kafka-coordinated role, with its rank.
type RosterEntry struct {
	Member string
	Rank   int
	Offset int64
}

// RoleInfo is what Status shows of a Kafka-coordinated role.
type RoleInfo struct {
	Roster        []RosterEntry
	LeaseHolder   string
	LeaseDeadline time.Time
	Epoch         int16
}
