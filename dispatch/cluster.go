package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/ha"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// Membership is what the cluster methods need from the node besides the
// backend's ha.Membership (docs/design.md, "Membership").
type Membership interface {
	// Membership is the backend's; an error when its members cannot
	// change (the Kafka backend) or it is not running.
	Membership() (ha.Membership, error)
	// ClientAddrs maps member ids to client addresses: the replicated
	// member table, and the node's config peers for bootstrap members.
	ClientAddrs() map[string]string
	// MembersWritable is nil when member records may be written: this
	// node is PRIMARY and every voter applies them.
	MembersWritable() error
	// WriteMember and DeleteMember replicate a member record's change.
	WriteMember(ctx context.Context, id, peerAddr, clientAddr string) error
	DeleteMember(ctx context.Context, id string) error
	// MemberHealth is the PRIMARY's autopilot's last word on id; known is
	// false elsewhere.
	MemberHealth(id string) (healthy bool, state string, known bool)
	// TakeSnapshot has the backend take a snapshot now (ha.Snapshotter).
	TakeSnapshot(ctx context.Context) (ha.SnapshotInfo, error)
}

// transferWait bounds how long TransferLeader, and the removal of the
// PRIMARY itself, wait to see another node lead.
const transferWait = 5 * time.Second

// clusterService implements xce.v1.ClusterService: membership, leadership
// and backups (docs/design.md, "Membership").
type clusterService struct {
	xcev1connect.UnimplementedClusterServiceHandler
	s *Service
}

func failedPrecondition(format string, args ...any) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(format, args...))
}

// membership is the backend's membership, or the client's error.
func (c *clusterService) membership() (ha.Membership, error) {
	m, err := c.s.node.Membership()
	if err != nil {
		return nil, failedPrecondition("%v", err)
	}
	return m, nil
}

// memberErr turns a membership change's failure into the client's error:
// leadership lost is NOT_READY (the client retries on the new primary);
// anything else raft refused is FailedPrecondition.
func (c *clusterService) memberErr(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, ha.ErrNotLeader) || errors.Is(err, ha.ErrShutdown) || errors.Is(err, ha.ErrTimeout):
		return c.s.applyErr(err)
	}
	return failedPrecondition("%v", err)
}

// stable is the configuration when no change is in progress: membership
// changes go one at a time.
func (c *clusterService) stable(ctx context.Context, m ha.Membership) ([]ha.Member, error) {
	wait, cancel := context.WithTimeout(ctx, pendingWait)
	defer cancel()
	for {
		members, index, pending, err := m.Members()
		if err != nil {
			return nil, c.memberErr(err)
		}
		if !pending {
			return members, nil
		}
		// A change is committed within a round trip to the voters; the
		// one before this request (often the autopilot's promotion) is
		// waited for briefly rather than refused at once.
		select {
		case <-wait.Done():
			return nil, failedPrecondition("a membership change is in progress (configuration at index %d is not committed yet); retry once it is", index)
		case <-time.After(pendingPoll):
		}
	}
}

// How long a change waits for the one before it to commit, and how often
// it looks.
const (
	pendingWait = 2 * time.Second
	pendingPoll = 10 * time.Millisecond
)

func find(members []ha.Member, id string) (ha.Member, bool) {
	for _, mb := range members {
		if mb.ID == id {
			return mb, true
		}
	}
	return ha.Member{}, false
}

// checkAddr validates an address other processes dial, by the rule the
// config applies to peer_addr.
func checkAddr(field, s string) error {
	if err := configs.CheckDialAddr(s); err != nil {
		return invalid("%s %q: %v", field, s, err)
	}
	return nil
}

func checkID(id string) error {
	if !configs.ValidID(id) {
		return invalid("id %q: must be 1-64 characters of [A-Za-z0-9._-]", id)
	}
	return nil
}

// memberPB is the configuration's view of mb, as any node knows it.
func memberPB(mb ha.Member, clientAddr, leader string) *xcev1.Member {
	st := "nonvoter"
	if mb.Voter {
		st = "voter"
	}
	return &xcev1.Member{Id: mb.ID, PeerAddr: mb.PeerAddr, ClientAddr: clientAddr, Voter: mb.Voter,
		Primary: mb.ID == leader, State: st, LastContactMs: -1}
}

// ListMembers lists the configuration with each member's client address;
// the PRIMARY adds each member's health, last contact, lag and autopilot
// state. A STANDBY (stale read) knows the configuration only.
func (c *clusterService) ListMembers(ctx context.Context, req *connect.Request[xcev1.ListMembersRequest]) (*connect.Response[xcev1.ListMembersResponse], error) {
	m, err := c.membership()
	if err != nil {
		return nil, err
	}
	if err := c.s.readBarrier(ctx, req.Msg.Consistency); err != nil {
		return nil, err
	}
	members, index, _, err := m.Members()
	if err != nil {
		return nil, c.memberErr(err)
	}
	v := c.s.node.View()
	self := c.s.node.Config().NodeID
	primary := v.Role == ha.RolePrimary
	addrs := c.s.node.ClientAddrs()
	last := m.LastIndex()
	resp := &xcev1.ListMembersResponse{ConfigurationIndex: index}
	for _, mb := range members {
		pb := memberPB(mb, addrs[mb.ID], v.LeaderID)
		if primary {
			switch {
			case mb.ID == self:
				pb.LastContactMs = 0
			case mb.LastContact >= 0:
				pb.LastContactMs = mb.LastContact.Milliseconds()
			}
			if mb.ID != self && mb.MatchIndex <= last {
				pb.Lag = last - mb.MatchIndex
			}
			if healthy, state, ok := c.s.node.MemberHealth(mb.ID); ok {
				pb.Healthy, pb.State = healthy, state
			}
		}
		resp.Members = append(resp.Members, pb)
	}
	return connect.NewResponse(resp), nil
}

// statusMembers is Status's list of members: the configuration this node
// knows with client addresses; nil without one (the Kafka backend, or
// before the backend runs).
func (s *Service) statusMembers(leader string) []*xcev1.Member {
	m, err := s.node.Membership()
	if err != nil {
		return nil
	}
	members, _, _, err := m.Members()
	if err != nil {
		return nil
	}
	addrs := s.node.ClientAddrs()
	out := make([]*xcev1.Member, 0, len(members))
	for _, mb := range members {
		pb := memberPB(mb, addrs[mb.ID], leader)
		pb.State, pb.LastContactMs = "", 0
		out = append(out, pb)
	}
	return out
}

// add adds id as a non-voter after checking that neither it nor its
// addresses belong to another member: the member record first (so every
// node knows where it serves clients once it is in), then the
// configuration.
func (c *clusterService) add(ctx context.Context, m ha.Membership, members []ha.Member, id, peerAddr, clientAddr string) (*xcev1.Member, error) {
	if mb, ok := find(members, id); ok {
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("member %q exists (peer_addr %q)", id, mb.PeerAddr))
	}
	for _, mb := range members {
		if mb.PeerAddr == peerAddr {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("peer_addr %q is member %q's", peerAddr, mb.ID))
		}
	}
	if clientAddr != "" {
		for other, a := range c.s.node.ClientAddrs() {
			if a == clientAddr && other != id {
				return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("client_addr %q is member %q's", clientAddr, other))
			}
		}
	}
	if err := c.s.node.MembersWritable(); err != nil {
		return nil, failedPrecondition("cannot add %q: %v", id, err)
	}
	if err := c.s.node.WriteMember(ctx, id, peerAddr, clientAddr); err != nil {
		return nil, c.memberErr(err)
	}
	if err := m.AddNonvoter(ctx, id, peerAddr); err != nil {
		return nil, c.memberErr(err)
	}
	return &xcev1.Member{Id: id, PeerAddr: peerAddr, ClientAddr: clientAddr, State: "catching_up", LastContactMs: -1}, nil
}

// AddMember adds a server as a non-voter; the autopilot promotes it once it
// has caught up and stayed healthy.
func (c *clusterService) AddMember(ctx context.Context, req *connect.Request[xcev1.AddMemberRequest]) (*connect.Response[xcev1.AddMemberResponse], error) {
	r := req.Msg
	if err := checkMember(r.Id, r.PeerAddr, r.ClientAddr); err != nil {
		return nil, err
	}
	pb, err := c.addOrSame(ctx, r.Id, r.PeerAddr, r.ClientAddr)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.AddMemberResponse{Member: pb}), nil
}

// checkMember validates a member to add: its id, and both addresses (the
// member record needs the client address: clients and leader hints use it).
func checkMember(id, peerAddr, clientAddr string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkAddr("peer_addr", peerAddr); err != nil {
		return err
	}
	return checkAddr("client_addr", clientAddr)
}

// Join is AddMember on a node's own behalf (the authorizer lets the node
// role join only as itself).
func (c *clusterService) Join(ctx context.Context, req *connect.Request[xcev1.JoinRequest]) (*connect.Response[xcev1.JoinResponse], error) {
	r := req.Msg
	if cluster := c.s.node.Config().ClusterID; r.ClusterId != cluster {
		return nil, invalid("cluster_id %q: this is cluster %q", r.ClusterId, cluster)
	}
	if err := checkMember(r.Id, r.PeerAddr, r.ClientAddr); err != nil {
		return nil, err
	}
	pb, err := c.addOrSame(ctx, r.Id, r.PeerAddr, r.ClientAddr)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.JoinResponse{Member: pb}), nil
}

// addOrSame adds id as a non-voter. It is idempotent, so that a retried
// add or a joining node asking again is answered alike: an id already a
// member at the same addresses gets its member back (its record written
// if it has none yet); at other addresses it is AlreadyExists.
func (c *clusterService) addOrSame(ctx context.Context, id, peerAddr, clientAddr string) (*xcev1.Member, error) {
	m, err := c.membership()
	if err != nil {
		return nil, err
	}
	members, _, _, err := m.Members()
	if err != nil {
		return nil, c.memberErr(err)
	}
	if mb, ok := find(members, id); ok {
		have := c.s.node.ClientAddrs()[id]
		if mb.PeerAddr != peerAddr || (have != "" && have != clientAddr) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
				"%q is a member at peer_addr %q, client_addr %q, not at %q, %q: remove the member first",
				id, mb.PeerAddr, have, peerAddr, clientAddr))
		}
		if have == "" && c.s.node.MembersWritable() == nil {
			if err := c.s.node.WriteMember(ctx, id, peerAddr, clientAddr); err != nil {
				return nil, c.memberErr(err)
			}
		}
		return memberPB(mb, clientAddr, c.s.node.View().LeaderID), nil
	}
	if members, err = c.stable(ctx, m); err != nil {
		return nil, err
	}
	return c.add(ctx, m, members, id, peerAddr, clientAddr)
}

// existing is the membership, its stable configuration and member id in
// it: NotFound when id is not a member.
func (c *clusterService) existing(ctx context.Context, id string) (ha.Membership, []ha.Member, ha.Member, error) {
	if err := checkID(id); err != nil {
		return nil, nil, ha.Member{}, err
	}
	m, err := c.membership()
	if err != nil {
		return nil, nil, ha.Member{}, err
	}
	members, err := c.stable(ctx, m)
	if err != nil {
		return nil, nil, ha.Member{}, err
	}
	mb, ok := find(members, id)
	if !ok {
		return nil, nil, ha.Member{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("no member %q", id))
	}
	return m, members, mb, nil
}

// PromoteMember makes a non-voter a voter (the autopilot does it on its
// own once the member is healthy; this is the operator's way).
func (c *clusterService) PromoteMember(ctx context.Context, req *connect.Request[xcev1.PromoteMemberRequest]) (*connect.Response[xcev1.PromoteMemberResponse], error) {
	id := req.Msg.Id
	m, _, mb, err := c.existing(ctx, id)
	if err != nil {
		return nil, err
	}
	if !mb.Voter {
		if err := m.Promote(ctx, id); err != nil {
			return nil, c.memberErr(err)
		}
		mb.Voter = true
	}
	pb := memberPB(mb, c.s.node.ClientAddrs()[id], c.s.node.View().LeaderID)
	return connect.NewResponse(&xcev1.PromoteMemberResponse{Member: pb}), nil
}

// removalSafe reports whether removing id leaves enough healthy voters to
// form a quorum of the voters left, and the numbers for the refusal.
func removalSafe(members []ha.Member, id string, healthy func(id string) bool) (ok bool, left, healthyLeft, need int) {
	for _, mb := range members {
		if !mb.Voter || mb.ID == id {
			continue
		}
		left++
		if healthy(mb.ID) {
			healthyLeft++
		}
	}
	need = left/2 + 1
	return healthyLeft >= need, left, healthyLeft, need
}

// RemoveMember removes a member. A voter is removed only while the healthy
// voters left can form a quorum of the voters left, unless force. The
// PRIMARY does not remove itself: it hands leadership on and answers
// NOT_READY, and the client retries the removal on the new primary.
func (c *clusterService) RemoveMember(ctx context.Context, req *connect.Request[xcev1.RemoveMemberRequest]) (*connect.Response[xcev1.RemoveMemberResponse], error) {
	id, force := req.Msg.Id, req.Msg.Force
	m, members, mb, err := c.existing(ctx, id)
	if err != nil {
		return nil, err
	}
	self := c.s.node.Config().NodeID
	if mb.Voter {
		healthy := func(v string) bool {
			if v == self {
				return true
			}
			h, _, known := c.s.node.MemberHealth(v)
			return known && h
		}
		if ok, left, healthyLeft, need := removalSafe(members, id, healthy); !ok && !force {
			return nil, failedPrecondition(
				"removing voter %q would leave %d voters of which %d are healthy; a quorum of them needs %d: bring members back first, or force the removal",
				id, left, healthyLeft, need)
		}
	}
	if id == self {
		if err := m.TransferTo(ctx, ""); err != nil {
			return nil, c.memberErr(err)
		}
		v := c.waitLeader(ctx, self, "")
		d := Decision{Kind: "leadership_transferred", Reason: "this node handed leadership on to be removed: retry the removal on the new primary", RetryAfter: c.s.timings.Electing}
		return nil, c.s.notReady(v, d)
	}
	if err := m.Remove(ctx, id); err != nil {
		return nil, c.memberErr(err)
	}
	// Without member records yet (a voter on an older binary), the
	// autopilot removes the record later.
	if c.s.node.MembersWritable() == nil {
		if err := c.s.node.DeleteMember(ctx, id); err != nil {
			return nil, c.memberErr(err)
		}
	}
	return connect.NewResponse(&xcev1.RemoveMemberResponse{}), nil
}

// waitLeader waits, at most transferWait, until the view names a leader
// other than not (and to, when set), and returns the last view.
func (c *clusterService) waitLeader(ctx context.Context, not, to string) *ha.View {
	ctx, cancel := context.WithTimeout(ctx, transferWait)
	defer cancel()
	for {
		v := c.s.node.View()
		if v.LeaderID != "" && v.LeaderID != not && (to == "" || v.LeaderID == to) {
			return v
		}
		select {
		case <-v.Changed():
		case <-ctx.Done():
			return v
		}
	}
}

// TransferLeader hands leadership to a voter (the most caught-up one when
// to is empty) and answers the new primary's id.
func (c *clusterService) TransferLeader(ctx context.Context, req *connect.Request[xcev1.TransferLeaderRequest]) (*connect.Response[xcev1.TransferLeaderResponse], error) {
	to := req.Msg.To
	self := c.s.node.Config().NodeID
	m, err := c.membership()
	if err != nil {
		return nil, err
	}
	if to != "" {
		if err := checkID(to); err != nil {
			return nil, err
		}
		members, _, _, err := m.Members()
		if err != nil {
			return nil, c.memberErr(err)
		}
		mb, ok := find(members, to)
		switch {
		case !ok:
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no member %q", to))
		case !mb.Voter:
			return nil, failedPrecondition("member %q is a non-voter: only a voter can lead", to)
		case to == self:
			return connect.NewResponse(&xcev1.TransferLeaderResponse{LeaderId: self}), nil
		}
	}
	if err := m.TransferTo(ctx, to); err != nil {
		return nil, c.memberErr(err)
	}
	v := c.waitLeader(ctx, self, to)
	if v.LeaderID == "" || v.LeaderID == self {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("leadership was handed on, but no new primary was seen yet"))
	}
	return connect.NewResponse(&xcev1.TransferLeaderResponse{LeaderId: v.LeaderID}), nil
}
