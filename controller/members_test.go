package controller

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/autopilot"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/state"
)

// memberBackend is an election backend with a configuration: it applies
// commands to the node's FSM and records membership changes.
type memberBackend struct {
	fsm *state.FSM

	mu      sync.Mutex
	members []ha.Member
	pending bool
	last    uint64
	index   uint64
	calls   []string
}

func (b *memberBackend) Signals() <-chan ha.Signal          { return nil }
func (b *memberBackend) View() ha.Observed                  { return ha.Observed{} }
func (b *memberBackend) CommitIndex() uint64                { return b.LastIndex() }
func (b *memberBackend) AppliedIndex() uint64               { return b.LastIndex() }
func (b *memberBackend) Barrier(context.Context) error      { return nil }
func (b *memberBackend) VerifyLeader(context.Context) error { return nil }
func (b *memberBackend) TransferLeadership() error          { return nil }
func (b *memberBackend) Shutdown() error                    { return nil }

func (b *memberBackend) Apply(_ context.Context, cmd []byte) (any, uint64, error) {
	b.mu.Lock()
	b.last++
	i := b.last
	b.calls = append(b.calls, "apply")
	b.mu.Unlock()
	return b.fsm.Apply(i, 1, cmd), i, nil
}

func (b *memberBackend) Members() ([]ha.Member, uint64, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.members), b.index, b.pending, nil
}

func (b *memberBackend) LastIndex() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

func (b *memberBackend) change(call string, f func()) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, call)
	b.index++
	f()
	return nil
}

func (b *memberBackend) AddNonvoter(_ context.Context, id, addr string) error {
	return b.change("add "+id, func() { b.members = append(b.members, ha.Member{ID: id, PeerAddr: addr, LastContact: -1}) })
}

func (b *memberBackend) Promote(_ context.Context, id string) error {
	return b.change("promote "+id, func() {
		for i := range b.members {
			if b.members[i].ID == id {
				b.members[i].Voter = true
			}
		}
	})
}

func (b *memberBackend) Remove(_ context.Context, id string) error {
	return b.change("remove "+id, func() {
		b.members = slices.DeleteFunc(b.members, func(m ha.Member) bool { return m.ID == id })
	})
}

func (b *memberBackend) TransferTo(context.Context, string) error {
	return b.change("transfer", func() {})
}

func (b *memberBackend) changes() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// withMembers gives n a backend whose configuration is its config peers,
// all voters.
func withMembers(n *Node) *memberBackend {
	b := &memberBackend{fsm: n.fsm, last: 100}
	for _, p := range n.cfg.Peers {
		b.members = append(b.members, ha.Member{ID: p.ID, PeerAddr: p.PeerAddr, Voter: true, LastContact: -1})
	}
	n.backend.Store(&backendBox{b})
	return b
}

// The autopilot's inputs: lag behind the leader's last index, the leader
// itself never behind nor out of contact.
func TestAutopilotServers(t *testing.T) {
	got := autopilotServers("n1", []ha.Member{
		{ID: "n1", Voter: true, LastContact: -1, MatchIndex: 0},
		{ID: "n2", Voter: true, LastContact: 5 * time.Millisecond, MatchIndex: 90},
		{ID: "n3", LastContact: -1, MatchIndex: 0},
		{ID: "n4", LastContact: time.Millisecond, MatchIndex: 120}, // ahead of a stale read of the last index
	}, 100)
	want := []autopilot.Server{
		{ID: "n1", Voter: true, Leader: true},
		{ID: "n2", Voter: true, LastContact: 5 * time.Millisecond, Lag: 10},
		{ID: "n3", LastContact: -1, Lag: 100},
		{ID: "n4", LastContact: time.Millisecond},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("servers\n got %+v\nwant %+v", got, want)
	}
}

// scripted is a decision function that answers the decisions given, in
// order, then no action.
type scripted struct {
	decisions []autopilot.Decision
	inputs    [][]autopilot.Server
	forgot    []string
}

func (s *scripted) Forget(id string) { s.forgot = append(s.forgot, id) }

func (s *scripted) Step(servers []autopilot.Server, _ bool, _ time.Time) autopilot.Decision {
	s.inputs = append(s.inputs, servers)
	if len(s.decisions) == 0 {
		return autopilot.Decision{}
	}
	d := s.decisions[0]
	s.decisions = s.decisions[1:]
	return d
}

// Each tick performs the one action decided and keeps the decision for
// the API; with nothing to do, it records the bootstrap peers' client
// addresses once member records are allowed.
func TestAutopilotStep(t *testing.T) {
	n := gateNode(t, "127.0.0.1:8002", "127.0.0.1:8003")
	b := withMembers(n)
	b.members = append(b.members, ha.Member{ID: "n4", PeerAddr: "127.0.0.1:9004"})
	a := &autopilotService{n: n, absent: map[string]time.Time{}}
	pilot := &scripted{decisions: []autopilot.Decision{
		{States: []autopilot.ServerState{{ID: "n4", Healthy: true, State: "promoting"}}, Action: &autopilot.Action{Kind: autopilot.Promote, ID: "n4", Reason: "caught up"}},
		{Action: &autopilot.Action{Kind: autopilot.Remove, ID: "n3", Reason: "dead"}},
	}}
	ctx := context.Background()
	now := time.Now()

	a.step(ctx, b, pilot, now)
	if c := b.changes(); !slices.Equal(c, []string{"promote n4"}) {
		t.Fatalf("after a promotion: %v", c)
	}
	if h, st, ok := n.MemberHealth("n4"); !ok || !h || st != "promoting" {
		t.Fatalf("n4's health: %v %q %v", h, st, ok)
	}
	// Member records are off (a voter not asked yet): the removal goes
	// through, its record waits.
	a.step(ctx, b, pilot, now)
	if c := b.changes(); !slices.Equal(c, []string{"promote n4", "remove n3"}) {
		t.Fatalf("after a removal: %v", c)
	}
	a.step(ctx, b, pilot, now)
	if c := b.changes(); len(c) != 2 {
		t.Fatalf("nothing to do with records off, yet: %v", c)
	}
	n.members.cmds.Store(nil)
	a.step(ctx, b, pilot, now)
	// n1 and n2 are bootstrap peers still in the configuration (n3 was
	// removed): one record each.
	if c := b.changes(); !slices.Equal(c[2:], []string{"apply", "apply"}) {
		t.Fatalf("reconciliation: %v", c)
	}
	if in := pilot.inputs[0]; len(in) != 4 || !in[0].Leader || in[3].Lag != 100 {
		t.Fatalf("inputs %+v", in)
	}

	// A removal through the API reaches the autopilot at its next step,
	// so that the id, added again, is stabilized afresh.
	m, err := n.Membership()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	if len(pilot.forgot) != 0 {
		t.Fatalf("forgot %v before the step", pilot.forgot)
	}
	a.step(ctx, b, pilot, now)
	if !slices.Equal(pilot.forgot, []string{"n4"}) {
		t.Fatalf("forgot %v, want [n4]", pilot.forgot)
	}
}

// The member gate opens once every voter reports log format 3, the drain
// gate once every voter reports 4, the placement gate (freezes, weighted
// submits) once every voter reports 5, the worker address gate once every
// voter reports 6.
func TestFormatGates(t *testing.T) {
	a, old := startFakePeer(t, state.LogFormatWorkerAddrs), startFakePeer(t, 2)
	n := gateNode(t, a.addr(), old.addr())
	withMembers(n)
	n.drains.Store(&drainGateClosed)
	n.placement.Store(&placementGateClosed)
	n.workerAddrs.Store(&workerAddrsGateClosed)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.runFormatGates(ctx,
			formatGate{format: state.LogFormatMembers, what: "member records", open: &n.members.cmds},
			formatGate{format: state.LogFormatDrain, what: "worker drains", open: &n.drains},
			formatGate{format: state.LogFormatPlacement, what: "placement freezes and task weights", open: &n.placement},
			formatGate{format: state.LogFormatWorkerAddrs, what: "worker addresses", open: &n.workerAddrs})
	}()
	t.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(t, 5*time.Second, "the old voter named", func() bool {
		err := n.MembersWritable()
		return err != nil && strings.Contains(err.Error(), old.addr()+" (log format 2")
	})
	if n.DrainsWritable() == nil {
		t.Fatal("drains writable while a voter is on log format 2")
	}
	old.format.Store(state.LogFormatMembers)
	testutil.Eventually(t, 5*batchGatePoll, "member records on, drains named the old voter", func() bool {
		err := n.DrainsWritable()
		return n.MembersWritable() == nil && err != nil && strings.Contains(err.Error(), old.addr()+" (log format 3")
	})
	old.format.Store(state.LogFormatDrain)
	testutil.Eventually(t, 5*batchGatePoll, "drains on, placement commands named the old voter", func() bool {
		err := n.PlacementWritable()
		return n.DrainsWritable() == nil && err != nil && strings.Contains(err.Error(), old.addr()+" (log format 4")
	})
	old.format.Store(state.LogFormatPlacement)
	testutil.Eventually(t, 5*batchGatePoll, "placement commands on, worker addresses named the old voter", func() bool {
		err := n.WorkerAddrsWritable()
		return n.PlacementWritable() == nil && err != nil && strings.Contains(err.Error(), old.addr()+" (log format 5")
	})
	old.format.Store(state.LogFormatWorkerAddrs)
	waitDone(t, done, 5*batchGatePoll, "every voter on log format 6")
	if err := n.WorkerAddrsWritable(); err != nil {
		t.Fatal(err)
	}
}

// joinServer answers Join: first NOT_READY pointing at the primary (when
// primary is set), or adds the node to b.
type joinServer struct {
	xcev1connect.UnimplementedClusterServiceHandler
	b       *memberBackend
	primary string
	calls   atomic.Int32
	srv     *httptest.Server
}

func (s *joinServer) Join(_ context.Context, req *connect.Request[xcev1.JoinRequest]) (*connect.Response[xcev1.JoinResponse], error) {
	s.calls.Add(1)
	if s.primary != "" {
		err := connect.NewError(connect.CodeUnavailable, errors.New("not ready: standby"))
		d, _ := connect.NewErrorDetail(&xcev1.NotReady{Role: xcev1.Role_ROLE_STANDBY, LeaderId: "n2", LeaderAddr: s.primary})
		err.AddDetail(d)
		return nil, err
	}
	m := req.Msg
	if m.ClusterId != "t" || m.Id != "n1" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("unexpected join"))
	}
	_ = s.b.AddNonvoter(context.Background(), m.Id, m.PeerAddr)
	return connect.NewResponse(&xcev1.JoinResponse{Member: &xcev1.Member{Id: m.Id, PeerAddr: m.PeerAddr}}), nil
}

func startJoinServer(t *testing.T, s *joinServer) string {
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewClusterServiceHandler(s))
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return strings.TrimPrefix(s.srv.URL, "http://")
}

// The join loop follows a standby's hint to the primary and stops once
// the node is in the configuration it follows.
func TestJoinLoop(t *testing.T) {
	n := gateNode(t)
	b := &memberBackend{fsm: n.fsm}
	n.backend.Store(&backendBox{b})
	primary := &joinServer{b: b}
	paddr := startJoinServer(t, primary)
	standby := &joinServer{primary: paddr}
	saddr := startJoinServer(t, standby)

	done := make(chan struct{})
	go func() { defer close(done); n.runJoin(context.Background(), []string{saddr}) }()
	waitDone(t, done, 10*time.Second, "joined")
	if !n.inConfiguration() || primary.calls.Load() != 1 || standby.calls.Load() != 1 {
		t.Fatalf("in configuration %v; calls: primary %d, standby %d", n.inConfiguration(), primary.calls.Load(), standby.calls.Load())
	}
}

// The join loop ends when the node stops.
func TestJoinLoopStops(t *testing.T) {
	n := gateNode(t)
	n.backend.Store(&backendBox{&memberBackend{fsm: n.fsm}})
	done := make(chan struct{})
	n.stopper.GoCtx(func(ctx context.Context) { defer close(done); n.runJoin(ctx, []string{freeAddr(t)}) })
	n.stopper.Begin()
	waitDone(t, done, 5*time.Second, "stopped")
	n.stopper.Stop()
}
