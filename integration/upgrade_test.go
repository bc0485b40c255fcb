package integration

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// buildVariant builds xce with its version set to version (a relink: the
// packages come from the build cache) and returns the binary's path.
func buildVariant(t *testing.T, version string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "xce-"+version)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", out, "-ldflags", "-X main.version=" + version}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/xce/xce/cmd/xce")
	if b, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return out
}

// refusalProbe dials every node's client port in a loop and counts refused
// connections: the load's clients keep pooled connections and retry
// transport errors, so they alone would hide a refused window.
type refusalProbe struct {
	dials, refused, other atomic.Int64
	firstRefused          atomic.Value // string
	stop                  chan struct{}
	wg                    sync.WaitGroup
}

func startRefusalProbe(t *testing.T, addrs []string) *refusalProbe {
	p := &refusalProbe{stop: make(chan struct{})}
	for _, a := range addrs {
		p.wg.Go(func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-tick.C:
				}
				conn, err := net.DialTimeout("tcp", a, time.Second)
				p.dials.Add(1)
				switch {
				case err == nil:
					conn.Close()
				case errors.Is(err, syscall.ECONNREFUSED):
					if p.refused.Add(1) == 1 {
						p.firstRefused.Store(fmt.Sprintf("%s at %s", a, time.Now().Format("15:04:05.000")))
					}
				default:
					p.other.Add(1)
				}
			}
		})
	}
	t.Cleanup(p.halt)
	return p
}

func (p *refusalProbe) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.wg.Wait()
}

// longestPause is the longest time, within [from, to], during which no
// write was acknowledged: the pause clients saw.
func longestPause(ops []bench.Op, from, to time.Time) time.Duration {
	var acks []time.Time
	for _, op := range ops {
		if op.Kind == bench.Submit && op.Outcome == bench.OK && !op.Return.Before(from) && !op.Return.After(to) {
			acks = append(acks, op.Return)
		}
	}
	if len(acks) == 0 {
		return to.Sub(from)
	}
	slicesSortTimes(acks)
	longest := acks[0].Sub(from)
	for i := 1; i < len(acks); i++ {
		longest = max(longest, acks[i].Sub(acks[i-1]))
	}
	return max(longest, to.Sub(acks[len(acks)-1]))
}

func slicesSortTimes(ts []time.Time) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// waitStandbyVersion waits until node i is STANDBY (or PRIMARY) running
// version, and returns its status.
func waitServing(t *testing.T, c *Cluster, i int, version string, timeout time.Duration) *xcev1.StatusResponse {
	t.Helper()
	var st *xcev1.StatusResponse
	err := testutil.Poll(timeout, pollEvery, func() error {
		s, err := c.Status(i)
		if err != nil {
			return err
		}
		st = s
		if s.Version != version {
			return fmt.Errorf("%s runs version %q, want %q", s.NodeId, s.Version, version)
		}
		if s.Role != xcev1.Role_ROLE_STANDBY && s.Role != xcev1.Role_ROLE_PRIMARY {
			return fmt.Errorf("%s", describeStatus(s))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s did not rejoin within %v: %v", c.nodes[i].ID, timeout, err)
	}
	return st
}

// TestUpgradeEachNodeUnderLoad upgrades every node in turn, the primary
// first, each time to a freshly built binary, under a 16-client write load:
// no client sees a refused connection, every acknowledged write is there
// once, the history is linearizable, and the cluster ends healthy.
func TestUpgradeEachNodeUnderLoad(t *testing.T) {
	c := newCluster(t, 3, WithOwnBinary(), WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(15 * time.Second))
	order := []int{p, (p + 1) % 3, (p + 2) % 3}
	versions := make([]string, 3)
	bins := make([]string, 3)
	for k := range 3 {
		versions[k] = fmt.Sprintf("upgrade-%d", k+1)
		bins[k] = buildVariant(t, versions[k])
	}

	probe := startRefusalProbe(t, c.Addrs())
	l := startLoad(t, c.Addrs(), 16)
	l.waitProgress(t, 200, raceSlack(20*time.Second))
	type window struct {
		node       int
		from, to   time.Time
		toStandby  time.Duration
		oldPid, np int
	}
	var windows []window
	for k, i := range order {
		c.InstallBinary(bins[k])
		oldPid := c.Pid(i)
		start := time.Now()
		r := runXCE(t, raceSlack(60*time.Second), "upgrade", "--pid-file", c.nodes[i].PidFile)
		if r.Code != 0 {
			t.Fatalf("xce upgrade %s: exit %d\n%s%s", c.nodes[i].ID, r.Code, r.Stdout, r.Stderr)
		}
		waitServing(t, c, i, versions[k], raceSlack(20*time.Second))
		took := time.Since(start)
		np := c.Adopt(i)
		if np == oldPid {
			t.Fatalf("%s: pid unchanged (%d) after the upgrade", c.nodes[i].ID, np)
		}
		c.WaitRoles(raceSlack(15 * time.Second))
		l.waitProgress(t, 200, raceSlack(20*time.Second))
		windows = append(windows, window{node: i, from: start, to: time.Now(), toStandby: took, oldPid: oldPid, np: np})
	}
	probe.halt()
	stopAt := time.Now()
	ops := l.stopAndCheck(t, c.Client())

	for _, w := range windows {
		t.Logf("%s: pid %d -> %d, SIGHUP -> serving the new version %v, longest pause without an acknowledged write %v",
			c.nodes[w.node].ID, w.oldPid, w.np, w.toStandby.Round(time.Millisecond),
			longestPause(ops, w.from, w.to).Round(time.Millisecond))
	}
	unknown := 0
	for _, op := range ops {
		// Calls cut by the end of the load do not count.
		if op.Outcome == bench.Unknown && op.Return.Before(stopAt) {
			unknown++
		}
	}
	t.Logf("probe: %d dials, %d refused, %d other errors; %d calls without an answer", probe.dials.Load(), probe.refused.Load(), probe.other.Load(), unknown)
	if n := probe.refused.Load(); n > 0 {
		t.Errorf("%d connections refused during the upgrades (first: %v)", n, probe.firstRefused.Load())
	}
	if unknown > 0 {
		t.Errorf("%d client calls ended without an answer", unknown)
	}
	if probe.dials.Load() < 100 {
		t.Errorf("the probe dialled only %d times", probe.dials.Load())
	}
	c.WaitRoles(raceSlack(15 * time.Second))
	for i := range 3 {
		if st, err := c.Status(i); err != nil || st.Pid != int64(c.Pid(i)) {
			t.Errorf("%s: status %v, %v; want pid %d", c.nodes[i].ID, st, err, c.Pid(i))
		}
	}
}

// TestUpgradeBadConfig: with a config that fails validation, or a new binary
// that fails to start, the old process keeps serving and `xce upgrade` exits
// non-zero naming the error.
func TestUpgradeBadConfig(t *testing.T) {
	c := newCluster(t, 3, WithOwnBinary(), WithLogLevel("info"))
	c.StartAll()
	c.WaitRoles(raceSlack(15 * time.Second))
	good, err := os.ReadFile(c.nodes[0].ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	bad := c.ConfigSpec(0)
	bad.Log.Level = "loud"
	c.writeFile(filepath.Base(c.nodes[0].ConfigPath), bad.YAML())
	pid := c.Pid(0)
	r := runXCE(t, raceSlack(30*time.Second), "upgrade", "--pid-file", c.nodes[0].PidFile)
	if r.Code == 0 || !strings.Contains(r.Stderr, "log.level") {
		t.Fatalf("xce upgrade with a bad config: exit %d, stderr %q; want non-zero naming log.level", r.Code, r.Stderr)
	}
	if !c.Running(0) || c.Pid(0) != pid {
		t.Fatal("the old process stopped")
	}
	st, err := c.Status(0)
	if err != nil || st.Pid != int64(pid) {
		t.Fatalf("status after the failed upgrade: %v, %v", st, err)
	}
	c.WaitRoles(raceSlack(10 * time.Second))

	// A new binary that fails to start: the old process keeps serving.
	c.writeFile(filepath.Base(c.nodes[0].ConfigPath), string(good))
	broken := c.writeFile("broken-xce", "#!/bin/sh\necho 'this build is broken' >&2\nexit 3\n")
	c.InstallBinary(broken)
	r = runXCE(t, raceSlack(30*time.Second), "upgrade", "--pid-file", c.nodes[0].PidFile)
	if r.Code == 0 || !strings.Contains(r.Stderr, "did not start") {
		t.Fatalf("xce upgrade to a broken binary: exit %d, stderr %q; want non-zero saying the new process did not start", r.Code, r.Stderr)
	}
	if st, err := c.Status(0); err != nil || st.Pid != int64(pid) || !c.Running(0) {
		t.Fatalf("status after the failed upgrade: %v, %v", st, err)
	}
	c.WaitRoles(raceSlack(10 * time.Second))
	c.InstallBinary(xceBin)

	// Fixed: the next upgrade goes through.
	if r := runXCE(t, raceSlack(60*time.Second), "upgrade", "--pid-file", c.nodes[0].PidFile); r.Code != 0 {
		t.Fatalf("upgrade with the fixed config: exit %d\n%s", r.Code, r.Stderr)
	}
	if np := c.Adopt(0); np == pid {
		t.Fatal("pid unchanged")
	}
	c.WaitRoles(raceSlack(15 * time.Second))
}

// TestUpgradeTwoSIGHUPs: a second SIGHUP during an upgrade is ignored; one
// upgrade happens and the cluster stays healthy.
func TestUpgradeTwoSIGHUPs(t *testing.T) {
	c := newCluster(t, 3, WithOwnBinary(), WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(15 * time.Second))
	pid := c.Pid(p)
	c.Signal(p, syscall.SIGHUP)
	if err := testutil.Poll(raceSlack(10*time.Second), time.Millisecond, func() error {
		if !strings.Contains(c.RunLog(p), "upgrade 1/5") {
			return errors.New("the upgrade has not begun")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.Signal(p, syscall.SIGHUP)
	np := c.Adopt(p)
	if np == pid {
		t.Fatal("pid unchanged")
	}
	c.WaitRoles(raceSlack(15 * time.Second))
	if got := c.Pid(p); got != np || !c.Running(p) {
		t.Fatalf("the successor %d was replaced again (now %d) or stopped", np, got)
	}
	// Signals sent back to back may merge in the kernel; when the old
	// process saw both, it must have ignored the second.
	log := c.RunLog(p)
	if strings.Count(log, "SIGHUP: upgrading in place") >= 2 && !strings.Contains(log, "SIGHUP ignored") {
		t.Error("the second SIGHUP was handled, not ignored")
	}
}
