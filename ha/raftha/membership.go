package raftha

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
)

// Membership: every change goes through the leader's log as one
// configuration entry, written with the latest configuration's index as
// its precondition, so that two concurrent changes cannot both apply to
// the same configuration: the second fails and its caller re-reads
// Members (docs/design.md, "Membership").

var _ ha.Membership = (*Raft)(nil)

// Members returns raft's latest configuration, committed or not, with
// what the leader knows of each follower's progress.
func (b *Raft) Members() ([]ha.Member, uint64, bool, error) {
	if b.r.State() == raft.Shutdown {
		return nil, 0, false, ha.ErrShutdown
	}
	cs := b.r.ConfigurationState()
	progress := b.r.Progress() // nil unless leader
	leader := b.r.State() == raft.Leader
	self := raft.ServerID(b.id)
	now := time.Now()
	out := make([]ha.Member, 0, len(cs.Latest.Servers))
	for _, s := range cs.Latest.Servers {
		m := ha.Member{ID: string(s.ID), PeerAddr: string(s.Address), Voter: s.Suffrage == raft.Voter, LastContact: -1}
		if s.ID == self && leader {
			m.LastContact, m.MatchIndex = 0, b.r.LastIndex()
		} else if progress != nil {
			if p, ok := progress[s.ID]; ok {
				m.MatchIndex = p.MatchIndex
				if !p.LastContact.IsZero() {
					m.LastContact = max(now.Sub(p.LastContact), 0)
				}
			}
		}
		out = append(out, m)
	}
	return out, cs.LatestIndex, cs.Pending(), nil
}

// LastIndex is this node's last log index.
func (b *Raft) LastIndex() uint64 { return b.r.LastIndex() }

// AddNonvoter adds id at peerAddr as a non-voter, or moves non-voter id
// to peerAddr. Adding it again at the same address changes nothing, so a
// joining node may retry.
func (b *Raft) AddNonvoter(ctx context.Context, id, peerAddr string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(peerAddr); err != nil || peerAddr == "" {
		return fmt.Errorf("%w: peer address %q is not host:port", ha.ErrMemberRefused, peerAddr)
	}
	cs, err := b.leaderConfiguration()
	if err != nil {
		return err
	}
	for _, s := range cs.Latest.Servers {
		switch {
		case string(s.ID) == id && s.Suffrage == raft.Voter:
			return fmt.Errorf("%w: %s is already a voter", ha.ErrMemberRefused, id)
		case string(s.ID) == id && string(s.Address) == peerAddr:
			return nil
		case string(s.ID) != id && string(s.Address) == peerAddr:
			return fmt.Errorf("%w: peer address %s is already used by %s", ha.ErrMemberRefused, peerAddr, s.ID)
		}
	}
	return b.change(ctx, b.r.AddNonvoter(raft.ServerID(id), raft.ServerAddress(peerAddr), cs.LatestIndex, timeoutOf(ctx)))
}

// Promote makes non-voter id a voter at the address it has; promoting a
// voter changes nothing.
func (b *Raft) Promote(ctx context.Context, id string) error {
	cs, err := b.leaderConfiguration()
	if err != nil {
		return err
	}
	s, ok := serverOf(cs.Latest, id)
	switch {
	case !ok:
		return fmt.Errorf("%w: no member %q", ha.ErrMemberRefused, id)
	case s.Suffrage == raft.Voter:
		return nil
	}
	return b.change(ctx, b.r.AddVoter(s.ID, s.Address, cs.LatestIndex, timeoutOf(ctx)))
}

// Remove removes id, voter or not. A leader that removes itself steps
// down once the change is committed.
func (b *Raft) Remove(ctx context.Context, id string) error {
	cs, err := b.leaderConfiguration()
	if err != nil {
		return err
	}
	if _, ok := serverOf(cs.Latest, id); !ok {
		return fmt.Errorf("%w: no member %q", ha.ErrMemberRefused, id)
	}
	return b.change(ctx, b.r.RemoveServer(raft.ServerID(id), cs.LatestIndex, timeoutOf(ctx)))
}

// TransferTo hands leadership to voter id, or to the most caught-up voter
// when id is empty. Transferring to this node, the leader, changes nothing.
func (b *Raft) TransferTo(ctx context.Context, id string) error {
	cs, err := b.leaderConfiguration()
	if err != nil {
		return err
	}
	if id == "" {
		return b.change(ctx, b.r.LeadershipTransfer())
	}
	s, ok := serverOf(cs.Latest, id)
	switch {
	case !ok:
		return fmt.Errorf("%w: no member %q", ha.ErrMemberRefused, id)
	case s.Suffrage != raft.Voter:
		return fmt.Errorf("%w: %s is not a voter", ha.ErrMemberRefused, id)
	case id == b.id:
		return nil
	}
	return b.change(ctx, b.r.LeadershipTransferToServer(s.ID, s.Address))
}

// leaderConfiguration is the latest configuration, read on the leader;
// on any other node the change would fail anyway, so it fails first.
func (b *Raft) leaderConfiguration() (raft.ConfigurationState, error) {
	switch b.r.State() {
	case raft.Leader:
		return b.r.ConfigurationState(), nil
	case raft.Shutdown:
		return raft.ConfigurationState{}, ha.ErrShutdown
	}
	return raft.ConfigurationState{}, fmt.Errorf("%w: membership changes go to the leader", ha.ErrNotLeader)
}

// change waits for f within ctx.
func (b *Raft) change(ctx context.Context, f raft.Future) error {
	resolved, err := b.wait(ctx, f)
	if !resolved {
		return fmt.Errorf("%w: %v (the change may still be applied)", ha.ErrTimeout, ctx.Err())
	}
	return mapErr(err)
}

func serverOf(c raft.Configuration, id string) (raft.Server, bool) {
	for _, s := range c.Servers {
		if string(s.ID) == id {
			return s, true
		}
	}
	return raft.Server{}, false
}

func checkID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("%w: member id must be 1 to 128 characters (got %d)", ha.ErrMemberRefused, len(id))
	}
	return nil
}
