package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fakeCluster is a ClusterService over an in-memory configuration. As a
// primary it answers like the server: adding the same member again is
// "already a member" (success), removing a non-member NOT_FOUND. loseAnswers
// makes the next calls apply their change and then fail as a node that
// went away would, so the client cannot tell whether they happened. As a
// standby (leader set) it refuses every call with NOT_READY and a hint.
type fakeCluster struct {
	xcev1connect.UnimplementedClusterServiceHandler
	leader string // as a standby: the primary's address

	mu          sync.Mutex
	members     []*xcev1.Member
	loseAnswers int
	refuse      error
	calls       map[string]int
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{calls: map[string]int{}, members: []*xcev1.Member{
		{Id: "n1", PeerAddr: "127.0.0.1:7201", ClientAddr: "127.0.0.1:7101", Voter: true, Healthy: true, Primary: true, State: "voter"},
		{Id: "n2", PeerAddr: "127.0.0.1:7202", ClientAddr: "127.0.0.1:7102", Voter: true, Healthy: true, State: "voter"},
		{Id: "n3", PeerAddr: "127.0.0.1:7203", ClientAddr: "127.0.0.1:7103", Voter: true, Healthy: true, State: "voter"},
	}}
}

// serve runs the change under the lock and answers as configured.
func (f *fakeCluster) serve(method string, change func() error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if f.leader != "" {
		e := connect.NewError(connect.CodeUnavailable, errors.New("standby"))
		d, _ := connect.NewErrorDetail(&xcev1.NotReady{Role: xcev1.Role_ROLE_STANDBY, LeaderId: "n1", LeaderAddr: f.leader, Reason: "standby", RetryAfterMs: 10})
		e.AddDetail(d)
		return e
	}
	if f.refuse != nil {
		return f.refuse
	}
	if err := change(); err != nil {
		return err
	}
	if f.loseAnswers > 0 && method != "list" {
		f.loseAnswers--
		return connect.NewError(connect.CodeUnavailable, errors.New("connection reset"))
	}
	return nil
}

func (f *fakeCluster) find(id string) *xcev1.Member {
	for _, m := range f.members {
		if m.Id == id {
			return m
		}
	}
	return nil
}

func (f *fakeCluster) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

func (f *fakeCluster) ListMembers(context.Context, *connect.Request[xcev1.ListMembersRequest]) (*connect.Response[xcev1.ListMembersResponse], error) {
	var out []*xcev1.Member
	err := f.serve("list", func() error {
		for _, m := range f.members {
			out = append(out, &xcev1.Member{Id: m.Id, PeerAddr: m.PeerAddr, ClientAddr: m.ClientAddr, Voter: m.Voter, Primary: m.Primary, State: m.State})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.ListMembersResponse{Members: out, ConfigurationIndex: 9}), nil
}

func (f *fakeCluster) AddMember(_ context.Context, req *connect.Request[xcev1.AddMemberRequest]) (*connect.Response[xcev1.AddMemberResponse], error) {
	var out *xcev1.Member
	err := f.serve("add", func() error {
		if m := f.find(req.Msg.Id); m != nil {
			if m.PeerAddr != req.Msg.PeerAddr {
				return connect.NewError(connect.CodeAlreadyExists, errors.New("a member with another address"))
			}
			out = m
			return nil
		}
		out = &xcev1.Member{Id: req.Msg.Id, PeerAddr: req.Msg.PeerAddr, ClientAddr: req.Msg.ClientAddr, State: "catching_up"}
		f.members = append(f.members, out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.AddMemberResponse{Member: out}), nil
}

func (f *fakeCluster) PromoteMember(_ context.Context, req *connect.Request[xcev1.PromoteMemberRequest]) (*connect.Response[xcev1.PromoteMemberResponse], error) {
	var out *xcev1.Member
	err := f.serve("promote", func() error {
		out = f.find(req.Msg.Id)
		if out == nil {
			return connect.NewError(connect.CodeNotFound, errors.New("not a member"))
		}
		out.Voter, out.State = true, "voter"
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.PromoteMemberResponse{Member: out}), nil
}

func (f *fakeCluster) RemoveMember(_ context.Context, req *connect.Request[xcev1.RemoveMemberRequest]) (*connect.Response[xcev1.RemoveMemberResponse], error) {
	err := f.serve("remove", func() error {
		for i, m := range f.members {
			if m.Id == req.Msg.Id {
				f.members = append(f.members[:i], f.members[i+1:]...)
				return nil
			}
		}
		return connect.NewError(connect.CodeNotFound, errors.New("not a member"))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.RemoveMemberResponse{}), nil
}

// TransferLeader moves the PRIMARY flag to the next voter (or to To).
func (f *fakeCluster) TransferLeader(_ context.Context, req *connect.Request[xcev1.TransferLeaderRequest]) (*connect.Response[xcev1.TransferLeaderResponse], error) {
	var to string
	err := f.serve("transfer", func() error {
		from := -1
		for i, m := range f.members {
			if m.Primary {
				from = i
			}
		}
		next := f.members[(from+1)%len(f.members)]
		if req.Msg.To != "" {
			if next = f.find(req.Msg.To); next == nil {
				return connect.NewError(connect.CodeNotFound, errors.New("not a member"))
			}
		}
		f.members[from].Primary, next.Primary = false, true
		to = next.Id
		return nil
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.TransferLeaderResponse{LeaderId: to}), nil
}

func serveCluster(t *testing.T, f *fakeCluster) string {
	t.Helper()
	srv := httptest.NewServer(func() http.Handler { _, h := xcev1connect.NewClusterServiceHandler(f); return h }())
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func clusterClient(t *testing.T, eps ...string) *client.Client {
	t.Helper()
	c, err := client.New(eps, client.Options{MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func clusterCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestListMembersFollowsTheLeader: a list sent to a standby follows its
// hint to the primary.
func TestListMembersFollowsTheLeader(t *testing.T) {
	primary := newFakeCluster()
	pAddr := serveCluster(t, primary)
	standby := newFakeCluster()
	standby.leader = pAddr
	sAddr := serveCluster(t, standby)
	r, err := clusterClient(t, sAddr).ListMembers(clusterCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Members) != 3 || r.ConfigurationIndex != 9 || !r.Members[0].Primary {
		t.Fatalf("list %v", r)
	}
	if standby.count("list") != 1 || primary.count("list") != 1 {
		t.Errorf("calls: standby %d, primary %d", standby.count("list"), primary.count("list"))
	}
}

// TestMembershipChangesRetriedOnce: a change whose answer is lost is
// applied once. An add or a promotion is sent again (the server answers a
// repeat as the change made); a removal's retry finds it made and sends
// nothing.
func TestMembershipChangesRetriedOnce(t *testing.T) {
	f := newFakeCluster()
	c := clusterClient(t, serveCluster(t, f))
	ctx := clusterCtx(t)
	lose := func() {
		f.mu.Lock()
		f.loseAnswers = 1
		f.mu.Unlock()
	}

	lose()
	m, err := c.AddMember(ctx, "n4", "127.0.0.1:7204", "127.0.0.1:7104")
	if err != nil || m.Id != "n4" || m.Voter {
		t.Fatalf("add: %v %v", m, err)
	}
	lose()
	if m, err = c.PromoteMember(ctx, "n4"); err != nil || !m.Voter {
		t.Fatalf("promote: %v %v", m, err)
	}
	lose()
	if err := c.RemoveMember(ctx, "n2", false); err != nil {
		t.Fatalf("remove: %v", err)
	}
	lose()
	leader, err := c.TransferLeader(ctx, "")
	if err != nil || leader != "n3" {
		t.Fatalf("transfer: %q %v (want n3: one move from n1, n2 removed)", leader, err)
	}
	lose()
	if leader, err = c.TransferLeader(ctx, "n4"); err != nil || leader != "n4" {
		t.Fatalf("transfer to n4: %q %v", leader, err)
	}
	for method, want := range map[string]int{"add": 2, "promote": 2, "remove": 1} {
		if n := f.count(method); n != want {
			t.Errorf("%s sent %d times, want %d", method, n, want)
		}
	}
	if n := f.count("transfer"); n != 2 {
		t.Errorf("transfer sent %d times, want 2 (one per call)", n)
	}

	// Answered as the server answers a change already made.
	if m, err = c.AddMember(ctx, "n4", "127.0.0.1:7204", "127.0.0.1:7104"); err != nil || m.Id != "n4" {
		t.Errorf("add again: %v %v, want the member", m, err)
	}
	if _, err = c.AddMember(ctx, "n4", "127.0.0.1:9999", ""); !errors.Is(err, client.ErrAlreadyExists) {
		t.Errorf("add with another address: %v, want ErrAlreadyExists", err)
	}
	if err = c.RemoveMember(ctx, "n2", false); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("remove again: %v, want ErrNotFound (a first attempt)", err)
	}
}

// TestClusterRefusals: a refusal is final, sent once, and mapped to the
// client's error.
func TestClusterRefusals(t *testing.T) {
	for _, tc := range []struct {
		code connect.Code
		want error
	}{
		{connect.CodeFailedPrecondition, client.ErrFailedPrecondition},
		{connect.CodePermissionDenied, client.ErrPermissionDenied},
		{connect.CodeUnauthenticated, client.ErrUnauthenticated},
		{connect.CodeInvalidArgument, client.ErrInvalid},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			f := newFakeCluster()
			f.refuse = connect.NewError(tc.code, errors.New("refused: because"))
			c := clusterClient(t, serveCluster(t, f))
			err := c.RemoveMember(clusterCtx(t), "n3", false)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "refused: because") {
				t.Errorf("err %v, want %v with the server's message", err, tc.want)
			}
			if n := f.count("remove"); n != 1 {
				t.Errorf("sent %d times", n)
			}
		})
	}
}
