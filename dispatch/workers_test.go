package dispatch_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/client/transport"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/placement"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/state"
)

// A heartbeat's answer over the wire: the running report reaches the
// placement service, and the answer carries granted and pending actives,
// epochs and the active lease.
func TestHeartbeatCarriesGrants(t *testing.T) {
	node := newFakeNode("n1", primary)
	node.seed(t, "t0")
	node.seed(t, "t1")
	c := state.Command{Type: state.CmdSetAssignment, Assign: state.AssignmentDelta{Base: 0, Generation: 1, Set: []state.Placement{
		{Task: "t0", Active: "w1"}, {Task: "t1", Active: "w1"},
	}}}
	if r, err := node.Apply(ctxT(t), c.Encode()); err != nil || r.Code != state.CodeOK {
		t.Fatalf("assignment: %+v %v", r, err)
	}
	cfg := node.Config().AssignorConfig()
	svc, err := placement.New(cfg, node.FSM(), node.Apply, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	// A new primary (the assignment predates it): only what w1 reports
	// running is granted at once.
	if err := svc.Start(1); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(runCtx, 1) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("placement Run: %v", err)
		}
	})
	path, h := dispatch.New(node, prometheus.NewRegistry(), svc)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	addr := serve(t, mux)
	tr := transport.New()
	t.Cleanup(tr.CloseIdleConnections)
	w := xcev1connect.NewWorkerServiceClient(&http.Client{Transport: tr}, "http://"+addr)
	ctx := ctxT(t)
	if _, err := w.Register(ctx, connect.NewRequest(&xcev1.RegisterRequest{WorkerId: "w1", Capacity: 1})); err != nil {
		t.Fatal(err)
	}
	resp, err := w.Heartbeat(ctx, connect.NewRequest(&xcev1.HeartbeatRequest{WorkerId: "w1", Running: []string{"t0"}}))
	if err != nil {
		t.Fatal(err)
	}
	m := resp.Msg
	lease := cfg.SessionTimeout - cfg.SessionTimeout/5
	if !slices.Equal(m.Actives, []string{"t0"}) || !slices.Equal(m.PendingActives, []string{"t1"}) ||
		m.ActiveLeaseMs != uint32(lease.Milliseconds()) || len(m.Epochs) != 2 {
		t.Fatalf("answer %+v; want t0 granted, t1 pending, epochs of both, lease %s", m, lease)
	}
	_, err = w.Heartbeat(ctx, connect.NewRequest(&xcev1.HeartbeatRequest{WorkerId: "w1", Running: []string{"bad id"}}))
	wantCode(t, "bad running task id", err, connect.CodeInvalidArgument)
}
