package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/client"
	"github.com/xce/xce/integration/faultnet"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// loadRun is a bench load in the background, recording a history.
type loadRun struct {
	hist   bench.History
	cancel context.CancelFunc
	done   chan error
	res    *bench.Result
}

func startLoad(t *testing.T, endpoints []string, clients int) *loadRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadRun{cancel: cancel, done: make(chan error, 1)}
	go func() {
		res, err := bench.Run(ctx, bench.Load{Endpoints: endpoints, Clients: clients, OpTimeout: 20 * time.Second}, &l.hist)
		l.res = res
		l.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-l.done
	})
	return l
}

// acked counts acknowledged submits so far.
func (l *loadRun) acked() int {
	n := 0
	for _, op := range l.hist.Ops() {
		if op.Kind == bench.Submit && op.Outcome == bench.OK {
			n++
		}
	}
	return n
}

// waitProgress waits until n more submits are acknowledged.
func (l *loadRun) waitProgress(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	want := l.acked() + n
	if err := testutil.Poll(timeout, pollEvery, func() error {
		if got := l.acked(); got < want {
			return fmt.Errorf("%d acknowledged submits, want %d", got, want)
		}
		return nil
	}); err != nil {
		t.Fatalf("load made no progress: %v", err)
	}
}

// stopAndCheck ends the load, reads every task linearizably and checks the
// history: linearizable, nothing acknowledged lost, nothing applied twice.
func (l *loadRun) stopAndCheck(t *testing.T, cl *client.Client) []bench.Op {
	t.Helper()
	l.cancel()
	if err := <-l.done; err != nil {
		t.Fatalf("load: %v", err)
	}
	l.done <- nil // for the cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks, err := cl.List(ctx, false)
	if err != nil {
		t.Fatalf("final list: %v", err)
	}
	final := map[string]bool{}
	for _, tk := range tasks {
		if final[tk.TaskId] {
			t.Errorf("task %s listed twice", tk.TaskId)
		}
		final[tk.TaskId] = true
	}
	ops := l.hist.Ops()
	dir, err := os.MkdirTemp("", "xce-history-")
	if err != nil {
		t.Fatal(err)
	}
	v, err := bench.Check(ops, final, time.Minute, filepath.Join(dir, "history.html"))
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	t.Logf("history: %d ops (%d acked submits, %.0f ops/s, %d retries), linearizable=%v (%s), lost=%d, duplicates=%d",
		len(ops), v.Acked, float64(l.res.Ops)/l.res.Elapsed.Seconds(), l.res.Retries, v.Linearizable, v.CheckResult, v.Lost, v.Duplicates)
	if !v.OK() {
		t.Errorf("history check failed: linearizable=%v (%s) lost=%d duplicates=%d; visualisation kept in %s",
			v.Linearizable, v.CheckResult, v.Lost, v.Duplicates, v.HistoryFile)
	} else {
		os.RemoveAll(dir)
	}
	if v.Acked == 0 {
		t.Error("no submit was acknowledged")
	}
	return ops
}

// TestFailoverKillPrimaryUnderLoad SIGKILLs the primary three times during
// a 64-client write load, restarting each victim before the next kill.
func TestFailoverKillPrimaryUnderLoad(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"))
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	load := startLoad(t, c.Addrs(), 64)
	var kills []time.Time
	for k := 1; k <= 3; k++ {
		load.waitProgress(t, 200, 30*time.Second)
		p := c.WaitRoles(20 * time.Second)
		t0 := time.Now()
		c.Kill(p)
		kills = append(kills, t0)
		var live []int
		for i := range c.N() {
			if i != p {
				live = append(live, i)
			}
		}
		np, _, err := c.waitRolesAmong(20*time.Second, live)
		if err != nil {
			t.Fatalf("kill %d: no new primary: %v", k, err)
		}
		t.Logf("kill %d: SIGKILL %s; %s PRIMARY (status) after %v", k, c.Node(p).ID, c.Node(np).ID, time.Since(t0).Round(time.Millisecond))
		c.Start(p)
		c.WaitRoles(raceSlack(20 * time.Second))
	}
	load.waitProgress(t, 200, 30*time.Second)
	ops := load.stopAndCheck(t, c.Client())
	for i, k := range kills {
		d, ok := bench.FailoverAfter(ops, k)
		if !ok {
			t.Errorf("kill %d: no acknowledged write after it", i+1)
			continue
		}
		t.Logf("kill %d: client-visible failover %v", i+1, d.Round(time.Millisecond))
		if d > 3*time.Second {
			t.Errorf("kill %d: failover took %v (> 3s)", i+1, d)
		}
	}
}

// partitionedCluster puts a faultnet proxy in front of every node's peer
// listener: a node binds 127.0.0.(11+i) and dials out from it, and peers
// reach it through the proxy at its advertised peer_addr.
func partitionedCluster(t *testing.T, n int) (*Cluster, *faultnet.Net) {
	t.Helper()
	c := newCluster(t, n, WithLogLevel("info"))
	fn := faultnet.New()
	t.Cleanup(func() { fn.Close() })
	for i := range n {
		nd := c.Node(i)
		_, port, err := net.SplitHostPort(nd.PeerAddr)
		if err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("127.0.0.%d", 11+i)
		listen := net.JoinHostPort(ip, port)
		fn.Node(nd.ID, ip)
		if _, err := fn.Proxy(nd.PeerAddr, nd.ID, listen); err != nil {
			t.Fatalf("proxy for %s: %v", nd.ID, err)
		}
		spec := c.ConfigSpec(i)
		spec.PeerListenAddr = listen
		if err := os.WriteFile(nd.ConfigPath, []byte(spec.YAML()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c, fn
}

// TestPartitionIsolatedPrimary cuts the primary off from both peers under
// load: the majority elects a new primary, the isolated node stops
// admitting writes within its lease, rejoins as STANDBY once healed, and the
// history stays linearizable.
func TestPartitionIsolatedPrimary(t *testing.T) {
	c, fn := partitionedCluster(t, 3)
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	load := startLoad(t, c.Addrs(), 8)
	load.waitProgress(t, 100, 30*time.Second)

	// The primary of this moment: a stalled heartbeat on a loaded machine
	// may have moved it since the cluster first settled.
	p := c.WaitRoles(raceSlack(10 * time.Second))
	t0 := time.Now()
	fn.Isolate(c.Node(p).ID)
	// The isolated node stops admitting writes.
	var stoppedAfter time.Duration
	if err := testutil.Poll(raceSlack(3*time.Second), 10*time.Millisecond, func() error {
		s, err := c.Status(p)
		if err != nil {
			return err
		}
		if s.Role == xcev1.Role_ROLE_PRIMARY && s.WriteQuorum {
			return errors.New("still PRIMARY with write quorum")
		}
		stoppedAfter = time.Since(t0)
		return nil
	}); err != nil {
		t.Fatalf("isolated %s: %v", c.Node(p).ID, err)
	}
	s, _ := c.Status(p)
	t.Logf("isolated %s stopped admitting writes after %v: %s", c.Node(p).ID, stoppedAfter.Round(time.Millisecond), describeStatus(s))
	// A client pinned to the isolated node: one following the members
	// would reach the new primary through the client ports, which the
	// partition leaves open.
	opts := c.clientOptions()
	opts.RefreshInterval = -1
	pinned, err := client.New([]string{c.Node(p).ClientAddr}, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err = pinned.Submit(ctx, client.Task{ID: "to-the-isolated-node"})
	cancel()
	var nr *client.NotReadyError
	if !errors.As(err, &nr) || nr.Last == nil {
		t.Errorf("write to the isolated node: %v, want NOT_READY", err)
	} else {
		t.Logf("write to the isolated node: %v", err)
		if nr.Last.Reason != "no write quorum" {
			t.Errorf("isolated node's NOT_READY reason %q, want \"no write quorum\"", nr.Last.Reason)
		}
	}
	// The majority elects a new primary and keeps serving.
	var majority []int
	for i := range c.N() {
		if i != p {
			majority = append(majority, i)
		}
	}
	np, _, err := c.waitRolesAmong(raceSlack(5*time.Second), majority)
	if err != nil {
		t.Fatalf("majority side: %v", err)
	}
	t.Logf("majority elected %s after %v", c.Node(np).ID, time.Since(t0).Round(time.Millisecond))
	load.waitProgress(t, 100, 30*time.Second)

	fn.Heal()
	t1 := time.Now()
	if got := c.WaitRoles(raceSlack(10 * time.Second)); got == p {
		t.Logf("note: %s was elected again after the heal", c.Node(p).ID)
	}
	t.Logf("healed: one PRIMARY and two STANDBY after %v", time.Since(t1).Round(time.Millisecond))
	load.waitProgress(t, 50, 30*time.Second)
	load.stopAndCheck(t, c.Client())
}

// TestBenchKillPrimaryJSON runs the bench docs/benchmarks.md documents and checks
// its verdict.
func TestBenchKillPrimaryJSON(t *testing.T) {
	r := runXCE(t, 3*time.Minute, "bench", "--local", "3", "--kill-primary", "2", "--json", "--duration", "12s", "--clients", "16")
	if r.Code != 0 {
		t.Fatalf("xce bench exit %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, lastBytes(r.Stderr, 2000))
	}
	var out struct {
		Ops          int64                                `json:"ops"`
		OpsPerSec    float64                              `json:"ops_per_sec"`
		Errors       int64                                `json:"errors"`
		Retries      int64                                `json:"not_ready_retries"`
		Latency      struct{ P50, P95, P99, Max float64 } `json:"latency_ms"`
		FailoversMs  []float64                            `json:"failovers_ms"`
		Linearizable bool                                 `json:"linearizable"`
		Lost         int                                  `json:"lost"`
		Duplicates   int                                  `json:"duplicates"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("bench output is not one JSON object: %v\n%s", err, r.Stdout)
	}
	t.Logf("bench: %d ops, %.0f ops/s, p99 %.1f ms, failovers %v ms, retries %d, took %v",
		out.Ops, out.OpsPerSec, out.Latency.P99, out.FailoversMs, out.Retries, r.Elapsed.Round(time.Second))
	if !out.Linearizable || out.Lost != 0 || out.Duplicates != 0 {
		t.Errorf("verdict: linearizable=%v lost=%d duplicates=%d", out.Linearizable, out.Lost, out.Duplicates)
	}
	if len(out.FailoversMs) != 2 {
		t.Errorf("failovers_ms %v, want 2 entries", out.FailoversMs)
	}
	for _, f := range out.FailoversMs {
		if f <= 0 || f > 3000 {
			t.Errorf("failover %v ms out of (0, 3000]", f)
		}
	}
	if out.Ops == 0 || out.Latency.P50 <= 0 {
		t.Errorf("no load measured: %+v", out)
	}
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestFailoverLeaderExitDetected runs raft with a 3 s heartbeat timeout: on
// its own raft would elect no one for 3–6 s after the primary dies. The
// followers notice the SIGKILLed primary's port refusing connections and
// elect at once; a SIGSTOPped primary (port still accepting) is left to the
// heartbeat timeout.
func TestFailoverLeaderExitDetected(t *testing.T) {
	c := newCluster(t, 3, WithRaft(3*time.Second, 3*time.Second, time.Second), WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(20 * time.Second))
	others := func(p int) []int {
		var o []int
		for i := range c.N() {
			if i != p {
				o = append(o, i)
			}
		}
		return o
	}
	waitWatching := func(p int) {
		t.Helper()
		want := fmt.Sprintf(`"leader":"%s"`, c.Node(p).ID)
		if err := testutil.Poll(raceSlack(10*time.Second), pollEvery, func() error {
			for _, i := range others(p) {
				if !slices.ContainsFunc(strings.Split(c.RunLog(i), "\n"), func(l string) bool {
					return strings.Contains(l, "watching the leader's peer port") && strings.Contains(l, want)
				}) {
					return fmt.Errorf("%s does not watch %s yet", c.Node(i).ID, c.Node(p).ID)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// A paused primary still accepts connections: no early election.
	waitWatching(p)
	c.Signal(p, syscall.SIGSTOP)
	stopped := time.Now()
	if np, _, err := c.waitRolesAmong(1500*time.Millisecond, others(p)); err == nil {
		t.Fatalf("%s became PRIMARY %v after %s was paused: only an exited leader may be replaced early",
			c.Node(np).ID, time.Since(stopped).Round(time.Millisecond), c.Node(p).ID)
	}
	c.Signal(p, syscall.SIGCONT)
	p = c.WaitRoles(raceSlack(30 * time.Second))

	// An exited primary is replaced well within raft's 3 s timeout.
	waitWatching(p)
	t0 := time.Now()
	c.Kill(p)
	np, _, err := c.waitRolesAmong(2*time.Second, others(p))
	if err != nil {
		t.Fatalf("no new PRIMARY within 2 s of SIGKILL (heartbeat timeout 3 s): %v", err)
	}
	t.Logf("SIGKILL %s: %s PRIMARY after %v", c.Node(p).ID, c.Node(np).ID, time.Since(t0).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client().Submit(ctx, client.Task{ID: "after-exit"}); err != nil {
		t.Errorf("submit after failover: %v", err)
	}
}

// killPrimaryUnderLoad SIGKILLs the primary p while load runs, waits for
// a new primary among the others, restarts p, and checks the load's
// history (linearizable, nothing lost).
func killPrimaryUnderLoad(t *testing.T, c *Cluster, p int, load *loadRun) {
	t.Helper()
	t0 := time.Now()
	c.Kill(p)
	var live []int
	for i := range c.N() {
		if i != p {
			live = append(live, i)
		}
	}
	np, _, err := c.waitRolesAmong(20*time.Second, live)
	if err != nil {
		t.Fatalf("no new primary after SIGKILL of %s: %v", c.Node(p).ID, err)
	}
	t.Logf("SIGKILL %s; %s PRIMARY after %v", c.Node(p).ID, c.Node(np).ID, time.Since(t0).Round(time.Millisecond))
	c.Start(p)
	c.WaitRoles(raceSlack(20 * time.Second))
	load.waitProgress(t, 100, 30*time.Second)
	load.stopAndCheck(t, c.Client())
}
