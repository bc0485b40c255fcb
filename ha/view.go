package ha

import "time"

// View is the node's role as clients see it. The event loop publishes a new
// View on every change; readers (the gate, Status) load it lock-free.
type View struct {
	Role        Role
	Term        uint64
	LeaderID    string
	LeaderAddr  string // the leader's client address, when known
	WriteQuorum bool
	// QuorumLost: this node was PRIMARY in this term and lost contact with
	// a majority (raft then steps it down); it says "no write quorum"
	// rather than "electing" until the term moves on.
	QuorumLost bool
	Reason     string
	// Storage says why the node's storage fails ("" while it works): such
	// a node is never PRIMARY and refuses writes with this reason.
	Storage string
	// Stopping is set once shutdown began: every request that needs the
	// role is answered NOT_READY.
	Stopping bool

	// changed is closed when a newer View replaces this one.
	changed chan struct{}
}

// Changed is closed once this View is replaced; watchers wait on it and then
// load the new one.
func (v *View) Changed() <-chan struct{} { return v.changed }

// Serving reports whether the view is a PRIMARY with write quorum.
func (v *View) Serving() bool { return v.Role == RolePrimary && v.WriteQuorum && !v.Stopping }

// NewView returns a View whose Changed channel is open.
func NewView(v View) *View {
	v.changed = make(chan struct{})
	return &v
}

// Replace closes v's Changed channel; call it once, after publishing next.
func (v *View) Replace() { close(v.changed) }

// StartupPhase is one phase of a node's start: when it ended, since the
// node started, and how long it took when that is known apart (a
// snapshot restore).
type StartupPhase struct {
	Name string
	At   time.Duration
	Took time.Duration
}
