package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

const bootstrapMsg = "bootstrapped a new cluster"

// firstAnswerBound is how soon after exec a node must answer Status: 200 ms
// (1.4 s for a -race build, see raceSlack; a run without -race checks the
// 200 ms promise itself).
var firstAnswerBound = raceSlack(200 * time.Millisecond)

// Three nodes from fresh data dirs elect exactly one PRIMARY.
func TestNodeElectsFromFreshDataDirs(t *testing.T) {
	c := newCluster(t, 3)
	start := time.Now()
	c.StartAll()
	p := c.WaitRoles(5 * time.Second)
	elapsed := time.Since(start)
	s, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("time to elect (3 nodes, fresh data dirs, from first Start): %v; primary %s, term %d",
		elapsed.Round(time.Millisecond), s.NodeId, s.Term)
	for i := range c.N() {
		if !strings.Contains(c.RunLog(i), bootstrapMsg) {
			t.Errorf("%s: fresh data dir but its log has no %q", c.Node(i).ID, bootstrapMsg)
		}
	}
}

// A node alone answers Status at once, as INIT or ELECTING, and never
// becomes PRIMARY without a quorum.
func TestNodeLoneAnswersAtOnce(t *testing.T) {
	c := newCluster(t, 3)
	start := time.Now()
	c.Start(0)
	var first *xcev1.StatusResponse
	var lastErr error
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for first == nil {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("no Status answer within 5s of start: %v", lastErr)
		}
		first, lastErr = c.Status(0)
		if first == nil {
			<-tick.C
		}
	}
	firstAnswer := time.Since(start)
	t.Logf("lone node: first Status answer %v after Start (role %s, reason %q)",
		firstAnswer.Round(100*time.Microsecond), roleName(first.Role), first.Reason)
	if firstAnswer > firstAnswerBound {
		t.Errorf("first Status answer took %v, want within %v of process start", firstAnswer, firstAnswerBound)
	}
	if r := first.Role; r != xcev1.Role_ROLE_INIT && r != xcev1.Role_ROLE_ELECTING {
		t.Errorf("first answer: role %s, want INIT or ELECTING", roleName(r))
	}

	// Keep polling for 1.5 s: every call answers, and the role never
	// leaves INIT/ELECTING.
	seen := map[string]int{}
	answers := 0
	end := time.Now().Add(1500 * time.Millisecond)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for time.Now().Before(end) {
		<-poll.C
		s, err := c.Status(0)
		if err != nil {
			t.Fatalf("Status failed %v after start: %v", time.Since(start), err)
		}
		answers++
		seen[roleName(s.Role)]++
		if s.Role != xcev1.Role_ROLE_INIT && s.Role != xcev1.Role_ROLE_ELECTING {
			t.Fatalf("lone node of 3 reports %s at %v: %s", roleName(s.Role), time.Since(start), describeStatus(s))
		}
	}
	t.Logf("lone node: %d answers over 1.5s, roles %v", answers, seen)

	// Health: the process is up, but not ready.
	if code, body, err := c.HTTPGet(0, "/healthz"); err != nil || code != http.StatusOK {
		t.Errorf("lone node /healthz: %d %q %v, want 200", code, body, err)
	}
	if code, body, err := c.HTTPGet(0, "/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Errorf("lone node /readyz: %d %q %v, want 503", code, body, err)
	}
}

// Stopping all three and starting them again on the same data elects again,
// in a higher term, without bootstrapping, and keeps the data.
func TestNodeRestartAllKeepsData(t *testing.T) {
	c := newCluster(t, 3)
	c.StartAll()
	p := c.WaitRoles(10 * time.Second)
	s, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	term1 := s.Term
	for i := range c.N() {
		if !strings.Contains(c.RunLog(i), bootstrapMsg) {
			t.Errorf("%s: first run on a fresh data dir but no %q in its log", c.Node(i).ID, bootstrapMsg)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Client().Submit(ctx, client.Task{ID: "survives-restart", Stateful: true, StandbyReplicas: 1})
	if err != nil {
		t.Fatalf("submit before restart: %v", err)
	}

	// Standbys first, the primary last; every one exits 0.
	order := []int{}
	for i := range c.N() {
		if i != p {
			order = append(order, i)
		}
	}
	order = append(order, p)
	for _, i := range order {
		t0 := time.Now()
		if code := c.Stop(i); code != 0 {
			t.Errorf("%s: exit code %d after SIGTERM, want 0", c.Node(i).ID, code)
		}
		t.Logf("%s stopped in %v", c.Node(i).ID, time.Since(t0).Round(time.Millisecond))
	}

	start := time.Now()
	c.StartAll()
	p2 := c.WaitRoles(10 * time.Second)
	s2, err := c.Status(p2)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("re-elected %s in %v after restart, term %d -> %d", s2.NodeId, time.Since(start).Round(time.Millisecond), term1, s2.Term)
	if s2.Term <= term1 {
		t.Errorf("term after restart %d, want > %d", s2.Term, term1)
	}
	for i := range c.N() {
		if strings.Contains(c.RunLog(i), bootstrapMsg) {
			t.Errorf("%s: restarted on existing data but bootstrapped again", c.Node(i).ID)
		}
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	got, err := c.Client().Get(ctx2, "survives-restart", false)
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if got.Task.CreatedIndex != ack.Index || !got.Task.Stateful || got.Task.StandbyReplicas != 1 {
		t.Errorf("task after restart %v, submitted at index %d", got.Task, ack.Index)
	}
}

// SIGTERM on the primary: it exits 0 and another node is PRIMARY within 2 s.
func TestNodeSigtermPrimaryFailsOver(t *testing.T) {
	c := newCluster(t, 3)
	c.StartAll()
	p := c.WaitRoles(10 * time.Second)
	s, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	var others []int
	for i := range c.N() {
		if i != p {
			others = append(others, i)
		}
	}
	start := time.Now()
	c.Signal(p, syscall.SIGTERM)
	np, sts, err := c.waitRolesAmong(2*time.Second, others)
	failover := time.Since(start)
	if err != nil {
		t.Fatalf("no new primary among the others within 2s of SIGTERM to %s: %v", s.NodeId, err)
	}
	t.Logf("failover on SIGTERM: %s -> %s in %v (term %d -> %d)", s.NodeId, c.Node(np).ID,
		failover.Round(time.Millisecond), s.Term, sts[0].Term)
	if sts[0].Term <= s.Term {
		t.Errorf("new term %d, want > %d", sts[0].Term, s.Term)
	}
	code := c.Wait(p)
	t.Logf("old primary exited %d, %v after SIGTERM", code, time.Since(start).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("old primary exit code %d, want 0", code)
	}
	// The survivors keep serving writes.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client().Submit(ctx, client.Task{ID: "after-failover"}); err != nil {
		t.Errorf("submit after failover: %v", err)
	}
}

// A single-node cluster elects itself.
func TestNodeSingleElectsItself(t *testing.T) {
	c := newCluster(t, 1)
	start := time.Now()
	c.Start(0)
	c.WaitRoles(raceSlack(2 * time.Second))
	t.Logf("single node PRIMARY %v after Start (bound %v)", time.Since(start).Round(time.Millisecond), raceSlack(2*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Client().Submit(ctx, client.Task{ID: "solo"}); err != nil {
		t.Errorf("submit to a single node: %v", err)
	}
}

// A bad config or a data dir held by a running node stops the process at
// once with one line on stderr that names the problem.
func TestNodeRefusesBadStart(t *testing.T) {
	c := newCluster(t, 3)

	oneLineError := func(t *testing.T, r cmdResult, want ...string) {
		t.Helper()
		t.Logf("exit %d after %v, stderr: %s", r.Code, r.Elapsed.Round(time.Millisecond), strings.TrimSpace(r.Stderr))
		if r.Code == 0 {
			t.Errorf("exit code 0, want non-zero")
		}
		lines := nonEmptyLines(r.Stderr)
		if len(lines) != 1 {
			t.Fatalf("stderr has %d lines, want 1:\n%s", len(lines), r.Stderr)
		}
		for _, w := range want {
			if !strings.Contains(lines[0], w) {
				t.Errorf("stderr %q does not name %q", lines[0], w)
			}
		}
		if r.Elapsed > 5*time.Second {
			t.Errorf("took %v to refuse, want under 5s", r.Elapsed)
		}
	}

	t.Run("peer_addr without port", func(t *testing.T) {
		spec := c.ConfigSpec(0)
		spec.Peers[1].PeerAddr = "127.0.0.1"
		path := c.writeFile("bad-port.yaml", spec.YAML())
		r := runXCE(t, 10*time.Second, "server", "--config", path)
		oneLineError(t, r, "peers[1].peer_addr", "port")
	})
	t.Run("unknown key", func(t *testing.T) {
		spec := c.ConfigSpec(0)
		spec.Extra = "election_timeuot: 1s\n"
		path := c.writeFile("unknown-key.yaml", spec.YAML())
		r := runXCE(t, 10*time.Second, "server", "--config", path)
		oneLineError(t, r, "election_timeuot")
	})
	t.Run("data dir in use", func(t *testing.T) {
		c.Start(0)
		// The node holds the lock once it left INIT (storage opens before
		// the election starts).
		err := testutil.Poll(10*time.Second, pollEvery, func() error {
			s, err := c.Status(0)
			if err != nil {
				return err
			}
			if s.Role == xcev1.Role_ROLE_INIT {
				return errors.New("still INIT")
			}
			return nil
		})
		if err != nil {
			t.Fatalf("node 0 never left INIT: %v", err)
		}
		// Same node id, cluster id and data dir; other ports.
		ports := freePorts(t, 2)
		spec := c.ConfigSpec(0)
		spec.ClientAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		spec.PeerAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
		spec.Peers[0].ClientAddr, spec.Peers[0].PeerAddr = spec.ClientAddr, spec.PeerAddr
		path := c.writeFile("second.yaml", spec.YAML())
		r := runXCE(t, 20*time.Second, "server", "--config", path)
		t.Logf("second process: exit %d after %v", r.Code, r.Elapsed.Round(time.Millisecond))
		if r.Code == 0 {
			t.Errorf("second process on a locked data dir exited 0")
		}
		if r.Elapsed > 5*time.Second {
			t.Errorf("second process took %v to give up, want under 5s", r.Elapsed)
		}
		// Log lines (JSON) may precede it; exactly one plain line is the error.
		plain := plainLines(r.Stderr)
		if len(plain) != 1 {
			t.Fatalf("want exactly one error line on stderr, got %d:\n%s", len(plain), r.Stderr)
		}
		t.Logf("error line: %s", plain[0])
		if !strings.Contains(plain[0], spec.DataDir) || !strings.Contains(plain[0], "in use") {
			t.Errorf("error line %q should name the data dir %s and say \"in use\"", plain[0], spec.DataDir)
		}
		// The running node is unharmed.
		if _, err := c.Status(0); err != nil {
			t.Errorf("first node after the refused second process: %v", err)
		}
		if !c.Running(0) {
			t.Errorf("first node exited")
		}
	})
	// runThenStop starts node i until it knows its role, so it has written
	// its data files, and stops it.
	runThenStop := func(t *testing.T, i int) {
		t.Helper()
		c.Start(i)
		if err := testutil.Poll(10*time.Second, pollEvery, func() error {
			s, err := c.Status(i)
			if err != nil {
				return err
			}
			if s.Role == xcev1.Role_ROLE_INIT {
				return errors.New("still INIT")
			}
			return nil
		}); err != nil {
			t.Fatalf("node %d never left INIT: %v", i, err)
		}
		c.Stop(i)
	}
	// refusesCorrupt starts node i and wants one error line naming path.
	refusesCorrupt := func(t *testing.T, i int, path string) {
		t.Helper()
		r := runXCE(t, 20*time.Second, "server", "--config", c.Node(i).ConfigPath)
		t.Logf("exit %d after %v", r.Code, r.Elapsed.Round(time.Millisecond))
		if r.Code == 0 {
			t.Fatalf("a node with a corrupt %s exited 0", filepath.Base(path))
		}
		plain := plainLines(r.Stderr)
		if len(plain) != 1 {
			t.Fatalf("want exactly one error line on stderr (no panic trace), got %d:\n%s", len(plain), r.Stderr)
		}
		t.Logf("error line: %s", plain[0])
		if !strings.Contains(plain[0], path) || !strings.Contains(plain[0], "corrupt") {
			t.Errorf("error line %q should name %s and say \"corrupt\"", plain[0], path)
		}
	}
	t.Run("corrupt raft log", func(t *testing.T) {
		// A damaged segment header must fail the start with the segment's
		// path, never start on a log with entries missing.
		runThenStop(t, 2)
		seg := filepath.Join(c.Node(2).DataDir, "raft-log", "00000000000000000001.log")
		f, err := os.OpenFile(seg, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt([]byte{0xA5}, 9) // the header's first-index field
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		refusesCorrupt(t, 2, seg)
	})
	t.Run("corrupt raft.db", func(t *testing.T) {
		// Garbage over node 1's B+tree pages is what bbolt would otherwise
		// crash on, in a goroutine no recover reaches.
		runThenStop(t, 1)
		db := filepath.Join(c.Node(1).DataDir, "raft.db")
		b, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		const page = 4096
		if len(b) < 4*page {
			t.Fatalf("raft.db has %d bytes, want at least 4 pages", len(b))
		}
		for i := 2 * page; i < len(b); i++ {
			b[i] = 0xA5
		}
		if err := os.WriteFile(db, b, 0o600); err != nil {
			t.Fatal(err)
		}
		refusesCorrupt(t, 1, db)
	})
}

// plainLines drops the JSON log lines from a server's stderr and returns
// the rest (the error line).
func plainLines(stderr string) []string {
	var plain []string
	for _, l := range nonEmptyLines(stderr) {
		if !strings.HasPrefix(strings.TrimSpace(l), "{") {
			plain = append(plain, l)
		}
	}
	return plain
}

// /healthz answers 200 everywhere; /readyz 200 only on the primary.
func TestNodeHealthAndReadiness(t *testing.T) {
	c := newCluster(t, 3)
	c.StartAll()
	c.WaitRoles(10 * time.Second)
	// Re-read the roles with the probes, in case an election slipped in
	// between (a loaded machine can cost the primary its lease).
	err := testutil.Poll(5*time.Second, pollEvery, func() error {
		p := c.WaitRoles(5 * time.Second)
		var problems []string
		for i := range c.N() {
			code, body, err := c.HTTPGet(i, "/healthz")
			if err != nil || code != http.StatusOK {
				problems = append(problems, fmt.Sprintf("%s /healthz: %d %q %v, want 200", c.Node(i).ID, code, body, err))
			}
			code, body, err = c.HTTPGet(i, "/readyz")
			want := http.StatusServiceUnavailable
			if i == p {
				want = http.StatusOK
			}
			if err != nil || code != want {
				problems = append(problems, fmt.Sprintf("%s /readyz: %d %q %v, want %d", c.Node(i).ID, code, strings.TrimSpace(body), err, want))
			}
		}
		if len(problems) > 0 {
			return errors.New(strings.Join(problems, "; "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}
