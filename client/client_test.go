package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fakeNode serves the ControllerService and WorkerService methods the
// client's worker calls use, on the real netio server. While notReady is
// set it refuses every call with that NOT_READY detail, as the gate does;
// otherwise it answers like a primary.
type fakeNode struct {
	xcev1connect.UnimplementedControllerServiceHandler
	xcev1connect.UnimplementedWorkerServiceHandler

	addr string

	mu       sync.Mutex
	notReady *xcev1.NotReady
	// refuse, when > 0, is how many more calls get notReady before the
	// node serves.
	refuse     int
	sessions   map[string]bool
	lastHB     *xcev1.HeartbeatRequest
	lastStale  xcev1.Consistency
	hang       bool
	calls      atomic.Int64
	heartbeats atomic.Int64
}

func (n *fakeNode) setNotReady(nr *xcev1.NotReady, count int) {
	n.mu.Lock()
	n.notReady, n.refuse = nr, count
	n.mu.Unlock()
}

// gate counts the call and refuses it when the node is not ready.
func (n *fakeNode) gate(ctx context.Context) error {
	n.calls.Add(1)
	n.mu.Lock()
	nr, hang := n.notReady, n.hang
	if nr != nil && n.refuse > 0 {
		n.refuse--
		if n.refuse == 0 {
			n.notReady = nil
		}
	}
	n.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if nr == nil {
		return nil
	}
	e := connect.NewError(connect.CodeUnavailable, errors.New(nr.Reason))
	d, err := connect.NewErrorDetail(nr)
	if err != nil {
		return err
	}
	e.AddDetail(d)
	return e
}

func (n *fakeNode) Register(ctx context.Context, req *connect.Request[xcev1.RegisterRequest]) (*connect.Response[xcev1.RegisterResponse], error) {
	if err := n.gate(ctx); err != nil {
		return nil, err
	}
	if req.Msg.WorkerId == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("worker_id: empty"))
	}
	n.mu.Lock()
	n.sessions[req.Msg.WorkerId] = true
	n.mu.Unlock()
	return connect.NewResponse(&xcev1.RegisterResponse{Generation: 3, SessionTimeoutMs: 10000, HeartbeatIntervalMs: 1000}), nil
}

func (n *fakeNode) Heartbeat(ctx context.Context, req *connect.Request[xcev1.HeartbeatRequest]) (*connect.Response[xcev1.HeartbeatResponse], error) {
	if err := n.gate(ctx); err != nil {
		return nil, err
	}
	n.heartbeats.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.sessions[req.Msg.WorkerId] {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("unknown worker: register again"))
	}
	n.lastHB = req.Msg
	return connect.NewResponse(&xcev1.HeartbeatResponse{Generation: 3, Actives: []string{"t1"}, Warmups: []string{"t2"}, HeartbeatIntervalMs: 1000}), nil
}

func (n *fakeNode) ListWorkers(ctx context.Context, _ *connect.Request[xcev1.ListWorkersRequest]) (*connect.Response[xcev1.ListWorkersResponse], error) {
	if err := n.gate(ctx); err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.ListWorkersResponse{Generation: 3, Settling: true,
		Workers: []*xcev1.WorkerInfo{{WorkerId: "w1", Capacity: 2, Actives: []string{"t1"}}}}), nil
}

func (n *fakeNode) GetAssignment(ctx context.Context, req *connect.Request[xcev1.GetAssignmentRequest]) (*connect.Response[xcev1.GetAssignmentResponse], error) {
	n.mu.Lock()
	n.lastStale = req.Msg.Consistency
	nr := n.notReady
	n.mu.Unlock()
	// A standby serves stale reads, as the gate does.
	if nr == nil || req.Msg.Consistency != xcev1.Consistency_CONSISTENCY_STALE || nr.Role != xcev1.Role_ROLE_STANDBY {
		if err := n.gate(ctx); err != nil {
			return nil, err
		}
	} else {
		n.calls.Add(1)
	}
	return connect.NewResponse(&xcev1.GetAssignmentResponse{Generation: 3, AppliedIndex: 9,
		Tasks: []*xcev1.TaskAssignment{{Placement: &xcev1.TaskPlacement{TaskId: "t1", Active: "w1"}, Stateful: true}}}), nil
}

// startNode serves a fakeNode on a 127.0.0.1 port.
func startNode(t *testing.T) *fakeNode {
	t.Helper()
	n := &fakeNode{sessions: map[string]bool{}}
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(n))
	mux.Handle(xcev1connect.NewWorkerServiceHandler(n))
	n.addr = serve(t, mux)
	return n
}

// serve serves mux on a 127.0.0.1 port until the test ends and returns
// the address.
func serve(t *testing.T, mux http.Handler) string {
	t.Helper()
	srv := netio.NewServer(mux, netio.DefaultLimits())
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func standbyOf(leader *fakeNode) *xcev1.NotReady {
	return &xcev1.NotReady{Role: xcev1.Role_ROLE_STANDBY, Term: 4, LeaderId: "n2", LeaderAddr: leader.addr,
		Reason: "standby: primary is n2", RetryAfterMs: 100}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T, eps []string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(eps, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestWorkerCallsFollowTheLeader: Register and Heartbeat sent to a standby
// follow its hint to the primary, and the client stays there.
func TestWorkerCallsFollowTheLeader(t *testing.T) {
	ctx := ctxT(t)
	leader, standby := startNode(t), startNode(t)
	standby.setNotReady(standbyOf(leader), 1<<30)
	var retries atomic.Int64
	c := newClient(t, []string{standby.addr}, client.Options{OnRetry: func(nr *xcev1.NotReady, err error) {
		if nr == nil || nr.LeaderAddr != leader.addr {
			t.Errorf("retry on %v %v", nr, err)
		}
		retries.Add(1)
	}})
	r, err := c.Register(ctx, "w1", 2, "127.0.0.1:9000")
	if err != nil || r.Generation != 3 || r.HeartbeatIntervalMs != 1000 || r.SessionTimeoutMs != 10000 {
		t.Fatalf("register: %v %v", r, err)
	}
	if retries.Load() != 1 || standby.calls.Load() != 1 {
		t.Errorf("retries %d, standby calls %d; want 1 and 1", retries.Load(), standby.calls.Load())
	}
	hb, err := c.Heartbeat(ctx, &xcev1.HeartbeatRequest{WorkerId: "w1", Lags: map[string]int64{"t1": 0, "t2": 700},
		Facts: []*xcev1.Fact{{Kind: xcev1.FactKind_FACT_KIND_UPDATE, TaskId: "t1", Text: "running"}}})
	if err != nil || hb.Generation != 3 || len(hb.Actives) != 1 || hb.Actives[0] != "t1" || len(hb.Warmups) != 1 {
		t.Fatalf("heartbeat: %v %v", hb, err)
	}
	if standby.calls.Load() != 1 {
		t.Errorf("the heartbeat went to the standby again (%d calls)", standby.calls.Load())
	}
	leader.mu.Lock()
	got := leader.lastHB
	leader.mu.Unlock()
	if got.GetLags()["t2"] != 700 || len(got.GetFacts()) != 1 || got.Facts[0].Text != "running" {
		t.Errorf("the leader got %v", got)
	}
}

// TestHeartbeatUnknownWorker: FAILED_PRECONDITION is ErrUnknownWorker at
// once, not retried; after Register the heartbeat goes through.
func TestHeartbeatUnknownWorker(t *testing.T) {
	ctx := ctxT(t)
	n := startNode(t)
	c := newClient(t, []string{n.addr}, client.Options{})
	_, err := c.Heartbeat(ctx, &xcev1.HeartbeatRequest{WorkerId: "w9"})
	if !errors.Is(err, client.ErrUnknownWorker) {
		t.Fatalf("heartbeat without a session: %v, want ErrUnknownWorker", err)
	}
	if n.heartbeats.Load() != 1 {
		t.Errorf("%d heartbeats reached the node, want 1 (no retry)", n.heartbeats.Load())
	}
	if _, err := c.Register(ctx, "w9", 1, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Heartbeat(ctx, &xcev1.HeartbeatRequest{WorkerId: "w9"}); err != nil {
		t.Fatalf("heartbeat after register: %v", err)
	}
	if _, err := c.Register(ctx, "", 1, ""); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("register without id: %v, want ErrInvalid", err)
	}
}

// TestWorkerCallsRetryAfter: a node that is electing is retried after its
// retry-after until it serves.
func TestWorkerCallsRetryAfter(t *testing.T) {
	ctx := ctxT(t)
	n := startNode(t)
	n.setNotReady(&xcev1.NotReady{Role: xcev1.Role_ROLE_ELECTING, Term: 2, Reason: "electing", RetryAfterMs: 30}, 3)
	var retries atomic.Int64
	c := newClient(t, []string{n.addr}, client.Options{OnRetry: func(*xcev1.NotReady, error) { retries.Add(1) }})
	start := time.Now()
	if _, err := c.Register(ctx, "w1", 1, ""); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 90*time.Millisecond {
		t.Errorf("three refusals with retry-after 30ms took only %v", took)
	}
	if retries.Load() != 3 || n.calls.Load() != 4 {
		t.Errorf("retries %d, calls %d; want 3 and 4", retries.Load(), n.calls.Load())
	}
}

// TestWorkerCallsNotReadyAtDeadline: with no primary anywhere, Heartbeat
// gives up at the caller's deadline with a NotReadyError carrying the last
// detail; hints that point at each other are followed at most three hops
// in a row before the client backs off.
func TestWorkerCallsNotReadyAtDeadline(t *testing.T) {
	ctx := ctxT(t)
	a, b := startNode(t), startNode(t)
	// Each claims the other is the primary (a stale hint mid-election).
	a.setNotReady(&xcev1.NotReady{Role: xcev1.Role_ROLE_STANDBY, Term: 7, LeaderAddr: b.addr, Reason: "standby of b", RetryAfterMs: 100}, 1<<30)
	b.setNotReady(&xcev1.NotReady{Role: xcev1.Role_ROLE_STANDBY, Term: 7, LeaderAddr: a.addr, Reason: "standby of a", RetryAfterMs: 100}, 1<<30)
	c := newClient(t, []string{a.addr, b.addr}, client.Options{})
	cctx, cancel := context.WithTimeout(ctx, 350*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Heartbeat(cctx, &xcev1.HeartbeatRequest{WorkerId: "w1"})
	took := time.Since(start)
	if !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("err %v, want ErrNotReady", err)
	}
	var nre *client.NotReadyError
	if !errors.As(err, &nre) || nre.Last == nil || nre.Last.Term != 7 {
		t.Fatalf("err %#v: %v", err, err)
	}
	// Three hops then a 100ms+ wait: about 4 calls per 100ms, never a spin.
	if calls := a.calls.Load() + b.calls.Load(); calls > 24 {
		t.Errorf("%d calls in %v: the client spins between hints", calls, took)
	}
	if took > 2*time.Second {
		t.Errorf("client took %v with a 350ms deadline", took)
	}
}

// TestWorkerCallsAttemptTimeout: a node that hangs costs one attempt
// timeout; the client moves to the next endpoint.
func TestWorkerCallsAttemptTimeout(t *testing.T) {
	ctx := ctxT(t)
	hung, live := startNode(t), startNode(t)
	hung.mu.Lock()
	hung.hang = true
	hung.mu.Unlock()
	c := newClient(t, []string{hung.addr, live.addr}, client.Options{AttemptTimeout: 100 * time.Millisecond})
	start := time.Now()
	if _, err := c.Register(ctx, "w1", 1, ""); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("register took %v past a hung node with a 100ms attempt timeout", took)
	}
	if hung.calls.Load() != 1 || live.calls.Load() != 1 {
		t.Errorf("calls: hung %d, live %d; want 1 and 1", hung.calls.Load(), live.calls.Load())
	}

	// A refusal is an answer too: after a hung node and an "unknown
	// worker" from the live one, registering again goes straight there.
	c2 := newClient(t, []string{hung.addr, live.addr}, client.Options{AttemptTimeout: 100 * time.Millisecond})
	if _, err := c2.Heartbeat(ctx, &xcev1.HeartbeatRequest{WorkerId: "w2"}); !errors.Is(err, client.ErrUnknownWorker) {
		t.Fatalf("heartbeat: %v, want ErrUnknownWorker", err)
	}
	if _, err := c2.Register(ctx, "w2", 1, ""); err != nil {
		t.Fatal(err)
	}
	if hung.calls.Load() != 2 || live.calls.Load() != 3 {
		t.Errorf("calls: hung %d, live %d; want 2 and 3", hung.calls.Load(), live.calls.Load())
	}
}

// TestListWorkersAndAssignment: ListWorkers follows the leader; a stale
// GetAssignment is served by the standby itself, a linearizable one by the
// leader.
func TestListWorkersAndAssignment(t *testing.T) {
	ctx := ctxT(t)
	leader, standby := startNode(t), startNode(t)
	standby.setNotReady(standbyOf(leader), 1<<30)

	c := newClient(t, []string{standby.addr}, client.Options{})
	stale, err := c.GetAssignment(ctx, true)
	if err != nil || stale.Generation != 3 || len(stale.Tasks) != 1 || stale.Tasks[0].Placement.Active != "w1" {
		t.Fatalf("stale assignment: %v %v", stale, err)
	}
	standby.mu.Lock()
	cons := standby.lastStale
	standby.mu.Unlock()
	if cons != xcev1.Consistency_CONSISTENCY_STALE || leader.calls.Load() != 0 {
		t.Errorf("stale read: standby saw %s, leader calls %d", cons, leader.calls.Load())
	}

	lin, err := c.GetAssignment(ctx, false)
	if err != nil || lin.AppliedIndex != 9 {
		t.Fatalf("assignment: %v %v", lin, err)
	}
	leader.mu.Lock()
	cons = leader.lastStale
	leader.mu.Unlock()
	if cons != xcev1.Consistency_CONSISTENCY_LINEARIZABLE {
		t.Errorf("linearizable read reached the leader as %s", cons)
	}

	c2 := newClient(t, []string{standby.addr}, client.Options{})
	ws, err := c2.ListWorkers(ctx)
	if err != nil || !ws.Settling || len(ws.Workers) != 1 || ws.Workers[0].WorkerId != "w1" {
		t.Fatalf("list workers: %v %v", ws, err)
	}
	if leader.calls.Load() != 2 {
		t.Errorf("leader calls %d, want 2", leader.calls.Load())
	}
}

// TestNoRetryReportedWhenCallerGivesUp: a call cut off by its caller's
// deadline returns ErrNotReady and reports no retry, since none follows.
func TestNoRetryReportedWhenCallerGivesUp(t *testing.T) {
	ctx := ctxT(t)
	hung := startNode(t)
	hung.mu.Lock()
	hung.hang = true
	hung.mu.Unlock()
	var retries atomic.Int64
	c := newClient(t, []string{hung.addr}, client.Options{OnRetry: func(*xcev1.NotReady, error) { retries.Add(1) }})
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Register(cctx, "w1", 1, ""); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("register: %v, want ErrNotReady", err)
	}
	if n := retries.Load(); n != 0 {
		t.Errorf("%d retries reported for a call its caller gave up on", n)
	}
	if hung.calls.Load() != 1 {
		t.Errorf("%d calls, want 1", hung.calls.Load())
	}
}

// A cleartext call to a port that speaks TLS is answered 400 Bad Request by
// the TLS server; the client says what happened instead of "internal".
func TestPlaintextToTLSPort(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	c, err := client.New([]string{srv.Listener.Addr().String()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Status(ctx, srv.Listener.Addr().String()); !errors.Is(err, client.ErrPlaintextToTLS) {
		t.Errorf("Status: %v, want ErrPlaintextToTLS", err)
	}
	if _, err := c.List(ctx, false); !errors.Is(err, client.ErrPlaintextToTLS) {
		t.Errorf("List: %v, want ErrPlaintextToTLS", err)
	}
}
