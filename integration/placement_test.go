package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// Worker timings of the placement tests: short sessions so that a dead
// worker is noticed in seconds, and a restore that takes about two seconds
// (initial lag 40000 at 20000 records/s; caught up below 10000).
const (
	itSessionTimeout = 3 * time.Second
)

// itAssignor: one standby each, and a short worker session.
func itAssignor(cfg *configs.Config) {
	itSessions(cfg)
	a := &cfg.Assignor
	a.NumStandbyReplicas, a.AcceptableRecoveryLag = 1, 10000
}

// itSessions: a short worker session, the assignor's policy left as it is.
func itSessions(cfg *configs.Config) {
	a := &cfg.Assignor
	a.SessionTimeout = configs.Duration{Duration: itSessionTimeout}
	a.HeartbeatInterval = configs.Duration{Duration: 300 * time.Millisecond}
}

// workerProc is one `xce worker` process of a test.
type workerProc struct {
	id   string
	log  string
	proc *localcluster.Process
}

// workers runs reference workers against a cluster and kills them at the
// end of the test, printing their logs' tails when it failed.
type workers struct {
	t  *testing.T
	c  *Cluster
	mu sync.Mutex
	ps map[string]*workerProc
}

func newWorkers(t *testing.T, c *Cluster) *workers {
	w := &workers{t: t, c: c, ps: map[string]*workerProc{}}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, p := range w.ps {
			if !p.proc.Exited() {
				_, _ = p.proc.Kill(10 * time.Second)
			}
			if t.Failed() {
				t.Logf("---- last 20 lines of worker %s ----\n%s", p.id, tailLines(p.log, 20, 400))
			}
		}
	})
	return w
}

// start starts worker id, with extra flags of xce worker after the usual
// ones.
func (w *workers) start(id string, extra ...string) {
	w.t.Helper()
	log := filepath.Join(w.c.dir, "worker-"+id+".log")
	args := append([]string{"worker", "--id", id, "--controllers", strings.Join(w.c.Addrs(), ","),
		"--capacity", "1", "--restore-rate", "20000", "--initial-lag", "40000", "--client-addr", id + ".workers.test:7000"}, extra...)
	proc, err := localcluster.StartProcess(xceBin, log, true, args...)
	if err != nil {
		w.t.Fatalf("start worker %s: %v", id, err)
	}
	p := &workerProc{id: id, log: log, proc: proc}
	w.mu.Lock()
	w.ps[id] = p
	w.mu.Unlock()
}

func (w *workers) kill(id string) {
	w.t.Helper()
	w.mu.Lock()
	p := w.ps[id]
	w.mu.Unlock()
	if _, err := p.proc.Kill(10 * time.Second); err != nil {
		w.t.Fatalf("kill worker %s: %v", id, err)
	}
}

// assignment reads the committed assignment from the primary, with its
// soft facts (lags), trying every live node.
func (c *Cluster) assignment() (*xcev1.GetAssignmentResponse, error) {
	var errs []error
	for _, i := range c.Live() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		cl := xcev1connect.NewControllerServiceClient(http.DefaultClient, "http://"+c.nodes[i].ClientAddr)
		resp, err := cl.GetAssignment(ctx, connect.NewRequest(&xcev1.GetAssignmentRequest{}))
		cancel()
		if err == nil {
			return resp.Msg, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.nodes[i].ID, err))
	}
	return nil, errors.Join(errs...)
}

type placementOf map[string]*xcev1.TaskPlacement

func placements(a *xcev1.GetAssignmentResponse) placementOf {
	m := placementOf{}
	for _, t := range a.Tasks {
		m[t.Placement.TaskId] = t.Placement
	}
	return m
}

func (m placementOf) String() string {
	var b strings.Builder
	for _, id := range slices.Sorted(maps.Keys(m)) {
		p := m[id]
		fmt.Fprintf(&b, "%s:%s@%d|%s|%s ", id, p.Active, p.Epoch, strings.Join(p.Standbys, ","), strings.Join(p.Warmups, ","))
	}
	return b.String()
}

// settledPlacement waits until every task has an active and its standby,
// no warm-ups are left, every standby is caught up, and the actives are
// balanced over the given workers (each holds total/len ± 1).
func settledPlacement(t *testing.T, c *Cluster, tasks int, workers []string, timeout time.Duration) *xcev1.GetAssignmentResponse {
	t.Helper()
	return settledCopies(t, c, tasks, workers, 1, timeout)
}

// settledCopies is settledPlacement with the given number of standbys per
// task, each caught up, and every copy on one of workers.
func settledCopies(t *testing.T, c *Cluster, tasks int, workers []string, standbys int, timeout time.Duration) *xcev1.GetAssignmentResponse {
	t.Helper()
	var last *xcev1.GetAssignmentResponse
	err := testutil.Poll(timeout, 100*time.Millisecond, func() error {
		a, err := c.assignment()
		if err != nil {
			return err
		}
		last = a
		if len(a.Tasks) != tasks {
			return fmt.Errorf("%d tasks in the assignment, want %d", len(a.Tasks), tasks)
		}
		per := map[string]int{}
		for _, ta := range a.Tasks {
			p := ta.Placement
			if p.Active == "" || len(p.Standbys) != standbys || len(p.Warmups) != 0 {
				return fmt.Errorf("task %s placed %v|%v|%v", p.TaskId, p.Active, p.Standbys, p.Warmups)
			}
			for _, w := range append([]string{p.Active}, p.Standbys...) {
				if !slices.Contains(workers, w) {
					return fmt.Errorf("task %s: a copy on %s, not one of %v", p.TaskId, w, workers)
				}
			}
			for _, s := range p.Standbys {
				if lag, ok := ta.Lags[s]; !ok || lag > 10000 {
					return fmt.Errorf("task %s: standby %s not caught up (lag %d, reported %v)", p.TaskId, s, lag, ok)
				}
			}
			per[p.Active]++
		}
		lo, hi := tasks/len(workers), (tasks+len(workers)-1)/len(workers)
		for _, w := range workers {
			if per[w] < lo || per[w] > hi {
				return fmt.Errorf("worker %s runs %d actives, want %d-%d (%v)", w, per[w], lo, hi, per)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("placement not settled within %v: %v\nlast: %v", timeout, err, placements(last))
	}
	return last
}

// placementCluster starts three servers (short worker sessions), workers
// w1..w3, and submits n stateful tasks t00...
func placementCluster(t *testing.T, n int, workerFlags ...func(id string) []string) (*Cluster, *workers) {
	t.Helper()
	c := newCluster(t, 3, WithLogLevel("info"), WithConfig(itAssignor))
	c.StartAll()
	c.WaitRoles(raceSlack(15 * time.Second))
	ws := newWorkers(t, c)
	for _, id := range []string{"w1", "w2", "w3"} {
		var extra []string
		for _, f := range workerFlags {
			extra = append(extra, f(id)...)
		}
		ws.start(id, extra...)
	}
	cl := c.Client()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := cl.Submit(ctx, client.Task{ID: fmt.Sprintf("t%02d", i), Stateful: true})
		cancel()
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	return c, ws
}

// TestWorkerDeathAndJoin: 3 workers, 12 stateful tasks with one standby.
// A SIGKILLed worker's tasks get an active again within the session timeout
// (plus slack), each on the worker that was its caught-up standby; a new
// worker gets warm-ups first and then its share of actives, long before the
// probing interval (10 minutes).
func TestWorkerDeathAndJoin(t *testing.T) {
	const tasks = 12
	c, ws := placementCluster(t, tasks)
	before := placements(settledPlacement(t, c, tasks, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second)))
	var onW3 []string
	for id, p := range before {
		if p.Active == "w3" {
			onW3 = append(onW3, id)
		}
	}
	slices.Sort(onW3)

	// w3 dies.
	killed := time.Now()
	ws.kill("w3")
	var after placementOf
	err := testutil.Poll(itSessionTimeout+raceSlack(10*time.Second), 50*time.Millisecond, func() error {
		a, err := c.assignment()
		if err != nil {
			return err
		}
		after = placements(a)
		for _, id := range onW3 {
			if p := after[id]; p == nil || p.Active == "w3" || p.Active == "" {
				return fmt.Errorf("task %s still on %v", id, p)
			}
		}
		return nil
	})
	took := time.Since(killed)
	if err != nil {
		t.Fatalf("w3's tasks were not taken over: %v", err)
	}
	t.Logf("worker SIGKILL -> every task active again: %v (session timeout %v)", took.Round(time.Millisecond), itSessionTimeout)
	if limit := itSessionTimeout + raceSlack(2*time.Second); took > limit {
		t.Errorf("takeover took %v, more than session timeout + slack (%v)", took, limit)
	}
	for _, id := range onW3 {
		if want := before[id].Standbys[0]; after[id].Active != want {
			t.Errorf("task %s: active went to %s, want its caught-up standby %s", id, after[id].Active, want)
		}
	}

	// w4 joins: warm-ups first, then its share of actives.
	joined := time.Now()
	ws.start("w4")
	sawWarmup := false
	err = testutil.Poll(raceSlack(40*time.Second), 50*time.Millisecond, func() error {
		a, err := c.assignment()
		if err != nil {
			return err
		}
		n := 0
		for _, ta := range a.Tasks {
			if slices.Contains(ta.Placement.Warmups, "w4") {
				sawWarmup = true
			}
			if ta.Placement.Active == "w4" {
				n++
			}
		}
		if n < tasks/3 {
			return fmt.Errorf("w4 runs %d actives, want %d: %v", n, tasks/3, placements(a))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the new worker did not get its share: %v", err)
	}
	t.Logf("worker join -> share of actives: %v", time.Since(joined).Round(time.Millisecond))
	if !sawWarmup {
		t.Error("w4 took actives without warming up first")
	}
	settledPlacement(t, c, tasks, []string{"w1", "w2", "w4"}, raceSlack(30*time.Second))
}

// TestControllerFailoverKeepsPlacement: SIGKILL the primary; the new primary
// waits for the workers to report and changes no placement, and it gives
// every task the epoch the old one did (each node derives them itself).
func TestControllerFailoverKeepsPlacement(t *testing.T) {
	const tasks = 9
	c, _ := placementCluster(t, tasks)
	settled := settledPlacement(t, c, tasks, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second))
	before := placements(settled)
	for id, p := range before {
		if p.Epoch == 0 {
			t.Fatalf("task %s has active %s and epoch 0", id, p.Active)
		}
	}

	p := c.WaitRoles(raceSlack(5 * time.Second))
	c.Kill(p)
	c.WaitRoles(raceSlack(15 * time.Second))
	// Watch for twice the settle period (one session timeout) and more: the
	// placement and its generation must not change.
	deadline := time.Now().Add(2*itSessionTimeout + 2*time.Second)
	sawSettling := false
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		a, err := c.assignment()
		if err != nil {
			continue // a read during the election
		}
		sawSettling = sawSettling || a.Settling
		if a.Generation != settled.Generation || placements(a).String() != before.String() {
			t.Fatalf("controller failover changed the placement:\nbefore gen %d %v\nafter  gen %d %v",
				settled.Generation, before, a.Generation, placements(a))
		}
	}
	if !sawSettling {
		t.Error("the new primary never reported settling")
	}
	// The new primary hears every worker again.
	if err := testutil.Poll(raceSlack(10*time.Second), 100*time.Millisecond, func() error {
		a, err := c.assignment()
		if err != nil {
			return err
		}
		if a.Settling {
			return errors.New("still settling")
		}
		for _, ta := range a.Tasks {
			if _, ok := ta.Lags[ta.Placement.Active]; !ok {
				return fmt.Errorf("no lag report from %s for %s", ta.Placement.Active, ta.Placement.TaskId)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTaskStandbysThroughTheCLI: with the default num_standby_replicas (0),
// a task submitted with `xce submit --standbys 2` gets a standby on each of
// the two workers that do not run its active, and a task submitted without
// --standbys gets none; a submit asking for more than the assignor's
// maximum is refused.
func TestTaskStandbysThroughTheCLI(t *testing.T) {
	c := newCluster(t, 3, WithConfig(itSessions))
	c.StartAll()
	c.WaitRoles(raceSlack(15 * time.Second))
	ws := newWorkers(t, c)
	all := []string{"w1", "w2", "w3"}
	for _, id := range all {
		ws.start(id)
	}
	addr := strings.Join(c.Addrs(), ",")
	for _, args := range [][]string{{"T", "--stateful", "--standbys", "2"}, {"U", "--stateful"}} {
		r := runXCE(t, 30*time.Second, append([]string{"submit", "--addr", addr}, args...)...)
		if r.Code != 0 {
			t.Fatalf("xce submit %v: exit %d: %s", args, r.Code, r.Stderr)
		}
	}
	r := runXCE(t, 30*time.Second, "submit", "--addr", addr, "V", "--stateful", "--standbys", "17")
	if r.Code == 0 || !strings.Contains(r.Stderr, "standby_replicas: 17 is more than 16") {
		t.Errorf("xce submit --standbys 17: exit %d, stderr %q; want a refusal naming the limit", r.Code, r.Stderr)
	}

	var last placementOf
	err := testutil.Poll(raceSlack(30*time.Second), 100*time.Millisecond, func() error {
		a, err := c.assignment()
		if err != nil {
			return err
		}
		last = placements(a)
		tp, up := last["T"], last["U"]
		if tp == nil || up == nil {
			return fmt.Errorf("T or U not in the assignment")
		}
		if tp.Active == "" || len(tp.Warmups) != 0 {
			return fmt.Errorf("T placed %v|%v|%v", tp.Active, tp.Standbys, tp.Warmups)
		}
		others := slices.DeleteFunc(slices.Clone(all), func(w string) bool { return w == tp.Active })
		if !slices.Equal(tp.Standbys, others) {
			return fmt.Errorf("T's standbys %v, want %v", tp.Standbys, others)
		}
		if up.Active == "" || len(up.Standbys) != 0 {
			return fmt.Errorf("U placed %v|%v, want an active and no standby", up.Active, up.Standbys)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("per-task standbys not placed: %v\nlast: %v", err, last)
	}
	if _, ok := last["V"]; ok {
		t.Errorf("the refused task V was placed: %v", last)
	}
}
