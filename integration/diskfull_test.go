package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// smallSegments makes the raft log roll to a new segment every MiB, so a
// full disk shows within a few thousand writes.
func smallSegments(cfg *configs.Config) { cfg.Raft.LogSegmentSize = 1 << 20 }

// mountTmpfs mounts a tmpfs of size bytes on dir (created if missing) for
// the rest of the test. It needs root; without it the test is skipped.
// The cluster's processes are killed before the unmount.
func mountTmpfs(t *testing.T, c *Cluster, dir string, size int64) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs for the data dir (CI runs as root)")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0750", size)); err != nil {
		t.Skipf("cannot mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		c.killAll()
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// fillDisk writes a ballast file into dir until its filesystem is full and
// returns the file's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 0xa5
	}
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	// Whatever fits of a smaller write, so not a page is left.
	for n := len(chunk) / 2; n >= 512; n /= 2 {
		_, _ = f.Write(chunk[:n])
	}
	return path
}

// statusOf returns node i's status, or nil when it does not answer.
func (c *Cluster) statusOf(i int) *xcev1.StatusResponse {
	s, err := c.Status(i)
	if err != nil {
		return nil
	}
	return s
}

// waitStorageFailing waits until node i says its storage fails: the status
// reason, /readyz and xce_storage_healthy.
func waitStorageFailing(t *testing.T, c *Cluster, i int, timeout time.Duration) *xcev1.StatusResponse {
	t.Helper()
	var st *xcev1.StatusResponse
	err := testutil.Poll(timeout, pollEvery, func() error {
		st = c.statusOf(i)
		if st == nil {
			return errors.New("no status")
		}
		if !strings.Contains(st.Reason, "storage failing") {
			return fmt.Errorf("status does not say the storage fails: %s", describeStatus(st))
		}
		if v, err := c.Metric(i, "xce_storage_healthy"); err != nil || v != 0 {
			return fmt.Errorf("xce_storage_healthy = %v (%v)", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", c.Node(i).ID, err)
	}
	if st.Role == xcev1.Role_ROLE_PRIMARY {
		t.Fatalf("%s is PRIMARY while its storage fails: %s", c.Node(i).ID, describeStatus(st))
	}
	code, body, err := c.HTTPGet(i, "/readyz")
	if err != nil || code == 200 || !strings.Contains(body, "storage failing") {
		t.Fatalf("%s: /readyz %d %q (%v), want 503 naming the storage", c.Node(i).ID, code, body, err)
	}
	return st
}

// termStaysAt checks for d that no node of idx moves past term.
func termStaysAt(t *testing.T, c *Cluster, idx []int, term uint64, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		for _, i := range idx {
			if st := c.statusOf(i); st != nil && st.Term > term {
				t.Fatalf("%s moved to term %d from %d while the storage was full: %s", c.Node(i).ID, st.Term, term, describeStatus(st))
			}
		}
		<-tick.C
	}
}

// TestDiskFullSingleNode fills the data dir of a one-node cluster under
// load: the node stops serving and says why, its term stays put, and once
// space returns it serves again without a restart and with every
// acknowledged write.
func TestDiskFullSingleNode(t *testing.T) {
	c := newCluster(t, 1, WithLogLevel("info"), WithConfig(smallSegments))
	mountTmpfs(t, c, c.Node(0).DataDir, 24<<20)
	c.Start(0)
	c.WaitRoles(raceSlack(10 * time.Second))
	pid := c.Pid(0)
	load := startLoad(t, c.Addrs(), 16)
	load.waitProgress(t, 100, 30*time.Second)

	ballast := fillDisk(t, c.Node(0).DataDir)
	st := waitStorageFailing(t, c, 0, 60*time.Second)
	t.Logf("storage full: %s", describeStatus(st))
	termStaysAt(t, c, []int{0}, st.Term, 3*time.Second)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	c.WaitRoles(raceSlack(20 * time.Second))
	load.waitProgress(t, 100, 30*time.Second)
	if got := c.Pid(0); got != pid {
		t.Fatalf("the node restarted (pid %d, was %d)", got, pid)
	}
	if v, err := c.Metric(0, "xce_storage_failures_total"); err != nil || v < 1 {
		t.Errorf("xce_storage_failures_total = %v (%v), want at least 1", v, err)
	}
	load.stopAndCheck(t, c.Client())
	quietLogs(t, c, 0)
}

// TestDiskFullPrimaryOfThree fills the PRIMARY's data dir under load: a
// healthy node takes over, the term stops moving, the full node says why,
// and once space returns it follows again and nothing acknowledged is lost.
func TestDiskFullPrimaryOfThree(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"), WithConfig(smallSegments))
	for i := range c.N() {
		mountTmpfs(t, c, c.Node(i).DataDir, 24<<20)
	}
	c.StartAll()
	p := c.WaitRoles(raceSlack(10 * time.Second))
	pid := c.Pid(p)
	load := startLoad(t, c.Addrs(), 16)
	load.waitProgress(t, 100, 30*time.Second)

	ballast := fillDisk(t, c.Node(p).DataDir)
	waitStorageFailing(t, c, p, 60*time.Second)
	var others []int
	for i := range c.N() {
		if i != p {
			others = append(others, i)
		}
	}
	q, sts, err := c.waitRolesAmong(20*time.Second, others)
	if err != nil {
		t.Fatalf("no healthy node took over: %v", err)
	}
	t.Logf("%s full; %s PRIMARY in term %d", c.Node(p).ID, c.Node(q).ID, sts[0].Term)
	load.waitProgress(t, 100, 30*time.Second)
	termStaysAt(t, c, c.Live(), sts[0].Term, 3*time.Second)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	c.WaitRoles(raceSlack(30 * time.Second))
	if err := testutil.Poll(30*time.Second, pollEvery, func() error {
		st := c.statusOf(p)
		if st == nil || strings.Contains(st.Reason, "storage") {
			return fmt.Errorf("%s has not recovered", c.Node(p).ID)
		}
		if v, err := c.Metric(p, "xce_storage_healthy"); err != nil || v != 1 {
			return fmt.Errorf("xce_storage_healthy = %v (%v)", v, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := c.Pid(p); got != pid {
		t.Fatalf("%s restarted (pid %d, was %d)", c.Node(p).ID, got, pid)
	}
	load.waitProgress(t, 100, 30*time.Second)
	load.stopAndCheck(t, c.Client())
	quietLogs(t, c, p)
}

// quietLogs checks that node i said its storage failed and recovered, and
// did so without flooding its log.
func quietLogs(t *testing.T, c *Cluster, i int) {
	t.Helper()
	log := c.RunLog(i)
	lines := strings.Count(log, "\n")
	if !strings.Contains(log, `"storage recovered"`) && !strings.Contains(log, "storage recovered") {
		t.Errorf("%s never logged that its storage recovered", c.Node(i).ID)
	}
	const most = 400
	if lines > most {
		t.Errorf("%s logged %d lines during the run, more than %d: the full disk floods its log", c.Node(i).ID, lines, most)
	}
	t.Logf("%s logged %d lines, %d of them errors", c.Node(i).ID, lines, strings.Count(log, `"level":"error"`))
}
