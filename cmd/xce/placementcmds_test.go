package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"connectrpc.com/connect"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

func (f *fakeAPI) FreezePlacement(context.Context, *connect.Request[xcev1.FreezePlacementRequest]) (*connect.Response[xcev1.FreezePlacementResponse], error) {
	if f.freezeOld.Load() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("placement freezes and task weights wait until every voter applies them (log format 5): n2"))
	}
	f.frozen.Store(true)
	return connect.NewResponse(&xcev1.FreezePlacementResponse{Index: 11}), nil
}

func (f *fakeAPI) UnfreezePlacement(context.Context, *connect.Request[xcev1.UnfreezePlacementRequest]) (*connect.Response[xcev1.UnfreezePlacementResponse], error) {
	f.frozen.Store(false)
	return connect.NewResponse(&xcev1.UnfreezePlacementResponse{Index: 12}), nil
}

func (f *fakeAPI) Status(context.Context, *connect.Request[xcev1.StatusRequest]) (*connect.Response[xcev1.StatusResponse], error) {
	return connect.NewResponse(&xcev1.StatusResponse{NodeId: "n1", ClusterId: "c", Role: xcev1.Role_ROLE_PRIMARY, PlacementFrozen: f.frozen.Load()}), nil
}

func (f *fakeAPI) SubmitTask(_ context.Context, req *connect.Request[xcev1.SubmitTaskRequest]) (*connect.Response[xcev1.SubmitTaskResponse], error) {
	f.mu.Lock()
	f.submitted = append(f.submitted, req.Msg)
	f.mu.Unlock()
	m := req.Msg
	return connect.NewResponse(&xcev1.SubmitTaskResponse{Index: 3, Task: &xcev1.Task{TaskId: m.TaskId, Stateful: m.Stateful, Weight: max(m.Weight, 1)}}), nil
}

// TestPlacementFreezeCommand: xce placement freeze and unfreeze write the
// freeze, which xce status and xce assignment then show (a line, and a
// JSON field); a cluster that cannot apply it yet exits 1.
func TestPlacementFreezeCommand(t *testing.T) {
	f := &fakeAPI{}
	addr := startAPI(t, f)
	out, code := runCmd(t, statusCmd(), "--addr", addr)
	if code != exitOK || strings.Contains(out, "placement: frozen") {
		t.Fatalf("status before a freeze: exit %d\n%s", code, out)
	}
	out, code = runCmd(t, placementCmd(), "freeze", "--addr", addr)
	if code != exitOK || !strings.Contains(out, "placement frozen at index 11") || !f.frozen.Load() {
		t.Fatalf("freeze: exit %d\n%s", code, out)
	}
	out, code = runCmd(t, statusCmd(), "--addr", addr)
	if code != exitOK || !strings.Contains(out, "\nplacement: frozen\n") {
		t.Fatalf("status when frozen: exit %d\n%s", code, out)
	}
	out, _ = runCmd(t, statusCmd(), "--addr", addr, "--json")
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil || st["placement_frozen"] != true {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	out, code = runCmd(t, assignmentCmd(), "--addr", addr)
	if code != exitOK || !strings.Contains(out, "the placement is frozen") {
		t.Fatalf("assignment when frozen: exit %d\n%s", code, out)
	}
	out, _ = runCmd(t, assignmentCmd(), "--addr", addr, "--json")
	var a map[string]any
	if err := json.Unmarshal([]byte(out), &a); err != nil || a["frozen"] != true {
		t.Fatalf("assignment --json: %v\n%s", err, out)
	}
	out, code = runCmd(t, placementCmd(), "unfreeze", "--addr", addr, "--json")
	var fj freezeJSON
	if err := json.Unmarshal([]byte(out), &fj); code != exitOK || err != nil || fj.Frozen || fj.Index != 12 || f.frozen.Load() {
		t.Fatalf("unfreeze --json: exit %d %v\n%s", code, err, out)
	}
	out, _ = runCmd(t, statusCmd(), "--addr", addr, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil || st["placement_frozen"] != false {
		t.Fatalf("status --json after unfreeze: %v\n%s", err, out)
	}
	out, _ = runCmd(t, assignmentCmd(), "--addr", addr, "--json")
	if err := json.Unmarshal([]byte(out), &a); err != nil || a["frozen"] != false || strings.Contains(out, "is frozen") {
		t.Fatalf("assignment --json after unfreeze: %v\n%s", err, out)
	}
	f.freezeOld.Store(true)
	if _, code := runCmd(t, placementCmd(), "freeze", "--addr", addr); code != 1 {
		t.Fatalf("freeze refused by the cluster's state: exit %d, want 1", code)
	}
	if _, code := runCmd(t, placementCmd(), "freeze", "extra", "--addr", addr); code != exitUsage {
		t.Fatalf("freeze with an argument: exit %d, want %d", code, exitUsage)
	}
}

// TestSubmitWeightFlag: xce submit --weight sends the weight (1 without
// the flag), shows it in --json, and refuses one outside 1..65536 before
// anything is sent.
func TestSubmitWeightFlag(t *testing.T) {
	f := &fakeAPI{}
	addr := startAPI(t, f)
	out, code := runCmd(t, submitCmd(), "t1", "--addr", addr, "--weight", "40", "--json")
	var got struct {
		Task taskJSON `json:"task"`
	}
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || got.Task.Weight != 40 {
		t.Fatalf("submit --weight 40: exit %d %v\n%s", code, err, out)
	}
	if _, code := runCmd(t, submitCmd(), "t2", "--addr", addr); code != exitOK {
		t.Fatalf("submit: exit %d", code)
	}
	for _, w := range []string{"0", "65537", "-1", "x"} {
		if _, code := runCmd(t, submitCmd(), "t3", "--addr", addr, "--weight", w); code != exitUsage {
			t.Errorf("submit --weight %s: exit %d, want %d", w, code, exitUsage)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.submitted) != 2 || f.submitted[0].Weight != 40 || f.submitted[1].Weight != 1 {
		t.Fatalf("submitted %v", f.submitted)
	}
}
