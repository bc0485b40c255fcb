package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/netio"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// fakeAPI serves ListWorkers, GetAssignment and the WorkerService on a
// loopback port; with notReady set it refuses every call like an electing
// node.
type fakeAPI struct {
	xcev1connect.UnimplementedControllerServiceHandler
	xcev1connect.UnimplementedWorkerServiceHandler
	notReady   bool
	stale      atomic.Bool
	heartbeats atomic.Int64
	// drains records the drains and undrains asked, as "+w" and "-w".
	drains []string
	// frozen is the placement freeze, set by FreezePlacement and
	// UnfreezePlacement and shown by Status and GetAssignment; freezeOld
	// refuses a freeze as a cluster with an old voter does.
	frozen, freezeOld atomic.Bool
	// submitted records the submits, with their weights (under mu).
	mu        sync.Mutex
	submitted []*xcev1.SubmitTaskRequest
}

func (f *fakeAPI) DrainWorker(_ context.Context, req *connect.Request[xcev1.DrainWorkerRequest]) (*connect.Response[xcev1.DrainWorkerResponse], error) {
	if err := f.refuse(); err != nil {
		return nil, err
	}
	if req.Msg.WorkerId == "old" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("worker drains wait until every voter applies them (log format 4): n2"))
	}
	f.drains = append(f.drains, "+"+req.Msg.WorkerId)
	return connect.NewResponse(&xcev1.DrainWorkerResponse{Index: 9, OnlyCopy: []string{"t7"}, Connected: req.Msg.WorkerId == "w1"}), nil
}

func (f *fakeAPI) UndrainWorker(_ context.Context, req *connect.Request[xcev1.UndrainWorkerRequest]) (*connect.Response[xcev1.UndrainWorkerResponse], error) {
	f.drains = append(f.drains, "-"+req.Msg.WorkerId)
	return connect.NewResponse(&xcev1.UndrainWorkerResponse{Index: 10}), nil
}

func (f *fakeAPI) refuse() error {
	if !f.notReady {
		return nil
	}
	e := connect.NewError(connect.CodeUnavailable, errors.New("electing"))
	d, _ := connect.NewErrorDetail(&xcev1.NotReady{Role: xcev1.Role_ROLE_ELECTING, Reason: "electing", RetryAfterMs: 50})
	e.AddDetail(d)
	return e
}

func (f *fakeAPI) ListWorkers(context.Context, *connect.Request[xcev1.ListWorkersRequest]) (*connect.Response[xcev1.ListWorkersResponse], error) {
	if err := f.refuse(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.ListWorkersResponse{Generation: 4, Settling: true, Workers: []*xcev1.WorkerInfo{
		{WorkerId: "w1", Capacity: 1, LastHeartbeatAgeMs: 250, Actives: []string{"t1", "t2"}, Standbys: []string{"t3"},
			Lags: map[string]int64{"t1": 0, "t2": 0, "t3": 1200}, Notice: "actives: t1,t2", DrainState: "draining",
			Labels: map[string]string{"zone": "a", "rack": "r1"}},
		{WorkerId: "w2", Capacity: 2, LastHeartbeatAgeMs: 1500, Warmups: []string{"a", "b", "c", "d", "e", "f"}},
	}, Drained: []string{"w1", "w9"}}), nil
}

func (f *fakeAPI) GetAssignment(_ context.Context, req *connect.Request[xcev1.GetAssignmentRequest]) (*connect.Response[xcev1.GetAssignmentResponse], error) {
	if err := f.refuse(); err != nil {
		return nil, err
	}
	f.stale.Store(req.Msg.Consistency == xcev1.Consistency_CONSISTENCY_STALE)
	return connect.NewResponse(&xcev1.GetAssignmentResponse{Generation: 4, AppliedIndex: 17, Followup: true, Frozen: f.frozen.Load(), Tasks: []*xcev1.TaskAssignment{
		{Placement: &xcev1.TaskPlacement{TaskId: "t1", Active: "w1", Standbys: []string{"w2"}, Warmups: []string{"w3"}, Epoch: 3}, Stateful: true,
			Lags: map[string]int64{"w1": 0, "w2": 40, "w3": 30000}, Update: "running"},
		{Placement: &xcev1.TaskPlacement{TaskId: "t2"}, PendingReason: "no worker"},
	}}), nil
}

func (f *fakeAPI) Register(context.Context, *connect.Request[xcev1.RegisterRequest]) (*connect.Response[xcev1.RegisterResponse], error) {
	return connect.NewResponse(&xcev1.RegisterResponse{HeartbeatIntervalMs: 50, SessionTimeoutMs: 500}), nil
}

func (f *fakeAPI) Heartbeat(context.Context, *connect.Request[xcev1.HeartbeatRequest]) (*connect.Response[xcev1.HeartbeatResponse], error) {
	f.heartbeats.Add(1)
	return connect.NewResponse(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"t1"}, HeartbeatIntervalMs: 50}), nil
}

func startAPI(t *testing.T, f *fakeAPI) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(f))
	mux.Handle(xcev1connect.NewWorkerServiceHandler(f))
	srv := netio.NewServer(mux, netio.DefaultLimits())
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// runCmd runs one command with args and returns its output and exit code.
func runCmd(t *testing.T, cmd *cobra.Command, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageErr("%v", err) })
	code := exitCodeQuiet(cmd.Execute())
	return out.String(), code
}

// exitCodeQuiet is exitCode without the message on stderr.
func exitCodeQuiet(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitCode(err)
}

func TestWorkersCommand(t *testing.T) {
	addr := startAPI(t, &fakeAPI{})
	var out bytes.Buffer
	cmd := workersCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--addr", addr, "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got["generation"] != 4.0 || got["settling"] != true {
		t.Errorf("json %v", got)
	}
	ws, _ := got["workers"].([]any)
	if len(ws) != 2 {
		t.Fatalf("workers %v", got["workers"])
	}
	w2, _ := ws[1].(map[string]any)
	for _, k := range []string{"worker_id", "capacity", "client_addr", "last_heartbeat_age_ms", "actives", "standbys", "warmups", "lags", "notice", "drain_state", "labels"} {
		if _, ok := w2[k]; !ok {
			t.Errorf("worker object without %q: %v", k, w2)
		}
	}
	if a, ok := w2["actives"].([]any); !ok || len(a) != 0 {
		t.Errorf("w2 actives %v, want []", w2["actives"])
	}
	if w1, _ := ws[0].(map[string]any); w1["drain_state"] != "draining" {
		t.Errorf("w1 drain_state %v", w1["drain_state"])
	} else if l, _ := w1["labels"].(map[string]any); l["zone"] != "a" || l["rack"] != "r1" || len(l) != 2 {
		t.Errorf("w1 labels %v", w1["labels"])
	}
	if l, ok := w2["labels"].(map[string]any); !ok || len(l) != 0 {
		t.Errorf("w2 labels %v, want {}", w2["labels"])
	}
	if d, _ := got["drained"].([]any); len(d) != 2 {
		t.Errorf("drained %v", got["drained"])
	}

	out.Reset()
	cmd = workersCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--addr", addr})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	table := out.String()
	for _, want := range []string{"generation 4, 2 workers (settling", "WORKER", "STATE", "LABELS", "rack=r1,zone=a", "draining", "w1", "250ms", "t1,t2", "actives: t1,t2", "1.5s", "a,b,c,d,… (6)",
		"drained, with no session: w9"} {
		if !strings.Contains(table, want) {
			t.Errorf("table without %q:\n%s", want, table)
		}
	}
}

func TestAssignmentCommand(t *testing.T) {
	f := &fakeAPI{}
	addr := startAPI(t, f)
	var out bytes.Buffer
	cmd := assignmentCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--addr", addr, "--json", "--stale"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !f.stale.Load() {
		t.Error("--stale did not ask for a stale read")
	}
	var got assignmentJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if got.Generation != 4 || !got.Followup || got.Settling || len(got.Tasks) != 2 {
		t.Fatalf("json %+v", got)
	}
	t1, t2 := got.Tasks[0], got.Tasks[1]
	if t1.TaskID != "t1" || !t1.Stateful || t1.Active != "w1" || t1.Epoch != 3 || t1.Standbys[0] != "w2" || t1.Warmups[0] != "w3" || t1.Lags["w3"] != 30000 {
		t.Errorf("t1 %+v", t1)
	}
	if t2.TaskID != "t2" || t2.Active != "" || t2.Epoch != 0 || t2.Standbys == nil || t2.Warmups == nil || t2.Lags == nil {
		t.Errorf("t2 %+v (lists must be [] not null)", t2)
	}
	var raw map[string]any
	_ = json.Unmarshal(out.Bytes(), &raw)
	for _, k := range []string{"generation", "settling", "followup", "tasks"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("json without %q", k)
		}
	}
	// Every task has an epoch, 0 included.
	for i, task := range raw["tasks"].([]any) {
		if e, ok := task.(map[string]any)["epoch"]; !ok || e != []float64{3, 0}[i] {
			t.Errorf("task %d: epoch %v (present: %v)", i, e, ok)
		}
	}

	out.Reset()
	cmd = assignmentCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--addr", addr})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if f.stale.Load() {
		t.Error("a read without --stale was stale")
	}
	table := out.String()
	for _, want := range []string{"generation 4 (applied index 17), 2 tasks; moves wait for warm-ups", "TASK", "w1=0 w2=40 w3=30000", "running", "(pending: no worker)"} {
		if !strings.Contains(table, want) {
			t.Errorf("table without %q:\n%s", want, table)
		}
	}
	lines := strings.Split(table, "\n")
	for i, want := range [][]string{
		{"TASK", "STATEFUL", "ACTIVE", "EPOCH", "STANDBYS"},
		{"t1", "true", "w1", "3", "w2"},
		{"t2", "false", "-", "0", "-"},
	} {
		if f := strings.Fields(lines[1+i]); len(f) < len(want) || !slices.Equal(f[:len(want)], want) {
			t.Errorf("table line %d %q, want it to start with %q", 1+i, lines[1+i], want)
		}
	}
}

func TestWorkerCommandsExitCodes(t *testing.T) {
	addr := startAPI(t, &fakeAPI{notReady: true})
	for _, tc := range []struct {
		name string
		cmd  func() *cobra.Command
		args []string
		want int
	}{
		{"workers not ready", workersCmd, []string{"--addr", addr, "--timeout", "200ms"}, exitNotReady},
		{"assignment not ready", assignmentCmd, []string{"--addr", addr, "--timeout", "200ms"}, exitNotReady},
		{"workers bad flag", workersCmd, []string{"--nope"}, exitUsage},
		{"assignment argument", assignmentCmd, []string{"extra"}, exitUsage},
		{"worker without id", workerCmd, nil, exitUsage},
		{"worker bad rate", workerCmd, []string{"--id", "w1", "--restore-rate", "0"}, exitUsage},
		{"worker bad id", workerCmd, []string{"--id", "a b"}, exitUsage},
		{"worker bad lag", workerCmd, []string{"--id", "w1", "--initial-lag", "-1"}, exitUsage},
		{"worker bad log level", workerCmd, []string{"--id", "w1", "--log-level", "loud"}, exitUsage},
		{"worker label without =", workerCmd, []string{"--id", "w1", "--label", "zone"}, exitUsage},
		{"worker bad label key", workerCmd, []string{"--id", "w1", "--label", "zo ne=a"}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, code := runCmd(t, tc.cmd(), tc.args...); code != tc.want {
				t.Errorf("exit %d, want %d", code, tc.want)
			}
		})
	}
}

func TestWorkerFlagsConfig(t *testing.T) {
	f := workerFlags{id: "w1", controllers: "a:1, b:2", capacity: 3, restoreRate: 500, initialLag: 0, dropLag: 10, dropAfter: time.Second}
	cfg, sim, err := f.config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "w1" || len(cfg.Controllers) != 2 || cfg.Capacity != 3 {
		t.Fatalf("config %+v", cfg)
	}
	if sim.RestoreRate != 500 || sim.InitialLag != -1 || sim.DropLag != 10 || sim.DropAfter != time.Second {
		t.Fatalf("simulator config %+v", sim)
	}
	f.initialLag = 7
	if _, sim, _ = f.config(); sim.InitialLag != 7 {
		t.Fatalf("initial lag %d", sim.InitialLag)
	}
}

// TestParseLabels: --label values become labels, and a malformed one is
// refused before anything is sent, naming the value.
func TestParseLabels(t *testing.T) {
	long := strings.Repeat("x", 64)
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf("k%d=v", i)
	}
	for _, tc := range []struct {
		name string
		in   []string
		want map[string]string
		err  string
	}{
		{"none", nil, nil, ""},
		{"two", []string{"zone=a", "topology.kubernetes.io/rack=r-1"}, map[string]string{"zone": "a", "topology.kubernetes.io/rack": "r-1"}, ""},
		{"empty value", []string{"zone="}, map[string]string{"zone": ""}, ""},
		{"value with =", []string{"zone=a=b"}, nil, `value "a=b"`},
		{"no =", []string{"zone"}, nil, "want KEY=VALUE"},
		{"empty key", []string{"=a"}, nil, `key ""`},
		{"bad key", []string{"zo ne=a"}, nil, `key "zo ne"`},
		{"long key", []string{long + "=a"}, nil, "key"},
		{"bad value", []string{"zone=a/b"}, nil, `value "a/b"`},
		{"long value", []string{"zone=" + long}, nil, "value"},
		{"twice", []string{"zone=a", "zone=b"}, nil, "given twice"},
		{"too many", many, nil, "exceed the maximum 16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLabels(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || exitCodeQuiet(err) != exitUsage {
					t.Fatalf("err %v (exit %d), want a usage error with %q", err, exitCodeQuiet(err), tc.err)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	f := workerFlags{id: "w1", controllers: "a:1", restoreRate: 1, dropLag: 1, dropAfter: time.Second, labels: []string{"zone=a"}}
	if cfg, _, err := f.config(); err != nil || cfg.Labels["zone"] != "a" {
		t.Fatalf("config labels %v, %v", cfg.Labels, err)
	}
}

// TestRunWorker: the command's worker heartbeats until its context ends,
// then returns nil (exit 0).
func TestRunWorker(t *testing.T) {
	f := &fakeAPI{}
	addr := startAPI(t, f)
	flags := workerFlags{id: "w1", controllers: addr, capacity: 1, restoreRate: 1000, initialLag: 5, dropLag: 100, dropAfter: time.Minute,
		logLevel: "info", logFormat: "json"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs testutil.SyncBuffer
	go func() { done <- runWorker(ctx, &flags, &logs) }()
	deadline := time.Now().Add(10 * time.Second)
	for f.heartbeats.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d heartbeats in 10s; log:\n%s", f.heartbeats.Load(), logs.String())
		}
		select {
		case err := <-done:
			t.Fatalf("worker returned %v; log:\n%s", err, logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runWorker: %v, want nil on cancellation", err)
	}
	if !strings.Contains(logs.String(), `"worker_id":"w1"`) || !strings.Contains(logs.String(), "assignment changed") {
		t.Errorf("log:\n%s", logs.String())
	}
}

// xce workers drain|undrain: the request reaches the primary, the answer
// is printed (the only copies named, a worker with no session said so), and
// a refusal in the cluster's state is exit 1 with the reason.
func TestWorkersDrainCommand(t *testing.T) {
	f := &fakeAPI{}
	addr := startAPI(t, f)
	out, code := runCmd(t, workersCmd(), "drain", "w1", "--addr", addr)
	if code != exitOK || !strings.Contains(out, "w1 drained") || !strings.Contains(out, "only copy of t7") || strings.Contains(out, "no session") {
		t.Fatalf("drain: exit %d\n%s", code, out)
	}
	out, code = runCmd(t, workersCmd(), "drain", "w5", "--addr", addr, "--json")
	var got drainJSON
	if err := json.Unmarshal([]byte(out), &got); code != exitOK || err != nil || got.WorkerID != "w5" || !got.Drained ||
		got.Index != 9 || !slices.Equal(got.OnlyCopy, []string{"t7"}) || got.Connected == nil || *got.Connected {
		t.Fatalf("drain --json: exit %d %v\n%s", code, err, out)
	}
	out, code = runCmd(t, workersCmd(), "undrain", "w1", "--addr", addr)
	if code != exitOK || !strings.Contains(out, "w1 undrained") {
		t.Fatalf("undrain: exit %d\n%s", code, out)
	}
	if !slices.Equal(f.drains, []string{"+w1", "+w5", "-w1"}) {
		t.Fatalf("drains asked %v", f.drains)
	}
	if _, code := runCmd(t, workersCmd(), "drain", "old", "--addr", addr); code != 1 {
		t.Fatalf("drain refused by the cluster's state: exit %d, want 1", code)
	}
	if _, code := runCmd(t, workersCmd(), "drain", "--addr", addr); code != exitUsage {
		t.Fatalf("drain without a worker: exit %d, want %d", code, exitUsage)
	}
}
