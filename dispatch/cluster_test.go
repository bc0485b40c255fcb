package dispatch_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/xce/xce/client/transport"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fakeMembership is a backend configuration that changes as asked and
// records every change.
type fakeMembership struct {
	mu      sync.Mutex
	members []ha.Member
	index   uint64
	pending bool
	last    uint64
	calls   []string
	// onTransfer runs on TransferTo (e.g. to publish the new leader).
	onTransfer func(to string)
}

func (f *fakeMembership) Members() ([]ha.Member, uint64, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members), f.index, f.pending, nil
}

func (f *fakeMembership) LastIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func (f *fakeMembership) record(call string) {
	f.calls = append(f.calls, call)
	f.index++
}

func (f *fakeMembership) AddNonvoter(_ context.Context, id, addr string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("add " + id)
	f.members = append(f.members, ha.Member{ID: id, PeerAddr: addr, LastContact: -1})
	return nil
}

func (f *fakeMembership) Promote(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("promote " + id)
	for i := range f.members {
		if f.members[i].ID == id {
			f.members[i].Voter = true
		}
	}
	return nil
}

func (f *fakeMembership) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("remove " + id)
	f.members = slices.DeleteFunc(f.members, func(m ha.Member) bool { return m.ID == id })
	return nil
}

func (f *fakeMembership) TransferTo(_ context.Context, id string) error {
	f.mu.Lock()
	f.calls = append(f.calls, "transfer "+id)
	hook := f.onTransfer
	f.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	return nil
}

func (f *fakeMembership) changes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// clusterFake is the node's side of membership: member records, the
// autopilot's health, whether records may be written.
type clusterFake struct {
	mu       sync.Mutex
	m        ha.Membership // nil: the Kafka backend
	records  map[string][2]string
	health   map[string]bool
	writable error
	writes   []string
	// drainsClosed is DrainsWritable's answer, placementClosed
	// PlacementWritable's.
	drainsClosed    error
	placementClosed error
	// addrsClosed is WorkerAddrsWritable's answer.
	addrsClosed error
	// snap is what TakeSnapshot answers, snapErr its error; snaps counts
	// the calls.
	snap    ha.SnapshotInfo
	snapErr error
	snaps   int
}

func (n *fakeNode) Membership() (ha.Membership, error) {
	if n.cluster.m == nil {
		return nil, errors.New("membership changes need the raft backend")
	}
	return n.cluster.m, nil
}

func (n *fakeNode) ClientAddrs() map[string]string {
	c := &n.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for id, r := range c.records {
		out[id] = r[1]
	}
	return out
}

func (n *fakeNode) DrainsWritable() error {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.cluster.drainsClosed
}

func (n *fakeNode) PlacementWritable() error {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.cluster.placementClosed
}

func (n *fakeNode) WorkerAddrsWritable() error {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.cluster.addrsClosed
}

func (n *fakeNode) MembersWritable() error {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.cluster.writable
}

func (n *fakeNode) WriteMember(_ context.Context, id, peerAddr, clientAddr string) error {
	c := &n.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.records == nil {
		c.records = map[string][2]string{}
	}
	c.records[id] = [2]string{peerAddr, clientAddr}
	c.writes = append(c.writes, "set "+id)
	return nil
}

func (n *fakeNode) DeleteMember(_ context.Context, id string) error {
	c := &n.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.records, id)
	c.writes = append(c.writes, "delete "+id)
	return nil
}

func (n *fakeNode) MemberHealth(id string) (bool, string, bool) {
	c := &n.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.health[id]
	if !ok {
		return false, "", false
	}
	st := "voter"
	if !h {
		st = "unhealthy"
	}
	return h, st, true
}

func (n *fakeNode) TakeSnapshot(context.Context) (ha.SnapshotInfo, error) {
	c := &n.cluster
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snaps++
	return c.snap, c.snapErr
}

func (n *fakeNode) snapshotsTaken() int {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return n.cluster.snaps
}

func (n *fakeNode) recordWrites() []string {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	return slices.Clone(n.cluster.writes)
}

// clusterNode is the PRIMARY n1 of voters n1, n2, n3 (all healthy, each
// with its record) and non-voter n4.
func clusterNode() (*fakeNode, *fakeMembership) {
	n := newFakeNode("n1", primary)
	fm := &fakeMembership{index: 10, last: 100, members: []ha.Member{
		{ID: "n1", PeerAddr: "10.0.0.1:7201", Voter: true, MatchIndex: 100},
		{ID: "n2", PeerAddr: "10.0.0.2:7201", Voter: true, MatchIndex: 98, LastContact: 20e6},
		{ID: "n3", PeerAddr: "10.0.0.3:7201", Voter: true, MatchIndex: 100, LastContact: 10e6},
		{ID: "n4", PeerAddr: "10.0.0.4:7201", MatchIndex: 40, LastContact: 30e6},
	}}
	n.cluster.m = fm
	n.cluster.records = map[string][2]string{
		"n1": {"10.0.0.1:7201", "10.0.0.1:7101"}, "n2": {"10.0.0.2:7201", "10.0.0.2:7101"},
		"n3": {"10.0.0.3:7201", "10.0.0.3:7101"}, "n4": {"10.0.0.4:7201", "10.0.0.4:7101"},
	}
	n.cluster.health = map[string]bool{"n1": true, "n2": true, "n3": true, "n4": true}
	return n, fm
}

func clusterClient(t *testing.T, n *fakeNode) xcev1connect.ClusterServiceClient {
	cl, _ := clusterServer(t, n)
	return cl
}

// clusterServer serves n and returns a ClusterService client and the
// server (its ControllerService client).
func clusterServer(t *testing.T, n *fakeNode) (xcev1connect.ClusterServiceClient, *testServer) {
	ts := startServer(t, n, netio.Limits{})
	tr := transport.New()
	t.Cleanup(tr.CloseIdleConnections)
	return xcev1connect.NewClusterServiceClient(&http.Client{Transport: tr}, "http://"+ts.addr), ts
}

// AddMember and Join refuse bad or conflicting input with a clear error and
// change nothing; valid input writes the record, then adds a non-voter.
func TestAddMemberRules(t *testing.T) {
	for _, tc := range []struct {
		name             string
		id, peer, client string
		pending          bool
		writable         error
		code             connect.Code
		msg              string
	}{
		{name: "ok", id: "n5", peer: "10.0.0.5:7201", client: "10.0.0.5:7101"},
		{name: "bad id", id: "n 5", peer: "10.0.0.5:7201", client: "10.0.0.5:7101", code: connect.CodeInvalidArgument, msg: "id"},
		{name: "no peer host", id: "n5", peer: ":7201", client: "10.0.0.5:7101", code: connect.CodeInvalidArgument, msg: "peer_addr"},
		{name: "no client addr", id: "n5", peer: "10.0.0.5:7201", code: connect.CodeInvalidArgument, msg: "client_addr"},
		{name: "bad client addr", id: "n5", peer: "10.0.0.5:7201", client: "nope", code: connect.CodeInvalidArgument, msg: "client_addr"},
		{name: "duplicate id", id: "n2", peer: "10.0.0.5:7201", client: "10.0.0.5:7101", code: connect.CodeAlreadyExists, msg: `"n2" is a member`},
		{name: "duplicate peer addr", id: "n5", peer: "10.0.0.3:7201", client: "10.0.0.5:7101", code: connect.CodeAlreadyExists, msg: `member "n3"`},
		{name: "duplicate client addr", id: "n5", peer: "10.0.0.5:7201", client: "10.0.0.2:7101", code: connect.CodeAlreadyExists, msg: `member "n2"`},
		{name: "change in progress", id: "n5", peer: "10.0.0.5:7201", client: "10.0.0.5:7101", pending: true, code: connect.CodeFailedPrecondition, msg: "a membership change is in progress"},
		{name: "old voters", id: "n5", peer: "10.0.0.5:7201", client: "10.0.0.5:7101", writable: errors.New("voter n2 on log format 2"),
			code: connect.CodeFailedPrecondition, msg: "log format 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, fm := clusterNode()
			fm.pending = tc.pending
			n.cluster.writable = tc.writable
			cl := clusterClient(t, n)
			resp, err := cl.AddMember(ctxT(t), connect.NewRequest(&xcev1.AddMemberRequest{Id: tc.id, PeerAddr: tc.peer, ClientAddr: tc.client}))
			if tc.code != 0 {
				wantCode(t, "AddMember", err, tc.code)
				if !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("error %q does not say %q", err, tc.msg)
				}
				if c, w := fm.changes(), n.recordWrites(); len(c) != 0 || len(w) != 0 {
					t.Fatalf("refused, yet changed: configuration %v, records %v", c, w)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m := resp.Msg.Member; m.Id != tc.id || m.Voter || m.ClientAddr != tc.client {
				t.Fatalf("member %v", m)
			}
			if c, w := fm.changes(), n.recordWrites(); !slices.Equal(c, []string{"add n5"}) || !slices.Equal(w, []string{"set n5"}) {
				t.Fatalf("configuration %v, records %v; want [add n5], [set n5]", c, w)
			}
		})
	}
}

// Join is AddMember for the caller itself, idempotent for a member at the
// same addresses; another address for a member, or another cluster, is
// refused.
func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		id, peer, client, cluster string
		code                      connect.Code
		changes                   []string
	}{
		{name: "new node", id: "n5", peer: "10.0.0.5:7201", client: "10.0.0.5:7101", changes: []string{"add n5"}},
		{name: "already a member", id: "n4", peer: "10.0.0.4:7201", client: "10.0.0.4:7101"},
		{name: "member at another peer address", id: "n4", peer: "10.0.0.9:7201", client: "10.0.0.4:7101", code: connect.CodeAlreadyExists},
		{name: "member at another client address", id: "n4", peer: "10.0.0.4:7201", client: "10.0.0.9:7101", code: connect.CodeAlreadyExists},
		{name: "another cluster", id: "n5", peer: "10.0.0.5:7201", client: "10.0.0.5:7101", cluster: "other", code: connect.CodeInvalidArgument},
		{name: "no client address", id: "n5", peer: "10.0.0.5:7201", code: connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, fm := clusterNode()
			cl := clusterClient(t, n)
			cluster := tc.cluster
			if cluster == "" {
				cluster = n.cfg.ClusterID
			}
			resp, err := cl.Join(ctxT(t), connect.NewRequest(&xcev1.JoinRequest{Id: tc.id, PeerAddr: tc.peer, ClientAddr: tc.client, ClusterId: cluster}))
			if tc.code != 0 {
				wantCode(t, "Join", err, tc.code)
			} else if err != nil {
				t.Fatal(err)
			} else if m := resp.Msg.Member; m.Id != tc.id || m.PeerAddr != tc.peer {
				t.Fatalf("member %v", m)
			}
			if c := fm.changes(); !slices.Equal(c, tc.changes) {
				t.Fatalf("configuration changes %v, want %v", c, tc.changes)
			}
		})
	}
}

// RemoveMember refuses a removal that leaves too few healthy voters for a
// quorum unless forced, refuses during another change, and makes the
// PRIMARY hand leadership on rather than remove itself.
func TestRemoveMemberRules(t *testing.T) {
	for _, tc := range []struct {
		name      string
		id        string
		force     bool
		unhealthy []string
		pending   bool
		code      connect.Code
		msg       string
		changes   []string
		writes    []string
	}{
		{name: "healthy voter", id: "n3", changes: []string{"remove n3"}, writes: []string{"delete n3"}},
		{name: "non-voter", id: "n4", unhealthy: []string{"n2", "n3"}, changes: []string{"remove n4"}, writes: []string{"delete n4"}},
		// n1, n2 left, n2 unhealthy: 1 healthy of 2, a quorum needs 2.
		{name: "unsafe", id: "n3", unhealthy: []string{"n2"}, code: connect.CodeFailedPrecondition,
			msg: "would leave 2 voters of which 1 are healthy; a quorum of them needs 2"},
		{name: "unsafe forced", id: "n3", unhealthy: []string{"n2"}, force: true, changes: []string{"remove n3"}, writes: []string{"delete n3"}},
		// Removing the unhealthy one itself is what heals the cluster.
		{name: "the unhealthy voter", id: "n2", unhealthy: []string{"n2"}, changes: []string{"remove n2"}, writes: []string{"delete n2"}},
		{name: "change in progress", id: "n3", pending: true, code: connect.CodeFailedPrecondition, msg: "a membership change is in progress"},
		{name: "unknown", id: "n9", code: connect.CodeNotFound},
		{name: "the primary", id: "n1", code: connect.CodeUnavailable, changes: []string{"transfer "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, fm := clusterNode()
			fm.pending = tc.pending
			for _, id := range tc.unhealthy {
				n.cluster.health[id] = false
			}
			fm.onTransfer = func(string) {
				n.setView(ha.View{Role: ha.RoleStandby, Term: 6, LeaderID: "n2", LeaderAddr: "10.0.0.2:7101"})
			}
			cl := clusterClient(t, n)
			_, err := cl.RemoveMember(ctxT(t), connect.NewRequest(&xcev1.RemoveMemberRequest{Id: tc.id, Force: tc.force}))
			if tc.code != 0 {
				wantCode(t, "RemoveMember", err, tc.code)
				if !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("error %q does not say %q", err, tc.msg)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tc.id == "n1" {
				if nr := notReadyOf(t, err); nr.LeaderId != "n2" || nr.LeaderAddr != "10.0.0.2:7101" {
					t.Fatalf("NOT_READY %v: want the new primary n2 as the hint", nr)
				}
			}
			if c, w := fm.changes(), n.recordWrites(); !slices.Equal(c, tc.changes) || !slices.Equal(w, tc.writes) {
				t.Fatalf("configuration %v, records %v; want %v, %v", c, w, tc.changes, tc.writes)
			}
		})
	}
}

// PromoteMember promotes a non-voter once; TransferLeader answers the new
// primary.
func TestPromoteAndTransfer(t *testing.T) {
	n, fm := clusterNode()
	cl := clusterClient(t, n)
	ctx := ctxT(t)
	r, err := cl.PromoteMember(ctx, connect.NewRequest(&xcev1.PromoteMemberRequest{Id: "n4"}))
	if err != nil || !r.Msg.Member.Voter {
		t.Fatalf("promote n4: %v %v", r, err)
	}
	if _, err := cl.PromoteMember(ctx, connect.NewRequest(&xcev1.PromoteMemberRequest{Id: "n4"})); err != nil {
		t.Fatalf("promote a voter again: %v", err)
	}
	_, err = cl.PromoteMember(ctx, connect.NewRequest(&xcev1.PromoteMemberRequest{Id: "n9"}))
	wantCode(t, "promote unknown", err, connect.CodeNotFound)

	fm.onTransfer = func(to string) { n.setView(ha.View{Role: ha.RoleStandby, Term: 6, LeaderID: to}) }
	tr, err := cl.TransferLeader(ctx, connect.NewRequest(&xcev1.TransferLeaderRequest{To: "n3"}))
	if err != nil || tr.Msg.LeaderId != "n3" {
		t.Fatalf("transfer to n3: %v %v", tr, err)
	}
	if c := fm.changes(); !slices.Equal(c, []string{"promote n4", "transfer n3"}) {
		t.Fatalf("changes %v", c)
	}
}

// ListMembers: the PRIMARY adds health, lag and contact to the
// configuration; Status lists the members; the Kafka backend has none and
// refuses membership changes.
func TestListMembersAndStatus(t *testing.T) {
	n, _ := clusterNode()
	cl, ts := clusterServer(t, n)
	ctx := ctxT(t)
	r, err := cl.ListMembers(ctx, connect.NewRequest(&xcev1.ListMembersRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if r.Msg.ConfigurationIndex != 10 || len(r.Msg.Members) != 4 {
		t.Fatalf("list %v", r.Msg)
	}
	n2, n4 := r.Msg.Members[1], r.Msg.Members[3]
	if n2.Lag != 2 || n2.LastContactMs != 20 || !n2.Healthy || n2.ClientAddr != "10.0.0.2:7101" || !n2.Voter {
		t.Fatalf("n2 %v", n2)
	}
	if n4.Lag != 60 || n4.Voter || !r.Msg.Members[0].Primary {
		t.Fatalf("n4 %v, n1 %v", n4, r.Msg.Members[0])
	}

	st, err := ts.svc.Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Msg.Members) != 4 || st.Msg.Members[2].ClientAddr != "10.0.0.3:7101" || !st.Msg.Members[0].Primary {
		t.Fatalf("status members %v", st.Msg.Members)
	}

	// A standby answers a stale read with the configuration only.
	n.setView(ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: "10.0.0.2:7101"})
	r, err = cl.ListMembers(ctx, connect.NewRequest(&xcev1.ListMembersRequest{Consistency: xcev1.Consistency_CONSISTENCY_STALE}))
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Msg.Members[1]; m.Lag != 0 || m.LastContactMs != -1 || m.Healthy || !m.Primary {
		t.Fatalf("standby's n2 %v", m)
	}
}

// Every membership method answers FailedPrecondition on the Kafka backend.
func TestMembershipNeedsRaft(t *testing.T) {
	n, _ := clusterNode()
	n.cluster.m = nil
	cl := clusterClient(t, n)
	ctx := ctxT(t)
	for name, call := range map[string]func() error{
		"ListMembers": func() error {
			_, err := cl.ListMembers(ctx, connect.NewRequest(&xcev1.ListMembersRequest{}))
			return err
		},
		"AddMember": func() error {
			_, err := cl.AddMember(ctx, connect.NewRequest(&xcev1.AddMemberRequest{Id: "n5", PeerAddr: "10.0.0.5:7201", ClientAddr: "10.0.0.5:7101"}))
			return err
		},
		"PromoteMember": func() error {
			_, err := cl.PromoteMember(ctx, connect.NewRequest(&xcev1.PromoteMemberRequest{Id: "n4"}))
			return err
		},
		"RemoveMember": func() error {
			_, err := cl.RemoveMember(ctx, connect.NewRequest(&xcev1.RemoveMemberRequest{Id: "n4"}))
			return err
		},
		"TransferLeader": func() error {
			_, err := cl.TransferLeader(ctx, connect.NewRequest(&xcev1.TransferLeaderRequest{}))
			return err
		},
		"Join": func() error {
			_, err := cl.Join(ctx, connect.NewRequest(&xcev1.JoinRequest{Id: "n5", PeerAddr: "10.0.0.5:7201", ClientAddr: "10.0.0.5:7101", ClusterId: n.cfg.ClusterID}))
			return err
		},
	} {
		err := call()
		wantCode(t, name, err, connect.CodeFailedPrecondition)
		if !strings.Contains(err.Error(), "need the raft backend") {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// Adding a member again at the same addresses (a retried add) answers the
// member and changes nothing.
func TestAddMemberAgain(t *testing.T) {
	n, fm := clusterNode()
	cl := clusterClient(t, n)
	resp, err := cl.AddMember(ctxT(t), connect.NewRequest(&xcev1.AddMemberRequest{Id: "n4", PeerAddr: "10.0.0.4:7201", ClientAddr: "10.0.0.4:7101"}))
	if err != nil {
		t.Fatal(err)
	}
	if m := resp.Msg.Member; m.Id != "n4" || m.Voter || m.ClientAddr != "10.0.0.4:7101" {
		t.Fatalf("member %+v", m)
	}
	if c, w := fm.changes(), n.recordWrites(); len(c) != 0 || len(w) != 0 {
		t.Fatalf("changed: configuration %v, records %v", c, w)
	}
}
