package controller

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/autopilot"
	"github.com/xce/xce/state"
)

// stepper is the autopilot's decision function (package ha/autopilot).
type stepper interface {
	Step(servers []autopilot.Server, pending bool, now time.Time) autopilot.Decision
	Forget(id string)
}

// ErrNoMembership answers a membership method on a backend whose members
// cannot change (the Kafka backend).
var ErrNoMembership = errors.New("membership changes need the raft backend")

// Reasons member commands may not be written.
var (
	notPrimaryYet    = "member records are written by the PRIMARY"
	memberGateClosed = "member records wait until every voter is asked for its log format"
)

// memberState is the membership side of a node shared with the API: what
// the term's services learned, read lock-free by the handlers.
type memberState struct {
	// cmds is the reason member commands may not be written yet; nil once
	// every voter applies them (log format 3) in the current term.
	cmds atomic.Pointer[string]
	// pilot is the autopilot's last decision in the current term; nil
	// when the node is not PRIMARY or none was made yet.
	pilot atomic.Pointer[autopilot.Decision]

	// removed are the ids removed through Membership since the
	// autopilot's last step: it forgets them, so that one added again
	// under the same id is stabilized afresh.
	mu      sync.Mutex
	removed []string
}

// takeRemoved returns and clears the ids removed since the last call.
func (s *memberState) takeRemoved() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.removed
	s.removed = nil
	return r
}

// forgetting is the backend's membership with its removals reported to
// the autopilot.
type forgetting struct {
	ha.Membership
	s *memberState
}

func (f forgetting) Remove(ctx context.Context, id string) error {
	err := f.Membership.Remove(ctx, id)
	if err == nil {
		f.s.mu.Lock()
		f.s.removed = append(f.s.removed, id)
		f.s.mu.Unlock()
	}
	return err
}

// Membership is the backend's membership (docs/design.md, "Membership"):
// ErrNoMembership for a backend whose members cannot change.
func (n *Node) Membership() (ha.Membership, error) {
	b := n.backend.Load()
	if b == nil {
		return nil, ha.ErrNotLeader
	}
	m, ok := b.Backend.(ha.Membership)
	if !ok {
		return nil, ErrNoMembership
	}
	return forgetting{Membership: m, s: &n.members}, nil
}

// ErrNoSnapshots answers TakeSnapshot on a backend that takes no
// snapshots on demand (the Kafka backend).
var ErrNoSnapshots = errors.New("snapshots on demand need the raft backend")

// TakeSnapshot has the backend take a snapshot now (docs/operations.md,
// "Snapshots"): ha.ErrNotLeader until the backend runs, ErrNoSnapshots for
// a backend without them.
func (n *Node) TakeSnapshot(ctx context.Context) (ha.SnapshotInfo, error) {
	b := n.backend.Load()
	if b == nil {
		return ha.SnapshotInfo{}, ha.ErrNotLeader
	}
	s, ok := b.Backend.(ha.Snapshotter)
	if !ok {
		return ha.SnapshotInfo{}, ErrNoSnapshots
	}
	return s.TakeSnapshot(ctx)
}

// membership is Membership for the node's own services: nil when there is
// none.
func (n *Node) membership() ha.Membership {
	m, err := n.Membership()
	if err != nil {
		return nil
	}
	return m
}

// ClientAddrs maps member ids to their client addresses: the replicated
// member table, and for a bootstrap peer without a record yet, its entry in
// this node's config peers.
func (n *Node) ClientAddrs() map[string]string {
	addrs := make(map[string]string)
	for _, p := range n.cfg.Peers {
		if p.ClientAddr != "" {
			addrs[p.ID] = p.ClientAddr
		}
	}
	for _, r := range n.fsm.Members() {
		if r.ClientAddr != "" {
			addrs[r.ID] = r.ClientAddr
		}
	}
	return addrs
}

// MembersWritable is nil once member commands may be written in this term:
// every voter reported a log format that applies them.
func (n *Node) MembersWritable() error {
	if why := n.members.cmds.Load(); why != nil {
		return errors.New(*why)
	}
	return nil
}

// WriteMember replicates the member record of id.
func (n *Node) WriteMember(ctx context.Context, id, peerAddr, clientAddr string) error {
	if err := n.MembersWritable(); err != nil {
		return err
	}
	cmd, err := state.EncodeSetMember(state.MemberRecord{ID: id, PeerAddr: peerAddr, ClientAddr: clientAddr})
	if err != nil {
		return err
	}
	_, err = n.Apply(ctx, cmd)
	return err
}

// DeleteMember replicates the removal of id's member record.
func (n *Node) DeleteMember(ctx context.Context, id string) error {
	if err := n.MembersWritable(); err != nil {
		return err
	}
	cmd, err := state.EncodeRemoveMember(id)
	if err != nil {
		return err
	}
	_, err = n.Apply(ctx, cmd)
	return err
}

// MemberHealth is the autopilot's last word on id in this term: healthy,
// and its state (voter, nonvoter, catching_up, stabilizing, promoting);
// known is false off the PRIMARY or before the first decision.
func (n *Node) MemberHealth(id string) (healthy bool, state string, known bool) {
	d := n.members.pilot.Load()
	if d == nil {
		return false, "", false
	}
	for _, s := range d.States {
		if s.ID == id {
			return s.Healthy, s.State, true
		}
	}
	return false, "", false
}

// voterAddr is a voter other than this node and where it serves clients
// (empty when no one has said).
type voterAddr struct{ id, addr string }

// otherVoters are the voters other than this node: those of the current
// configuration with the Raft backend, otherwise the config's peers.
func (n *Node) otherVoters() []voterAddr {
	var out []voterAddr
	if m := n.membership(); m != nil {
		if members, _, _, err := m.Members(); err == nil {
			addrs := n.ClientAddrs()
			for _, mb := range members {
				if mb.Voter && mb.ID != n.cfg.NodeID {
					out = append(out, voterAddr{mb.ID, addrs[mb.ID]})
				}
			}
			return out
		}
	}
	for _, p := range n.cfg.Peers {
		if p.ID != n.cfg.NodeID {
			out = append(out, voterAddr{p.ID, p.ClientAddr})
		}
	}
	return out
}

// voterCount is how many voters the cluster has, this node included.
func (n *Node) voterCount() int {
	if m := n.membership(); m != nil {
		if members, _, _, err := m.Members(); err == nil {
			c := 0
			for _, mb := range members {
				if mb.Voter {
					c++
				}
			}
			return c
		}
	}
	return len(n.cfg.Peers)
}

func sortedIDs(m map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
