package controller

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/state"
)

// fakePeer answers Status with its current log format.
type fakePeer struct {
	xcev1connect.UnimplementedControllerServiceHandler
	format atomic.Uint32
	srv    *httptest.Server
}

func (p *fakePeer) Status(context.Context, *connect.Request[xcev1.StatusRequest]) (*connect.Response[xcev1.StatusResponse], error) {
	return connect.NewResponse(&xcev1.StatusResponse{NodeId: "peer", LogFormat: p.format.Load(), Version: "test"}), nil
}

func startFakePeer(t *testing.T, format uint32) *fakePeer {
	p := &fakePeer{}
	p.format.Store(format)
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(p))
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakePeer) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

// switchRecorder records SetBatches calls.
type switchRecorder struct {
	mu sync.Mutex
	on []bool
}

func (s *switchRecorder) SetBatches(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.on = append(s.on, on)
}

func (s *switchRecorder) calls() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.on...)
}

// gateNode is a node of a three-voter cluster whose peers are at addrs.
func gateNode(t *testing.T, addrs ...string) *Node {
	t.Helper()
	cfg := configs.Default()
	cfg.NodeID, cfg.ClusterID, cfg.DataDir = "n1", "t", t.TempDir()
	cfg.ClientAddr, cfg.PeerAddr = "127.0.0.1:1", "127.0.0.1:2"
	cfg.Peers = []configs.Peer{{ID: "n1", PeerAddr: "127.0.0.1:2", ClientAddr: "127.0.0.1:1"}}
	for i, a := range addrs {
		cfg.Peers = append(cfg.Peers, configs.Peer{ID: fmt.Sprintf("n%d", i+2), PeerAddr: fmt.Sprintf("127.0.0.1:%d", 3+i), ClientAddr: a})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	n, err := New(Options{Config: &cfg, Logger: zerolog.New(zerolog.NewTestWriter(t)), Election: noElection})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runGate runs the gate until it returns or the test ends.
func runGate(t *testing.T, n *Node, sw *switchRecorder) (cancel func(), done <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	d := make(chan struct{})
	go func() {
		defer close(d)
		n.runBatchGate(ctx, sw)
	}()
	t.Cleanup(func() { cancel(); <-d })
	return cancel, d
}

func waitDone(t *testing.T, done <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("gate did not return: %s", what)
	}
}

// Every voter on log format 2: batches go on at once.
func TestBatchGateOpensWhenEveryVoterApplies(t *testing.T) {
	a, b := startFakePeer(t, 2), startFakePeer(t, 3)
	sw := &switchRecorder{}
	_, done := runGate(t, gateNode(t, a.addr(), b.addr()), sw)
	waitDone(t, done, 5*time.Second, "every voter answered 2 or more")
	if got := sw.calls(); len(got) != 1 || !got[0] {
		t.Fatalf("SetBatches calls %v, want [true]", got)
	}
}

// A voter on an older binary (log format 0: it predates the field) keeps
// batches off until it reports 2, as after its upgrade.
func TestBatchGateWaitsForAnOldVoter(t *testing.T) {
	a, old := startFakePeer(t, 2), startFakePeer(t, 0)
	sw := &switchRecorder{}
	_, done := runGate(t, gateNode(t, a.addr(), old.addr()), sw)
	select {
	case <-done:
		t.Fatalf("gate returned with an old voter; SetBatches calls %v", sw.calls())
	case <-time.After(2 * batchGatePoll):
	}
	if got := sw.calls(); len(got) != 0 {
		t.Fatalf("SetBatches calls %v with an old voter", got)
	}
	old.format.Store(2)
	waitDone(t, done, 5*batchGatePoll, "after the old voter's upgrade")
	if got := sw.calls(); len(got) != 1 || !got[0] {
		t.Fatalf("SetBatches calls %v, want [true]", got)
	}
}

// A voter that does not answer holds the gate until this node has applied
// a batch entry; ending the term stops the gate with batches off.
func TestBatchGateSilentVoter(t *testing.T) {
	a, gone := startFakePeer(t, 2), startFakePeer(t, 2)
	addr := gone.addr()
	gone.srv.Close()
	n := gateNode(t, a.addr(), addr)
	sw := &switchRecorder{}
	cancel, done := runGate(t, n, sw)
	select {
	case <-done:
		t.Fatalf("gate returned with a silent voter; SetBatches calls %v", sw.calls())
	case <-time.After(2 * batchGatePoll):
	}
	cancel()
	waitDone(t, done, 5*time.Second, "after the term ended")
	if got := sw.calls(); len(got) != 0 {
		t.Fatalf("SetBatches calls %v with a silent voter", got)
	}

	batch := (&state.Command{Type: state.CmdBatch, Batch: []state.Command{
		{Type: state.CmdSubmitTask, Task: state.Task{ID: "a"}},
		{Type: state.CmdSubmitTask, Task: state.Task{ID: "b"}},
	}}).Encode()
	n.fsm.Apply(1, 1, batch)
	_, done = runGate(t, n, sw)
	waitDone(t, done, 5*batchGatePoll, "silent voter, log holding a batch entry")
	if got := sw.calls(); len(got) != 1 || !got[0] {
		t.Fatalf("SetBatches calls %v, want [true]", got)
	}
}
