package ha

import (
	"context"
	"time"
)

// Member is one server of the backend's configuration, with what the
// leader knows of its progress (docs/design.md, "Membership").
type Member struct {
	ID, PeerAddr string
	// Voter: it votes and counts for commits; a non-voter only follows.
	Voter bool
	// LastContact is how long ago the leader last heard from it; negative
	// when unknown (this node is not the leader, or never heard from it).
	LastContact time.Duration
	// MatchIndex is the last log index known stored on it (leader only; 0
	// when unknown). The leader's own is its last log index.
	MatchIndex uint64
}

// Membership is a backend whose members can change (the Raft backend).
// Every change is one configuration entry through the leader's log, one
// at a time; the methods fail on a node that is not the leader.
type Membership interface {
	// Members returns the latest configuration (committed or not), its
	// log index, and whether it is not committed yet.
	Members() (members []Member, index uint64, pending bool, err error)
	// LastIndex is this node's last log index.
	LastIndex() uint64
	// AddNonvoter adds id at peerAddr as a non-voter (or changes the
	// address of a non-voter id).
	AddNonvoter(ctx context.Context, id, peerAddr string) error
	// Promote makes non-voter id a voter.
	Promote(ctx context.Context, id string) error
	// Remove removes id, voter or not.
	Remove(ctx context.Context, id string) error
	// TransferTo hands leadership to voter id, or to the most caught-up
	// voter when id is empty, and returns once it has moved or failed.
	TransferTo(ctx context.Context, id string) error
}

// Snapshotter is a backend that takes a snapshot of the state machine on
// demand (the Raft backend), so that its cost can be measured under load.
type Snapshotter interface {
	// TakeSnapshot takes one on the leader and returns once it is
	// persisted; ErrNothingToSnapshot when nothing was applied since the
	// node started.
	TakeSnapshot(ctx context.Context) (SnapshotInfo, error)
}

// SnapshotInfo describes a snapshot taken: the last index it holds and
// its size in bytes.
type SnapshotInfo struct {
	Index, Bytes uint64
}
