package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
)

// statefulSet runs pods as deploy/kubernetes's StatefulSet starts them:
// each runs xce pod-config with its name and the headless Service's (the
// init container), then xce server on the config that wrote. Pod k's
// host is 127.0.k.1, and every pod has the same two ports, as pods do.
type statefulSet struct {
	t                    *testing.T
	dir, template        string
	clientPort, peerPort int
	procs                map[int]*localcluster.Process
}

func newStatefulSet(t *testing.T) *statefulSet {
	ports := freePorts(t, 2)
	s := &statefulSet{t: t, dir: t.TempDir(), clientPort: ports[0], peerPort: ports[1], procs: map[int]*localcluster.Process{}}
	s.template = filepath.Join(s.dir, "template.yaml")
	tmpl := fmt.Sprintf(`cluster_id: k8s
data_dir: %s/$(POD_NAME)/data
raft:
  heartbeat_timeout: 200ms
  election_timeout: 200ms
  leader_lease_timeout: 100ms
autopilot:
  stabilization_time: 1s
log:
  level: info
`, s.dir)
	if err := os.WriteFile(s.template, []byte(tmpl), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for k, p := range s.procs {
			_, _ = p.Kill(10 * time.Second)
			if t.Failed() {
				t.Logf("---- last 20 lines of xce-%d ----\n%s", k, tailLines(s.log(k), 20, 600))
			}
		}
	})
	return s
}

func (s *statefulSet) log(k int) string { return filepath.Join(s.dir, fmt.Sprintf("xce-%d.log", k)) }

func (s *statefulSet) addr(k int) string { return fmt.Sprintf("127.0.%d.1:%d", k, s.clientPort) }

// start runs pod k's init container and server, and returns what
// pod-config said of how it starts.
func (s *statefulSet) start(k int) string {
	s.t.Helper()
	out := filepath.Join(s.dir, fmt.Sprintf("xce-%d.yaml", k))
	r := runXCE(s.t, 30*time.Second, "pod-config", "--template", s.template, "--out", out,
		"--pod", fmt.Sprintf("xce-%d", k), "--service", "xce-peers", "--namespace", "test",
		"--host-format", "127.0.{ordinal}.1", "--client-port", strconv.Itoa(s.clientPort), "--peer-port", strconv.Itoa(s.peerPort),
		"--probe-timeout", "500ms", "--max-probe", "4")
	if r.Code != 0 {
		s.t.Fatalf("pod-config of xce-%d: exit %d: %s", k, r.Code, r.Stderr)
	}
	p, err := localcluster.StartProcess(xceBin, s.log(k), true, "server", "--config", out)
	if err != nil {
		s.t.Fatal(err)
	}
	s.procs[k] = p
	return r.Stderr
}

// readyz is pod k's /readyz status code, with ?standby=1 or without.
func (s *statefulSet) readyz(k int, standby bool) int {
	u := "http://" + s.addr(k) + "/readyz"
	if standby {
		u += "?standby=1"
	}
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitReady waits for pod k to be ready as the StatefulSet's readiness
// probe asks, before the next pod starts (OrderedReady).
func (s *statefulSet) waitReady(k int) {
	s.t.Helper()
	testutil.Eventually(s.t, raceSlack(30*time.Second), fmt.Sprintf("xce-%d ready", k), func() bool {
		return s.readyz(k, true) == http.StatusOK
	})
}

func (s *statefulSet) client(k ...int) *client.Client {
	s.t.Helper()
	var addrs []string
	for _, i := range k {
		addrs = append(addrs, s.addr(i))
	}
	c, err := client.New(addrs, client.Options{})
	if err != nil {
		s.t.Fatal(err)
	}
	return c
}

// waitVoters waits until the members are exactly ids, all voters.
func (s *statefulSet) waitVoters(c *client.Client, ids ...string) {
	s.t.Helper()
	testutil.Eventually(s.t, raceSlack(30*time.Second), fmt.Sprintf("voters %v", ids), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ms, err := c.ListMembers(ctx, false)
		if err != nil || len(ms.Members) != len(ids) {
			return false
		}
		for _, m := range ms.Members {
			if !m.Voter || !slices.Contains(ids, m.Id) {
				return false
			}
		}
		return true
	})
}

// The StatefulSet's start with real processes: xce-0 bootstraps, xce-1
// and xce-2 join it, each ready before the next starts, and the three
// become voters named after their pods. A STANDBY is ready as a member
// and not as the PRIMARY. The stop hook hands the leadership on from the
// PRIMARY only. A pod added by scaling joins by itself, and so does pod 0
// with a new volume once its old member is removed, instead of starting a
// second cluster.
func TestStatefulSetStart(t *testing.T) {
	s := newStatefulSet(t)
	if how := s.start(0); !strings.Contains(how, "bootstraps a new cluster") {
		t.Fatalf("xce-0: %s", how)
	}
	s.waitReady(0)
	for k := 1; k < 3; k++ {
		if how := s.start(k); !strings.Contains(how, "joins "+s.addr(0)) {
			t.Fatalf("xce-%d: %s", k, how)
		}
		s.waitReady(k)
	}
	c := s.client(0, 1, 2)
	defer c.Close()
	s.waitVoters(c, "xce-0", "xce-1", "xce-2")
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
	defer cancel()
	if _, err := c.Submit(ctx, client.Task{ID: "before"}); err != nil {
		t.Fatal(err)
	}

	primary, standby := -1, -1
	for k := range 3 {
		st, err := c.Status(ctx, s.addr(k))
		if err != nil {
			t.Fatal(err)
		}
		if st.NodeId != fmt.Sprintf("xce-%d", k) {
			t.Fatalf("pod xce-%d is node %q", k, st.NodeId)
		}
		if st.Role.String() == "ROLE_PRIMARY" {
			primary = k
		} else {
			standby = k
		}
	}
	if primary < 0 || standby < 0 {
		t.Fatalf("primary %d, standby %d", primary, standby)
	}
	if got := s.readyz(standby, false); got != http.StatusServiceUnavailable {
		t.Errorf("a STANDBY's /readyz: %d, want 503 (only the PRIMARY)", got)
	}

	// The stop hook: nothing on a STANDBY, a handover on the PRIMARY.
	r := runXCE(t, 30*time.Second, "leader", "transfer", "--if-primary", "--addr", s.addr(standby))
	if r.Code != 0 || !strings.Contains(r.Stdout, "nothing to hand on") {
		t.Fatalf("hook on the STANDBY: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}
	if st, err := c.Status(ctx, s.addr(primary)); err != nil || st.Role.String() != "ROLE_PRIMARY" {
		t.Fatalf("after the hook on a STANDBY, xce-%d is %v (%v)", primary, st.GetRole(), err)
	}
	r = runXCE(t, 30*time.Second, "leader", "transfer", "--if-primary", "--addr", s.addr(primary))
	if r.Code != 0 || !strings.Contains(r.Stdout, "is PRIMARY") || strings.Contains(r.Stdout, fmt.Sprintf("xce-%d is PRIMARY", primary)) {
		t.Fatalf("hook on the PRIMARY: exit %d, %q %q", r.Code, r.Stdout, r.Stderr)
	}

	// Scaled to four: xce-3 joins the pods before it.
	if how := s.start(3); !strings.Contains(how, "joins "+s.addr(0)+", "+s.addr(1)+", "+s.addr(2)) {
		t.Fatalf("xce-3: %s", how)
	}
	s.waitReady(3)
	s.waitVoters(c, "xce-0", "xce-1", "xce-2", "xce-3")

	// Pod 0's volume replaced: its member removed first, it joins the
	// others rather than bootstrapping a second cluster.
	if _, err := s.procs[0].Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	delete(s.procs, 0)
	others := s.client(1, 2, 3)
	defer others.Close()
	testutil.Eventually(t, raceSlack(20*time.Second), "xce-0 removed", func() bool {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		return others.RemoveMember(rctx, "xce-0", false) == nil
	})
	if err := os.RemoveAll(filepath.Join(s.dir, "xce-0")); err != nil {
		t.Fatal(err)
	}
	if how := s.start(0); !strings.Contains(how, "joins "+s.addr(1)) {
		t.Fatalf("xce-0 with a new volume: %s", how)
	}
	s.waitReady(0)
	s.waitVoters(others, "xce-0", "xce-1", "xce-2", "xce-3")
	if _, err := others.Get(ctx, "before", false); err != nil {
		t.Fatalf("the task written before: %v", err)
	}
}
