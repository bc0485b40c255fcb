package dispatch_test

import (
	"errors"
	"slices"
	"testing"

	"connectrpc.com/connect"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// DrainWorker and UndrainWorker replicate a drain, name the tasks the
// worker holds the only copy of, refuse a bad id and a cluster whose voters
// cannot apply drains yet, and go through the gate as writes.
func TestDrainWorker(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.Limits{})
	ctx := ctxT(t)
	node.seed(t, "a")
	node.seed(t, "b")
	node.seed(t, "c")
	d := state.AssignmentDelta{Base: 0, Generation: 1, Set: []state.Placement{
		{Task: "a", Active: "w1"},
		{Task: "b", Active: "w1", Standbys: []string{"w2"}},
		{Task: "c", Active: "w2", Warmups: []string{"w1"}},
	}}
	if _, err := node.Apply(ctx, (&state.Command{Type: state.CmdSetAssignment, Assign: d}).Encode()); err != nil {
		t.Fatal(err)
	}

	r, err := ts.svc.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: "w1"}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Msg.OnlyCopy, []string{"a"}) || r.Msg.Index == 0 || r.Msg.Connected {
		t.Fatalf("drain: %+v", r.Msg)
	}
	if !node.fsm.IsDrained("w1") {
		t.Fatal("w1 not drained")
	}
	// Again: the same answer, the same state.
	if _, err := ts.svc.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: "w1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.svc.UndrainWorker(ctx, connect.NewRequest(&xcev1.UndrainWorkerRequest{WorkerId: "w1"})); err != nil {
		t.Fatal(err)
	}
	if node.fsm.IsDrained("w1") {
		t.Fatal("w1 still drained")
	}

	applies := node.applies.Load()
	_, err = ts.svc.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: "w 1"}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad id: %v", err)
	}
	node.cluster.mu.Lock()
	node.cluster.drainsClosed = errors.New("worker drains wait until every voter applies them (log format 4): n2")
	node.cluster.mu.Unlock()
	_, err = ts.svc.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: "w1"}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("gate closed: %v", err)
	}
	if node.applies.Load() != applies || node.fsm.IsDrained("w1") {
		t.Fatal("a refused drain changed the state")
	}

	// A STANDBY refuses it with the primary's address: it is a write.
	node.setView(ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"})
	_, err = ts.svc.UndrainWorker(ctx, connect.NewRequest(&xcev1.UndrainWorkerRequest{WorkerId: "w1"}))
	if nr := notReadyOf(t, err); nr.LeaderAddr != "127.0.0.1:7102" {
		t.Fatalf("standby: %+v", nr)
	}
}
