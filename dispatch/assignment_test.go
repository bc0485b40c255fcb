package dispatch_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// GetAssignment gives every task its epoch: a placed task's from its
// placement, a task whose placement was removed the epoch it kept, a task
// never given an active worker 0.
func TestGetAssignmentEpochs(t *testing.T) {
	n := newFakeNode("n1", primary)
	for _, id := range []string{"a", "b", "c", "d"} {
		n.seed(t, id)
	}
	deltas := []state.AssignmentDelta{
		{Set: []state.Placement{{Task: "a", Active: "w1"}, {Task: "b", Active: "w1"}, {Task: "c", Warmups: []string{"w2"}}}},
		{Set: []state.Placement{{Task: "a", Active: "w2", Standbys: []string{"w1"}}}, Removed: []string{"b"}},
	}
	applyDeltas(t, n, deltas)
	ts := startServer(t, n, netio.Limits{})
	for _, c := range []xcev1.Consistency{xcev1.Consistency_CONSISTENCY_UNSPECIFIED, xcev1.Consistency_CONSISTENCY_STALE} {
		r, err := ts.svc.GetAssignment(ctxT(t), connect.NewRequest(&xcev1.GetAssignmentRequest{Consistency: c}))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]uint64{}
		for _, ta := range r.Msg.Tasks {
			got[ta.GetPlacement().GetTaskId()] = ta.GetPlacement().GetEpoch()
		}
		want := map[string]uint64{"a": 2, "b": 1, "c": 0, "d": 0}
		if len(got) != len(want) {
			t.Fatalf("%v: epochs %v, want %v", c, got, want)
		}
		for id, e := range want {
			if got[id] != e {
				t.Fatalf("%v: epochs %v, want %v", c, got, want)
			}
		}
	}
}

// GetTask tells where a task runs and where it ran in the generations the
// node keeps; ListTasks adds the placements of a page's tasks on request.
func TestTaskPlacementAndMoves(t *testing.T) {
	n := newFakeNode("n1", primary)
	for _, id := range []string{"a", "b"} {
		n.seed(t, id)
	}
	deltas := []state.AssignmentDelta{
		{Set: []state.Placement{{Task: "a", Active: "w1"}, {Task: "b", Active: "w1"}}},
		{Set: []state.Placement{{Task: "a", Active: "w2", Standbys: []string{"w1"}}}},
		{Removed: []string{"b"}},
	}
	applyDeltas(t, n, deltas)
	ts := startServer(t, n, netio.Limits{})
	r, err := ts.svc.GetTask(ctxT(t), connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "a", WithMoves: true}))
	if err != nil {
		t.Fatal(err)
	}
	if p := r.Msg.Placement; p.GetActive() != "w2" || p.GetEpoch() != 2 || len(p.GetStandbys()) != 1 {
		t.Fatalf("placement of a: %v", p)
	}
	if m := r.Msg.Moves; len(m) != 2 || m[0].Generation != 1 || m[0].Placement.GetActive() != "w1" || m[1].Placement.GetActive() != "w2" || m[1].AppliedAtUnixNano == 0 {
		t.Fatalf("moves of a: %v", m)
	}
	r, err = ts.svc.GetTask(ctxT(t), connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "b", WithMoves: true}))
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Msg.Moves; r.Msg.Placement != nil || len(m) != 2 || m[1].Placement != nil || m[1].Generation != 3 {
		t.Fatalf("b: placement %v, moves %v", r.Msg.Placement, m)
	}
	l, err := ts.svc.ListTasks(ctxT(t), connect.NewRequest(&xcev1.ListTasksRequest{WithPlacements: true}))
	if err != nil || len(l.Msg.Tasks) != 2 || len(l.Msg.Placements) != 1 || l.Msg.Placements[0].TaskId != "a" {
		t.Fatalf("list with placements: %v %v", l, err)
	}
}

// applyDeltas commits deltas as generations 1, 2, … on n.
func applyDeltas(t *testing.T, n *fakeNode, deltas []state.AssignmentDelta) {
	t.Helper()
	for i, d := range deltas {
		d.Base, d.Generation = uint64(i), uint64(i+1)
		c := state.Command{Type: state.CmdSetAssignment, Assign: d}
		if r, err := n.Apply(context.Background(), c.Encode()); err != nil || r.Code != state.CodeOK {
			t.Fatalf("delta %d: %+v %v", i, r, err)
		}
	}
}
