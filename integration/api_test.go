package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// A Submit through a lone node is retried through NOT_READY until the other
// nodes arrive and a primary is elected, and then succeeds.
func TestAPISubmitWaitsForElection(t *testing.T) {
	c := newCluster(t, 3)
	c.Start(0)
	cl := c.ClientOf(c.Node(0).ClientAddr)
	type result struct {
		r   *xcev1.SubmitTaskResponse
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := cl.Submit(ctx, client.Task{ID: "early-bird", Stateful: true})
		done <- result{r, err, time.Now()}
	}()

	// The scenario: the quorum arrives two seconds later.
	var res result
	select {
	case res = <-done:
		t.Fatalf("submit returned before a quorum existed: %v %v", res.r, res.err)
	case <-time.After(2 * time.Second):
	}
	others := time.Now()
	c.Start(1)
	c.Start(2)
	res = <-done
	if res.err != nil {
		t.Fatalf("submit: %v", res.err)
	}
	t.Logf("submit succeeded %v after start, %v after nodes 2 and 3 started (index %d)",
		res.at.Sub(start).Round(time.Millisecond), res.at.Sub(others).Round(time.Millisecond), res.r.Index)
	if res.r.Task.GetTaskId() != "early-bird" {
		t.Errorf("answer names task %q", res.r.Task.GetTaskId())
	}
	n, err := c.Metric(0, "xce_not_ready_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("node 1 xce_not_ready_total = %v", n)
	if n <= 0 {
		t.Errorf("xce_not_ready_total on node 1 = %v, want > 0", n)
	}
}

// A shared three-node cluster for API tests that do not stop nodes.
func TestAPI(t *testing.T) {
	c := newCluster(t, 3)
	c.StartAll()
	p := c.WaitRoles(10 * time.Second)

	t.Run("ReadBeforeAnyWrite", func(t *testing.T) { testReadBeforeAnyWrite(t, c) })
	t.Run("SubmitThroughStandby", func(t *testing.T) { testSubmitThroughStandby(t, c, p) })
	t.Run("RetryStorm", func(t *testing.T) { testRetryStorm(t, c) })
	t.Run("BadInput", func(t *testing.T) { testBadInput(t, c, p) })
	t.Run("CurlExample", func(t *testing.T) { testCurlExample(t, c, p) })
	t.Run("RuntimeMetrics", func(t *testing.T) { testRuntimeMetrics(t, c) })
}

// A freshly elected primary serves linearizable reads before anything was
// written: the read barrier must not wait for an FSM index that raft's own
// no-op and barrier entries never bring.
func testReadBeforeAnyWrite(t *testing.T, c *Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := c.Client()
	start := time.Now()
	tasks, err := cl.List(ctx, false)
	t.Logf("linearizable List on a fresh cluster: %d tasks, err %v, after %v", len(tasks), err, time.Since(start).Round(time.Millisecond))
	if err != nil || len(tasks) != 0 {
		t.Errorf("List: %v %v, want no task and no error", tasks, err)
	}
	start = time.Now()
	_, err = cl.Get(ctx, "nothing-here", false)
	t.Logf("linearizable Get of an unknown task: %v after %v", err, time.Since(start).Round(time.Millisecond))
	if !errors.Is(err, client.ErrNotFound) {
		t.Errorf("Get of an unknown task: %v, want ErrNotFound", err)
	}
}

// Submit through a STANDBY's address only: the leader hint is followed; the
// task then reads back with stale reads from every node.
func testSubmitThroughStandby(t *testing.T, c *Cluster, p int) {
	sb := (p + 1) % c.N()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var hints []string
	cl, err := client.New([]string{c.Node(sb).ClientAddr}, client.Options{OnRetry: func(nr *xcev1.NotReady, err error) {
		if nr != nil {
			hints = append(hints, fmt.Sprintf("%s leader=%s@%s", nr.Reason, nr.LeaderId, nr.LeaderAddr))
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := cl.Submit(ctx, client.Task{ID: "via-standby", StandbyReplicas: 2})
	if err != nil {
		t.Fatalf("submit through standby %s: %v", c.Node(sb).ID, err)
	}
	t.Logf("submitted through %s at index %d; retries: %v", c.Node(sb).ID, r.Index, hints)
	for i := range c.N() {
		one := c.ClientOf(c.Node(i).ClientAddr)
		var got *xcev1.GetTaskResponse
		err := testutil.Poll(5*time.Second, pollEvery, func() error {
			var err error
			got, err = one.Get(ctx, "via-standby", true)
			return err
		})
		if err != nil {
			t.Errorf("stale read from %s: %v", c.Node(i).ID, err)
			continue
		}
		if got.Task.CreatedIndex != r.Index || got.Task.StandbyReplicas != 2 || got.AppliedIndex < r.Index {
			t.Errorf("stale read from %s: %v (applied %d), submitted at %d", c.Node(i).ID, got.Task, got.AppliedIndex, r.Index)
		}
	}
}

// 50 clients retry one write (same client id and request id) at once:
// exactly one task, and 50 identical answers.
func testRetryStorm(t *testing.T, c *Cluster) {
	const n = 50
	before, err := c.Client().List(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	opts := client.Options{ClientID: "storm-client"}
	task := client.Task{ID: "storm-task", Stateful: true, StandbyReplicas: 1}
	answers := make([]*xcev1.SubmitTaskResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	ready := make(chan struct{})
	start := time.Now()
	for g := range n {
		cl, err := client.New(c.Addrs(), opts)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			<-ready
			answers[g], errs[g] = cl.SubmitWithID(ctx, task, "storm-request-1")
		})
	}
	close(ready)
	wg.Wait()
	t.Logf("%d concurrent retries answered in %v", n, time.Since(start).Round(time.Millisecond))
	for g := range n {
		if errs[g] != nil {
			t.Fatalf("goroutine %d: %v", g, errs[g])
		}
		if answers[g].Index != answers[0].Index || !proto.Equal(answers[g].Task, answers[0].Task) {
			t.Errorf("answer %d = %v, answer 0 = %v", g, answers[g], answers[0])
		}
	}
	after, err := c.Client().List(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, tk := range after {
		if tk.TaskId == task.ID {
			count++
		}
	}
	if count != 1 || len(after) != len(before)+1 {
		t.Errorf("after the storm: %d tasks named %s, %d tasks in all (before: %d), want 1 and %d",
			count, task.ID, len(after), len(before), len(before)+1)
	}
	t.Logf("one task at index %d", answers[0].Index)
	for i := range c.N() {
		if h, err := c.Metric(i, "xce_dedup_hits_total"); err == nil {
			t.Logf("%s xce_dedup_hits_total = %v", c.Node(i).ID, h)
		}
	}
}

// connectPost POSTs a JSON body to a Connect unary procedure and returns the
// HTTP status, the Connect error code of the body (if any) and the body.
func connectPost(t *testing.T, addr, method string, body []byte) (int, string, string) {
	t.Helper()
	url := "http://" + addr + "/xce.v1.ControllerService/" + method
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Timeout: 10 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Code, string(b)
}

// Bad input over raw HTTP JSON gets the right Connect errors and changes
// nothing.
func testBadInput(t *testing.T, c *Cluster, p int) {
	addr := c.Node(p).ClientAddr
	before, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	// The writes the API sent to raft (the node's own entries, such as
	// outbox trims and a new term's records, go apart).
	const apiWrites = "xce_apply_seconds_count"
	writesBefore, err := c.Metric(p, apiWrites)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method string
		body         []byte
		http         []int
		code         []string
	}{
		{"malformed JSON", "SubmitTask", []byte(`{"taskId": "x",`), []int{400}, []string{"invalid_argument"}},
		{"oversized body", "SubmitTask", []byte(`{"taskId":"` + strings.Repeat("a", 70<<10) + `"}`),
			[]int{413, 429}, []string{"resource_exhausted"}},
		{"bad task id", "SubmitTask", []byte(`{"taskId":"bad id/../x"}`), []int{400}, []string{"invalid_argument"}},
		{"unknown task", "GetTask", []byte(`{"taskId":"no-such-task"}`), []int{404}, []string{"not_found"}},
	}
	for _, tc := range cases {
		status, code, body := connectPost(t, addr, tc.method, tc.body)
		if len(body) > 200 {
			body = body[:200] + "…"
		}
		t.Logf("%s: HTTP %d code %q body %s", tc.name, status, code, body)
		okStatus := false
		for _, s := range tc.http {
			okStatus = okStatus || s == status
		}
		okCode := false
		for _, s := range tc.code {
			okCode = okCode || s == code
		}
		if status == http.StatusOK || !okStatus || !okCode {
			t.Errorf("%s: HTTP %d code %q, want HTTP %v code %v", tc.name, status, code, tc.http, tc.code)
		}
	}
	after, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	writesAfter, err := c.Metric(p, apiWrites)
	if err != nil {
		t.Fatal(err)
	}
	if after.Tasks != before.Tasks || writesAfter != writesBefore {
		t.Errorf("bad input changed state: tasks %d -> %d, writes sent to raft %v -> %v",
			before.Tasks, after.Tasks, writesBefore, writesAfter)
	}
}

// The README's curl example works against the primary.
func testCurlExample(t *testing.T, c *Cluster, p int) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, curl, "-s", "-H", "Content-Type: application/json",
		"-d", `{"taskId":"curl-1"}`,
		"http://"+c.Node(p).ClientAddr+"/xce.v1.ControllerService/SubmitTask").Output()
	if err != nil {
		t.Fatalf("curl: %v (output %q)", err, out)
	}
	t.Logf("curl: %s", bytes.TrimSpace(out))
	var resp struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
		Index string `json:"index"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("curl answer is not the JSON of a SubmitTaskResponse: %v: %s", err, out)
	}
	if resp.Task.TaskID != "curl-1" {
		t.Errorf("task.taskId = %q, want curl-1", resp.Task.TaskID)
	}
}

// `xce submit` against a lone node gives up at its timeout with exit code 3.
func TestAPICLISubmitNotReady(t *testing.T) {
	c := newCluster(t, 3)
	c.Start(0)
	r := runXCE(t, 15*time.Second, "submit", "early", "--addr", c.Node(0).ClientAddr, "--timeout", "1s")
	t.Logf("xce submit: exit %d after %v; stderr: %s", r.Code, r.Elapsed.Round(time.Millisecond), strings.TrimSpace(r.Stderr))
	if r.Code != 3 {
		t.Errorf("exit code %d, want 3 (not ready)", r.Code)
	}
	if !strings.Contains(r.Stderr, "not ready") {
		t.Errorf("stderr %q does not say \"not ready\"", r.Stderr)
	}
	if r.Elapsed > 5*time.Second {
		t.Errorf("took %v with --timeout 1s", r.Elapsed)
	}
}

// With two of three nodes killed, the survivor answers Status and refuses
// writes with NOT_READY within the caller's deadline; once one node is back
// writes succeed and every acknowledged task is still there.
func TestAPIQuorumLoss(t *testing.T) {
	for _, v := range []struct {
		name        string
		killPrimary bool
	}{
		{"primary and standby killed", true},
		{"both standbys killed", false},
	} {
		t.Run(v.name, func(t *testing.T) {
			c := newCluster(t, 3)
			c.StartAll()
			p := c.WaitRoles(10 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cl := c.Client()
			var acked []string
			for k := range 5 {
				id := fmt.Sprintf("acked-%d", k)
				if _, err := cl.Submit(ctx, client.Task{ID: id}); err != nil {
					t.Fatalf("submit %s: %v", id, err)
				}
				acked = append(acked, id)
			}

			var standbys []int
			for i := range c.N() {
				if i != p {
					standbys = append(standbys, i)
				}
			}
			victims, survivor := standbys, p
			if v.killPrimary {
				victims, survivor = []int{p, standbys[0]}, standbys[1]
			}
			for _, i := range victims {
				c.Kill(i)
			}
			t.Logf("killed %s and %s; survivor %s", c.Node(victims[0]).ID, c.Node(victims[1]).ID, c.Node(survivor).ID)
			if s, err := c.Status(survivor); err != nil {
				t.Errorf("survivor Status right after the kills: %v", err)
			} else {
				t.Logf("survivor right after the kills: %s", describeStatus(s))
			}

			start := time.Now()
			sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := c.Client().Submit(sctx, client.Task{ID: "no-quorum"})
			scancel()
			took := time.Since(start)
			t.Logf("submit without quorum: %v after %v", err, took.Round(time.Millisecond))
			if !errors.Is(err, client.ErrNotReady) {
				t.Errorf("submit without quorum: %v, want ErrNotReady", err)
			}
			if took > 4*time.Second {
				t.Errorf("submit with a 2s deadline took %v", took)
			}
			s, err := c.Status(survivor)
			if err != nil {
				t.Fatalf("survivor Status without quorum: %v", err)
			}
			t.Logf("survivor without quorum: %s", describeStatus(s))
			if s.Role == xcev1.Role_ROLE_PRIMARY && s.WriteQuorum {
				t.Errorf("survivor claims a write quorum alone: %s", describeStatus(s))
			}

			// One node back: a quorum again.
			back := victims[0]
			start = time.Now()
			c.Start(back)
			if _, err := cl.Submit(ctx, client.Task{ID: "after-recovery"}); err != nil {
				t.Fatalf("submit after %s restarted: %v", c.Node(back).ID, err)
			}
			t.Logf("restarted %s; a submit succeeded %v later", c.Node(back).ID, time.Since(start).Round(time.Millisecond))
			tasks, err := cl.List(ctx, false)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			have := map[string]bool{}
			for _, tk := range tasks {
				have[tk.TaskId] = true
			}
			for _, id := range append(acked, "after-recovery") {
				if !have[id] {
					t.Errorf("acknowledged task %s lost; tasks: %v", id, tasks)
				}
			}
		})
	}
}

// testRuntimeMetrics: every node exports the Go scheduler's latency and GC
// pause histograms, what an operator reads when a leader misses its lease.
func testRuntimeMetrics(t *testing.T, c *Cluster) {
	for i := 0; i < 3; i++ {
		for _, name := range []string{"go_sched_latencies_seconds_count", "go_sched_pauses_total_gc_seconds_count"} {
			n, err := c.Metric(i, name)
			if err != nil {
				t.Fatal(err)
			}
			if n <= 0 {
				t.Errorf("node %d: %s = %v, want > 0", i+1, name, n)
			}
		}
	}
}
