package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/client"
	"github.com/xce/xce/client/transport"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/state"
)

// Retry-after hints the gate gives: the fake node's electing hint (the
// Raft backend's for configs.Default(), with the exit watch); leader lease
// timeout 150ms.
const (
	electingMs = 50
	noQuorumMs = 150
	// heldMs is the retry-after of a refusal the gate held for the
	// electing hint first.
	heldMs = 10
)

// fakeNode is a dispatch.Node over a real FSM and a fake raft that applies
// every command locally at the next index.
type fakeNode struct {
	view    atomic.Pointer[ha.View]
	fsm     *state.FSM
	cfg     *configs.Config
	started time.Time

	applyMu sync.Mutex // raft applies one entry at a time
	index   uint64

	applies  atomic.Int64
	barriers atomic.Int64

	errMu      sync.Mutex
	applyErr   error
	applyFails int // failures left; <0 means always
	barrierErr error

	// cluster is the membership side (cluster_test.go).
	cluster clusterFake
	// hint, when set, is the electing hint instead of electingMs.
	hint time.Duration
}

func newFakeNode(nodeID string, v ha.View) *fakeNode {
	cfg := configs.Default()
	cfg.NodeID = nodeID
	cfg.DataDir = "data/" + nodeID
	n := &fakeNode{fsm: state.NewFSM(cfg.ClusterID), cfg: &cfg, started: time.Now()}
	n.setView(v)
	return n
}

// setView publishes v and wakes watchers of the previous view.
func (n *fakeNode) setView(v ha.View) {
	old := n.view.Swap(ha.NewView(v))
	if old != nil {
		old.Replace()
	}
}

// failApply makes the next count Apply calls fail with err (count < 0: all).
func (n *fakeNode) failApply(err error, count int) {
	n.errMu.Lock()
	n.applyErr, n.applyFails = err, count
	n.errMu.Unlock()
}

func (n *fakeNode) failBarrier(err error) {
	n.errMu.Lock()
	n.barrierErr = err
	n.errMu.Unlock()
}

func (n *fakeNode) View() *ha.View          { return n.view.Load() }
func (n *fakeNode) FSM() *state.FSM         { return n.fsm }
func (n *fakeNode) Config() *configs.Config { return n.cfg }
func (n *fakeNode) Started() time.Time      { return n.started }
func (n *fakeNode) Version() string         { return "test" }

func (n *fakeNode) Indexes() (commit, applied uint64) {
	a := n.fsm.AppliedIndex()
	return a, a
}

func (n *fakeNode) Apply(ctx context.Context, cmd []byte) (state.Result, error) {
	n.applies.Add(1)
	n.errMu.Lock()
	err := n.applyErr
	if err != nil {
		if n.applyFails > 0 {
			n.applyFails--
			if n.applyFails == 0 {
				n.applyErr = nil
			}
		}
	}
	n.errMu.Unlock()
	if err != nil {
		return state.Result{}, err
	}
	n.applyMu.Lock()
	defer n.applyMu.Unlock()
	n.index++
	out := n.fsm.Apply(n.index, 0, cmd)
	r, ok := out.(state.Result)
	if !ok {
		return state.Result{}, fmt.Errorf("fsm returned %T", out)
	}
	return r, nil
}

func (n *fakeNode) ReadBarrier(ctx context.Context) error {
	n.barriers.Add(1)
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return n.barrierErr
}

func (n *fakeNode) Backend() (string, *ha.RoleInfo) { return "raft", nil }
func (n *fakeNode) ElectingHint() time.Duration {
	if n.hint > 0 {
		return n.hint
	}
	return electingMs * time.Millisecond
}
func (n *fakeNode) StartupPhases() []ha.StartupPhase { return nil }

func (n *fakeNode) Outbox() (epoch, lag uint64, state string) { return 7, 3, "publishing" }

// seed applies a submit directly through the fake raft (not via the API).
func (n *fakeNode) seed(t *testing.T, id string) {
	t.Helper()
	c := state.Command{Type: state.CmdSubmitTask, Task: state.Task{ID: id}}
	if r, err := n.Apply(context.Background(), c.Encode()); err != nil || r.Code != state.CodeOK {
		t.Fatalf("seed %s: %+v %v", id, r, err)
	}
}

var primary = ha.View{Role: ha.RolePrimary, Term: 5, LeaderID: "n1", LeaderAddr: "127.0.0.1:7101", WriteQuorum: true, Reason: "won election"}

type testServer struct {
	node *fakeNode
	addr string
	reg  *prometheus.Registry
	svc  xcev1connect.ControllerServiceClient
}

// startServer serves dispatch.New(node) on the real netio server (h2c and
// HTTP/1.1, with lim) on a 127.0.0.1 port, and returns a Connect client over
// the client library's transport (HTTP/1.1).
func startServer(t *testing.T, node *fakeNode, lim netio.Limits) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	path, h := dispatch.New(node, reg, nil)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	srv := netio.NewServer(mux, lim)
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	tr := transport.New()
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	addr := ln.Addr().String()
	return &testServer{
		node: node, addr: addr, reg: reg,
		svc: xcev1connect.NewControllerServiceClient(&http.Client{Transport: tr}, "http://"+addr),
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func notReadyOf(t *testing.T, err error) *xcev1.NotReady {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("error %v: code %s, want unavailable", err, connect.CodeOf(err))
	}
	nr, ok := client.NotReadyOf(err)
	if !ok {
		t.Fatalf("error %v: no NotReady detail", err)
	}
	return nr
}

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %s", what, code)
	}
	if got := connect.CodeOf(err); got != code {
		t.Fatalf("%s: %v (code %s), want %s", what, err, got, code)
	}
}

// notReadyCount reads xce_not_ready_total{reason=kind}.
func notReadyCount(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "xce_not_ready_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestGateOverTheWire runs every role through the real server: each call is
// served or refused with a NotReady detail that describes the view, and a
// refusal never reaches raft.
func TestGateOverTheWire(t *testing.T) {
	const (
		standbyReason = "standby: primary is n2 at 127.0.0.1:7102"
	)
	type refusal struct {
		reason string
		retry  uint32
	}
	for _, tc := range []struct {
		name string
		v    ha.View
		// nil means served.
		write, linear, stale *refusal
	}{
		{"init", ha.View{Role: ha.RoleInit, Reason: "process starting"},
			&refusal{"starting", heldMs}, &refusal{"starting", heldMs}, &refusal{"starting", heldMs}},
		{"electing", ha.View{Role: ha.RoleElecting, Term: 3, Reason: "election timeout"},
			&refusal{"electing", heldMs}, &refusal{"electing", heldMs}, &refusal{"electing", heldMs}},
		{"standby", ha.View{Role: ha.RoleStandby, Term: 4, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102", Reason: "following n2"},
			&refusal{standbyReason, 0}, &refusal{standbyReason, 0}, nil},
		{"primary", primary, nil, nil, nil},
		{"primary-no-quorum", ha.View{Role: ha.RolePrimary, Term: 6, LeaderID: "n1", LeaderAddr: "127.0.0.1:7101", Reason: "lost quorum"},
			&refusal{"no write quorum", noQuorumMs}, &refusal{"no write quorum", noQuorumMs}, &refusal{"no write quorum", noQuorumMs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := newFakeNode("n1", tc.v)
			node.seed(t, "seeded")
			ts := startServer(t, node, netio.DefaultLimits())
			ctx := ctxT(t)
			checkRefusal := func(what string, err error, want *refusal) {
				t.Helper()
				nr := notReadyOf(t, err)
				got := &xcev1.NotReady{Role: nr.Role, Term: nr.Term, LeaderId: nr.LeaderId, LeaderAddr: nr.LeaderAddr, Reason: nr.Reason, RetryAfterMs: nr.RetryAfterMs}
				exp := &xcev1.NotReady{Role: xcev1.Role(tc.v.Role), Term: tc.v.Term, LeaderId: tc.v.LeaderID, LeaderAddr: tc.v.LeaderAddr, Reason: want.reason, RetryAfterMs: want.retry}
				if !proto.Equal(got, exp) {
					t.Errorf("%s: NotReady %v, want %v", what, got, exp)
				}
				if msg := err.Error(); !strings.Contains(msg, "not ready: "+want.reason) {
					t.Errorf("%s: message %q", what, msg)
				}
			}

			// Status is served in every role and describes the view.
			st, err := ts.svc.Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			wantSt := &xcev1.StatusResponse{
				NodeId: "n1", ClusterId: "local", Role: xcev1.Role(tc.v.Role), Term: tc.v.Term,
				LeaderId: tc.v.LeaderID, LeaderAddr: tc.v.LeaderAddr, WriteQuorum: tc.v.Serving(),
				CommitIndex: 1, AppliedIndex: 1, Pid: int64(os.Getpid()), Version: "test",
				Reason: tc.v.Reason, Tasks: 1, Backend: "raft",
				KafkaEpoch: 7, OutboxLag: 3, KafkaState: "publishing", LogFormat: state.LogFormat, Auth: "off",
			}
			gotSt := proto.Clone(st.Msg).(*xcev1.StatusResponse)
			if gotSt.UptimeMs < 0 {
				t.Errorf("uptime %d", gotSt.UptimeMs)
			}
			gotSt.UptimeMs = 0
			if !proto.Equal(gotSt, wantSt) {
				t.Errorf("Status %v, want %v", gotSt, wantSt)
			}

			applies := node.applies.Load()
			_, err = ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "t1", ClientId: "c", RequestId: "r1"}))
			if tc.write == nil {
				if err != nil {
					t.Fatalf("SubmitTask: %v", err)
				}
				if got := node.applies.Load(); got != applies+1 {
					t.Errorf("SubmitTask served with %d applies", got-applies)
				}
				if _, ok := node.fsm.Task("t1"); !ok {
					t.Error("t1 not in the FSM after a served submit")
				}
			} else {
				checkRefusal("SubmitTask", err, tc.write)
				if got := node.applies.Load(); got != applies {
					t.Errorf("a refused SubmitTask reached Apply (%d calls)", got-applies)
				}
				if node.fsm.NumTasks() != 1 || node.fsm.AppliedIndex() != 1 {
					t.Errorf("FSM changed by a refusal: %d tasks, applied %d", node.fsm.NumTasks(), node.fsm.AppliedIndex())
				}
			}
			// DeleteTask is a write too.
			_, err = ts.svc.DeleteTask(ctx, connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "seeded"}))
			if tc.write == nil {
				if err != nil {
					t.Fatalf("DeleteTask: %v", err)
				}
				node.seed(t, "seeded")
			} else {
				checkRefusal("DeleteTask", err, tc.write)
				if _, ok := node.fsm.Task("seeded"); !ok {
					t.Error("a refused delete removed the task")
				}
			}

			for _, rc := range []struct {
				c    xcev1.Consistency
				want *refusal
			}{
				{xcev1.Consistency_CONSISTENCY_UNSPECIFIED, tc.linear},
				{xcev1.Consistency_CONSISTENCY_LINEARIZABLE, tc.linear},
				{xcev1.Consistency_CONSISTENCY_STALE, tc.stale},
			} {
				barriers := node.barriers.Load()
				r, err := ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "seeded", Consistency: rc.c}))
				what := "GetTask " + rc.c.String()
				wantBarriers := barriers
				if rc.want == nil {
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if r.Msg.Task.GetTaskId() != "seeded" || r.Msg.Task.GetState() != state.TaskStatePending || r.Msg.AppliedIndex != node.fsm.AppliedIndex() {
						t.Errorf("%s: %v", what, r.Msg)
					}
					if rc.c != xcev1.Consistency_CONSISTENCY_STALE {
						wantBarriers++
					}
				} else {
					checkRefusal(what, err, rc.want)
				}
				if got := node.barriers.Load(); got != wantBarriers {
					t.Errorf("%s: %d read barriers, want %d", what, got-barriers, wantBarriers-barriers)
				}
				_, err = ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{Consistency: rc.c}))
				if rc.want == nil {
					if err != nil {
						t.Fatalf("ListTasks %s: %v", rc.c, err)
					}
				} else {
					checkRefusal("ListTasks "+rc.c.String(), err, rc.want)
				}
			}
		})
	}
}

func TestStandbyWithoutLeader(t *testing.T) {
	node := newFakeNode("n1", ha.View{Role: ha.RoleStandby, Term: 9})
	ts := startServer(t, node, netio.DefaultLimits())
	_, err := ts.svc.SubmitTask(ctxT(t), connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "t"}))
	nr := notReadyOf(t, err)
	if nr.Reason != "standby: primary unknown" || nr.RetryAfterMs != heldMs || nr.LeaderAddr != "" || nr.Role != xcev1.Role_ROLE_STANDBY || nr.Term != 9 {
		t.Errorf("NotReady %v", nr)
	}
	if node.applies.Load() != 0 {
		t.Error("refusal reached Apply")
	}
}

func TestStoppingRefusesWritesServesStatus(t *testing.T) {
	v := primary
	v.Stopping = true
	node := newFakeNode("n1", v)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "t"}))
	if nr := notReadyOf(t, err); nr.Reason != "shutting down" || nr.RetryAfterMs != electingMs {
		t.Errorf("NotReady %v", nr)
	}
	st, err := ts.svc.Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
	if err != nil || st.Msg.WriteQuorum {
		t.Errorf("Status while stopping: %v %v", st, err)
	}
	if node.applies.Load() != 0 {
		t.Error("refusal reached Apply")
	}
}

// A submit may ask for as many standbys as the assignor places and no more:
// the refusal names the limit and applies nothing.
func TestSubmitStandbysLimit(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "many", Stateful: true, StandbyReplicas: assign.MaxStandbyReplicas + 1}))
	wantCode(t, "submit with 17 standbys", err, connect.CodeInvalidArgument)
	if want := "standby_replicas: 17 is more than 16"; !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
	if node.applies.Load() != 0 {
		t.Error("the refused submit reached Apply")
	}
	r, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "most", Stateful: true, StandbyReplicas: assign.MaxStandbyReplicas}))
	if err != nil {
		t.Fatalf("submit with 16 standbys: %v", err)
	}
	if got := r.Msg.Task.StandbyReplicas; got != assign.MaxStandbyReplicas {
		t.Errorf("stored %d standby replicas, want %d", got, assign.MaxStandbyReplicas)
	}
}

func TestSubmitDedupAndErrors(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	req := &xcev1.SubmitTaskRequest{TaskId: "job-1", Stateful: true, StandbyReplicas: 2, ClientId: "c1", RequestId: "r1"}
	first, err := ts.svc.SubmitTask(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	want := &xcev1.Task{TaskId: "job-1", Stateful: true, StandbyReplicas: 2, CreatedIndex: 1, State: state.TaskStatePending, PendingReason: "no worker assigned", Weight: 1}
	if !proto.Equal(first.Msg.Task, want) || first.Msg.Index != 1 {
		t.Fatalf("first submit: %v", first.Msg)
	}
	again, err := ts.svc.SubmitTask(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatalf("retried submit: %v", err)
	}
	if !proto.Equal(first.Msg, again.Msg) {
		t.Errorf("retry answered %v, first %v", again.Msg, first.Msg)
	}
	if n := node.fsm.NumTasks(); n != 1 {
		t.Errorf("%d tasks after a retried submit", n)
	}
	if h := node.fsm.DedupHits(); h != 1 {
		t.Errorf("dedup hits %d, want 1", h)
	}

	// The same task under another request id is a conflict.
	_, err = ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "job-1", ClientId: "c1", RequestId: "r2"}))
	wantCode(t, "submit of an existing task", err, connect.CodeAlreadyExists)
	if !strings.Contains(err.Error(), "created at index 1") {
		t.Errorf("conflict message %q", err)
	}
	// Without a request id there is no dedup: a second submit conflicts.
	_, err = ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "job-1"}))
	wantCode(t, "submit without request id", err, connect.CodeAlreadyExists)

	_, err = ts.svc.DeleteTask(ctx, connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "nope", ClientId: "c1", RequestId: "d1"}))
	wantCode(t, "delete of an unknown task", err, connect.CodeNotFound)
	_, err = ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "nope"}))
	wantCode(t, "get of an unknown task", err, connect.CodeNotFound)
	_, err = ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "nope", Consistency: xcev1.Consistency_CONSISTENCY_STALE}))
	wantCode(t, "stale get of an unknown task", err, connect.CodeNotFound)

	// Delete, retried with its request id, answers the same index once.
	del := &xcev1.DeleteTaskRequest{TaskId: "job-1", ClientId: "c1", RequestId: "d2"}
	d1, err := ts.svc.DeleteTask(ctx, connect.NewRequest(del))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := ts.svc.DeleteTask(ctx, connect.NewRequest(del))
	if err != nil {
		t.Fatalf("retried delete: %v", err)
	}
	if d1.Msg.Index != d2.Msg.Index || node.fsm.NumTasks() != 0 {
		t.Errorf("delete %v, retry %v, %d tasks", d1.Msg, d2.Msg, node.fsm.NumTasks())
	}
}

func TestListTasksPaging(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	for _, id := range []string{"t3", "t1", "t5", "t2", "t4"} {
		if _, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: id})); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	var tokens []string
	token := ""
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatal("paging does not end")
		}
		r, err := ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{PageSize: 2, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Msg.Tasks) > 2 {
			t.Fatalf("page of %d with page_size 2", len(r.Msg.Tasks))
		}
		if r.Msg.AppliedIndex != 5 {
			t.Errorf("applied index %d", r.Msg.AppliedIndex)
		}
		for _, task := range r.Msg.Tasks {
			got = append(got, task.TaskId)
		}
		tokens = append(tokens, r.Msg.NextPageToken)
		if r.Msg.NextPageToken == "" {
			break
		}
		token = r.Msg.NextPageToken
	}
	if strings.Join(got, ",") != "t1,t2,t3,t4,t5" || strings.Join(tokens, ",") != "t2,t4," {
		t.Errorf("pages %v tokens %q", got, tokens)
	}

	r, err := ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{PageSize: 1000}))
	if err != nil || len(r.Msg.Tasks) != 5 || r.Msg.NextPageToken != "" {
		t.Errorf("page_size 1000: %v %v", r, err)
	}
	_, err = ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{PageSize: 1001}))
	wantCode(t, "page_size 1001", err, connect.CodeInvalidArgument)
	_, err = ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{PageToken: "../x"}))
	wantCode(t, "bad page token", err, connect.CodeInvalidArgument)
	_, err = ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{Prefix: "t/"}))
	wantCode(t, "bad prefix", err, connect.CodeInvalidArgument)

	// A prefix search: the tasks whose ids start with it, paged alike.
	for _, id := range []string{"u1", "t10", "t11"} {
		if _, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: id})); err != nil {
			t.Fatal(err)
		}
	}
	r, err = ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{Prefix: "t1", PageSize: 2, WithPlacements: true}))
	if err != nil || len(r.Msg.Tasks) != 2 || r.Msg.Tasks[0].TaskId != "t1" || r.Msg.Tasks[1].TaskId != "t10" || r.Msg.NextPageToken != "t10" {
		t.Fatalf("prefix t1: %v %v", r, err)
	}
	r, err = ts.svc.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{Prefix: "t1", PageSize: 2, PageToken: "t10"}))
	if err != nil || len(r.Msg.Tasks) != 1 || r.Msg.Tasks[0].TaskId != "t11" || r.Msg.NextPageToken != "" {
		t.Fatalf("prefix t1, second page: %v %v", r, err)
	}
}

func TestInvalidArgumentsNeverApply(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	long := strings.Repeat("a", 129)
	for _, id := range []string{"", "a b", "a/b", "../x", long, "é", "a\n"} {
		_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: id}))
		wantCode(t, fmt.Sprintf("submit %q", id), err, connect.CodeInvalidArgument)
		_, err = ts.svc.DeleteTask(ctx, connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: id}))
		wantCode(t, fmt.Sprintf("delete %q", id), err, connect.CodeInvalidArgument)
		_, err = ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: id}))
		wantCode(t, fmt.Sprintf("get %q", id), err, connect.CodeInvalidArgument)
	}
	for name, req := range map[string]*xcev1.SubmitTaskRequest{
		"request id without client id": {TaskId: "t", RequestId: "r"},
		"client id too long":           {TaskId: "t", ClientId: long, RequestId: "r"},
		"request id too long":          {TaskId: "t", ClientId: "c", RequestId: long},
		"17 standbys":                  {TaskId: "t", StandbyReplicas: 17},
	} {
		_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(req))
		wantCode(t, name, err, connect.CodeInvalidArgument)
	}
	if n := node.applies.Load(); n != 0 {
		t.Errorf("%d invalid requests reached Apply", n)
	}
	if node.fsm.AppliedIndex() != 0 || node.fsm.NumTasks() != 0 {
		t.Error("invalid requests changed the FSM")
	}
	// The gate runs before the handler's validation: an invalid request to a
	// node that cannot serve it is NOT_READY.
	node.setView(ha.View{Role: ha.RoleElecting})
	_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "a b"}))
	notReadyOf(t, err)
}

func TestLeadershipLostDuringApply(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	node.failApply(fmt.Errorf("%w: leadership lost while committing", ha.ErrNotLeader), -1)
	_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "t1", ClientId: "c", RequestId: "r"}))
	nr := notReadyOf(t, err)
	if nr.Role != xcev1.Role_ROLE_PRIMARY || nr.Term != primary.Term || nr.RetryAfterMs != electingMs ||
		!strings.HasPrefix(nr.Reason, "write not confirmed: not the leader") {
		t.Errorf("NotReady %v", nr)
	}
	if got := notReadyCount(t, ts.reg, "leadership_lost"); got != 1 {
		t.Errorf("xce_not_ready_total{reason=leadership_lost} = %v", got)
	}
	if node.fsm.NumTasks() != 0 || node.fsm.AppliedIndex() != 0 {
		t.Error("failed apply changed the FSM")
	}

	// A failed read barrier is NOT_READY too; a stale read needs no barrier.
	node.failApply(nil, 0)
	node.seed(t, "seeded")
	node.failBarrier(ha.ErrNotLeader)
	_, err = ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "seeded"}))
	if nr := notReadyOf(t, err); !strings.HasPrefix(nr.Reason, "write not confirmed") {
		t.Errorf("barrier failure: %v", nr)
	}
	if _, err := ts.svc.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "seeded", Consistency: xcev1.Consistency_CONSISTENCY_STALE})); err != nil {
		t.Errorf("stale read with a failing barrier: %v", err)
	}
	node.failBarrier(nil)

	// Once the view reflects the loss, the refusal describes the new role.
	node.failApply(ha.ErrNotLeader, -1)
	node.setView(ha.View{Role: ha.RoleStandby, Term: 6, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"})
	_, err = ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "t1"}))
	if nr := notReadyOf(t, err); nr.LeaderAddr != "127.0.0.1:7102" || nr.RetryAfterMs != 0 {
		t.Errorf("NotReady %v", nr)
	}

	// The client library retries a leadership loss with the same request id.
	// (The view names this server as the leader, so the client does not hop.)
	self := primary
	self.LeaderAddr = ts.addr
	node.setView(self)
	node.failApply(ha.ErrNotLeader, 2)
	var retries atomic.Int64
	c, err := client.New([]string{ts.addr}, client.Options{OnRetry: func(nr *xcev1.NotReady, err error) { retries.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	before := node.applies.Load()
	resp, err := c.Submit(ctx, client.Task{ID: "after-loss"})
	if err != nil {
		t.Fatalf("client submit across a leadership loss: %v", err)
	}
	if resp.Task.GetTaskId() != "after-loss" || retries.Load() != 2 || node.applies.Load()-before != 3 {
		t.Errorf("resp %v, %d retries, %d applies", resp, retries.Load(), node.applies.Load()-before)
	}
}

func TestWatchStatus(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := ts.svc.WatchStatus(ctx, connect.NewRequest(&xcev1.WatchStatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	recv := func(wantRole xcev1.Role) *xcev1.StatusResponse {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("stream ended: %v", stream.Err())
		}
		m := stream.Msg()
		if m.Role != wantRole || m.NodeId != "n1" {
			t.Fatalf("status %v, want role %s", m, wantRole)
		}
		return m
	}
	if m := recv(xcev1.Role_ROLE_PRIMARY); !m.WriteQuorum || m.Term != 5 {
		t.Errorf("first status %v", m)
	}
	node.setView(ha.View{Role: ha.RoleStandby, Term: 6, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"})
	if m := recv(xcev1.Role_ROLE_STANDBY); m.WriteQuorum || m.Term != 6 || m.LeaderId != "n2" {
		t.Errorf("second status %v", m)
	}
	node.setView(ha.View{Role: ha.RoleStandby, Term: 6, Stopping: true})
	recv(xcev1.Role_ROLE_STANDBY)
	if stream.Receive() {
		t.Fatalf("stream goes on after stopping: %v", stream.Msg())
	}
	if ctx.Err() != nil {
		t.Fatalf("the stream ended only at the client's deadline (%v, stream error %v)", ctx.Err(), stream.Err())
	}
	if err := stream.Err(); err != nil {
		t.Errorf("stream ended with %v, want a clean end", err)
	}
}

// TestClientEndToEnd drives the client library against real servers.
func TestClientEndToEnd(t *testing.T) {
	ctx := ctxT(t)
	t.Run("primary", func(t *testing.T) {
		ts := startServer(t, newFakeNode("n1", primary), netio.DefaultLimits())
		c, err := client.New([]string{ts.addr}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Submit(ctx, client.Task{ID: "t1", Stateful: true})
		if err != nil || r.Task.GetTaskId() != "t1" || !r.Task.GetStateful() {
			t.Fatalf("submit: %v %v", r, err)
		}
		g, err := c.Get(ctx, "t1", false)
		if err != nil || g.Task.GetTaskId() != "t1" {
			t.Fatalf("get: %v %v", g, err)
		}
		if _, err := c.Get(ctx, "none", false); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("get unknown: %v", err)
		}
		if _, err := c.Submit(ctx, client.Task{ID: "t1"}); !errors.Is(err, client.ErrAlreadyExists) {
			t.Errorf("submit existing: %v", err)
		}
	})
	t.Run("follows leader hint", func(t *testing.T) {
		leader := startServer(t, newFakeNode("n2", primary), netio.DefaultLimits())
		standby := startServer(t, newFakeNode("n1", ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: leader.addr}), netio.DefaultLimits())
		var retries atomic.Int64
		c, err := client.New([]string{standby.addr}, client.Options{OnRetry: func(nr *xcev1.NotReady, err error) {
			if nr == nil || nr.LeaderAddr != leader.addr {
				t.Errorf("retry on %v %v", nr, err)
			}
			retries.Add(1)
		}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Submit(ctx, client.Task{ID: "t1"})
		if err != nil || r.Task.GetTaskId() != "t1" {
			t.Fatalf("submit: %v %v", r, err)
		}
		if _, ok := leader.node.fsm.Task("t1"); !ok {
			t.Error("task not on the leader")
		}
		if standby.node.applies.Load() != 0 || leader.node.applies.Load() != 1 {
			t.Errorf("applies: standby %d, leader %d", standby.node.applies.Load(), leader.node.applies.Load())
		}
		if retries.Load() == 0 {
			t.Error("OnRetry never called")
		}
		// Stale reads are served by the standby itself (a fresh client: c
		// now talks to the leader).
		standby.node.seed(t, "local")
		c2, err := client.New([]string{standby.addr}, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if g, err := c2.Get(ctx, "local", true); err != nil || g.Task.GetTaskId() != "local" {
			t.Errorf("stale get: %v %v", g, err)
		}
	})
	t.Run("electing until the deadline", func(t *testing.T) {
		node := newFakeNode("n1", ha.View{Role: ha.RoleElecting, Term: 2})
		ts := startServer(t, node, netio.DefaultLimits())
		var retries atomic.Int64
		c, err := client.New([]string{ts.addr}, client.Options{OnRetry: func(*xcev1.NotReady, error) { retries.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		// Open the connection first, so the 300ms go to the retry loop
		// rather than to dialing on a loaded machine.
		if _, err := c.Status(ctx, ts.addr); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = c.Submit(cctx, client.Task{ID: "t1"})
		took := time.Since(start)
		if !errors.Is(err, client.ErrNotReady) {
			t.Fatalf("err %v, want ErrNotReady", err)
		}
		var nre *client.NotReadyError
		if !errors.As(err, &nre) || nre.Last == nil || nre.Last.Reason != "electing" || nre.Last.Role != xcev1.Role_ROLE_ELECTING {
			t.Fatalf("err %#v: %v", err, err)
		}
		if retries.Load() == 0 {
			t.Error("OnRetry never called")
		}
		if node.applies.Load() != 0 {
			t.Error("refusals reached Apply")
		}
		t.Logf("gave up after %v and %d retries: %v", took, retries.Load(), err)
		if took > 2*time.Second {
			t.Errorf("client took %v with a 300ms deadline", took)
		}
	})
}

// dialRaw opens a plain TCP connection to the server.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGateHoldsUntilPrimary: a write to a node that knows no primary is
// held, not refused, and served as soon as the node becomes PRIMARY; one
// held for the whole hint is refused and told to come back at once. A
// STANDBY's view that names the primary ends the hold with the hint.
func TestGateHoldsUntilPrimary(t *testing.T) {
	node := newFakeNode("n1", ha.View{Role: ha.RoleInit, Reason: "process starting"})
	ts := startServer(t, node, netio.DefaultLimits())
	ctx := ctxT(t)
	// A hint long enough that a hold lasts until the view changes.
	long := newFakeNode("n1", ha.View{Role: ha.RoleInit, Reason: "process starting"})
	long.hint = time.Minute
	lts := startServer(t, long, netio.DefaultLimits())
	held := func() float64 {
		mfs, err := lts.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "xce_requests_held" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	// Held for the hint, then refused with the short retry.
	start := time.Now()
	_, err := ts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "t0"}))
	if nr := notReadyOf(t, err); nr.RetryAfterMs != heldMs || time.Since(start) < electingMs*time.Millisecond {
		t.Errorf("after %v: NotReady %v", time.Since(start), nr)
	}
	for i, tc := range []struct {
		name string
		then ha.View
		ok   bool
	}{
		{"becomes primary", primary, true},
		{"follows a primary", ha.View{Role: ha.RoleStandby, Term: 6, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"}, false},
	} {
		long.setView(ha.View{Role: ha.RoleElecting, Term: 5})
		errc := make(chan error, 1)
		go func() {
			_, err := lts.svc.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: fmt.Sprintf("t%d", i)}))
			errc <- err
		}()
		testutil.Eventually(t, 10*time.Second, tc.name+": the write held", func() bool { return held() == 1 })
		long.setView(tc.then)
		err := <-errc
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.ok:
			if nr := notReadyOf(t, err); nr.LeaderAddr != "127.0.0.1:7102" || nr.RetryAfterMs != 0 {
				t.Errorf("%s: NotReady %v", tc.name, nr)
			}
		}
		if held() != 0 {
			t.Errorf("%s: %v requests still held", tc.name, held())
		}
	}
	if _, ok := long.fsm.Task("t0"); !ok {
		t.Error("the held write was not applied")
	}
}
