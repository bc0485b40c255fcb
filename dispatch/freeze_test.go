package dispatch_test

import (
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// FreezePlacement and UnfreezePlacement replicate the freeze, which
// Status and GetAssignment show; a cluster whose voters cannot apply it
// yet refuses it, and it goes through the gate as a write.
func TestFreezePlacement(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.Limits{})
	ctx := ctxT(t)
	frozen := func() (status, assignment bool) {
		st, err := ts.svc.Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		a, err := ts.svc.GetAssignment(ctx, connect.NewRequest(&xcev1.GetAssignmentRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Msg.PlacementFrozen, a.Msg.Frozen
	}
	if s, a := frozen(); s || a {
		t.Fatalf("frozen before a freeze: status %v, assignment %v", s, a)
	}
	for range 2 { // idempotent
		r, err := ts.svc.FreezePlacement(ctx, connect.NewRequest(&xcev1.FreezePlacementRequest{}))
		if err != nil || r.Msg.Index == 0 {
			t.Fatalf("freeze: %v %+v", err, r)
		}
		if !node.fsm.PlacementFrozen() {
			t.Fatal("not frozen")
		}
	}
	if s, a := frozen(); !s || !a {
		t.Fatalf("frozen: status %v, assignment %v", s, a)
	}
	if _, err := ts.svc.UnfreezePlacement(ctx, connect.NewRequest(&xcev1.UnfreezePlacementRequest{})); err != nil {
		t.Fatal(err)
	}
	if node.fsm.PlacementFrozen() {
		t.Fatal("still frozen")
	}

	applies := node.applies.Load()
	node.cluster.mu.Lock()
	node.cluster.placementClosed = errors.New("placement freezes and task weights wait until every voter applies them (log format 5): n2")
	node.cluster.mu.Unlock()
	_, err := ts.svc.FreezePlacement(ctx, connect.NewRequest(&xcev1.FreezePlacementRequest{}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "log format 5") {
		t.Fatalf("gate closed: %v", err)
	}
	if node.applies.Load() != applies || node.fsm.PlacementFrozen() {
		t.Fatal("a refused freeze changed the state")
	}

	node.setView(ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"})
	_, err = ts.svc.UnfreezePlacement(ctx, connect.NewRequest(&xcev1.UnfreezePlacementRequest{}))
	if nr := notReadyOf(t, err); nr.LeaderAddr != "127.0.0.1:7102" {
		t.Fatalf("standby: %+v", nr)
	}
}

// A submit's weight is stored and shown (1 for none); one above
// assign.MaxWeight is refused as invalid and applies nothing, and one above
// 1 waits, like a freeze, until every voter applies weights.
func TestSubmitWeight(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	for _, tc := range []struct {
		id     string
		weight uint32
		want   uint32
	}{{"none", 0, 1}, {"one", 1, 1}, {"heavy", 40, 40}, {"max", assign.MaxWeight, assign.MaxWeight}} {
		r, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: tc.id, Weight: tc.weight}))
		if err != nil {
			t.Fatalf("submit %s: %v", tc.id, err)
		}
		if r.Msg.Task.Weight != tc.want {
			t.Errorf("submit %s weight %d: answered %d, want %d", tc.id, tc.weight, r.Msg.Task.Weight, tc.want)
		}
		g, err := ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: tc.id}))
		if err != nil || g.Msg.Task.Weight != tc.want {
			t.Errorf("get %s: %v weight %d, want %d", tc.id, err, g.Msg.GetTask().GetWeight(), tc.want)
		}
	}
	applies := node.applies.Load()
	_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "huge", Weight: assign.MaxWeight + 1}))
	wantCode(t, "submit above the maximum weight", err, connect.CodeInvalidArgument)
	if want := "weight: 65537 is more than 65536"; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
	node.cluster.mu.Lock()
	node.cluster.placementClosed = errors.New("placement freezes and task weights wait until every voter applies them (log format 5): n2")
	node.cluster.mu.Unlock()
	_, err = ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "early", Weight: 2}))
	wantCode(t, "weighted submit before every voter applies weights", err, connect.CodeFailedPrecondition)
	if node.applies.Load() != applies {
		t.Error("a refused submit reached Apply")
	}
	if _, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "plain", Weight: 1})); err != nil {
		t.Fatalf("a weight of 1 needs no new log format: %v", err)
	}
}
