package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/client"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// xceBin is the xce binary under test: built once by TestMain, or $XCE_BIN.
var xceBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// Servers upgraded in place leave a successor whose parent exits; as a
	// child subreaper this process inherits (and can wait for) them.
	if _, _, errno := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0, 0, 0, 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "prctl(PR_SET_CHILD_SUBREAPER): %v\n", errno)
		return 1
	}
	if p := os.Getenv("XCE_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "XCE_BIN: %v\n", err)
			return 1
		}
		xceBin = abs
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "xce-it-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	xceBin = filepath.Join(dir, "xce")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", xceBin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/xce/xce/cmd/xce")
	start := time.Now()
	out, err := exec.Command(goTool, args...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	fmt.Fprintf(os.Stderr, "integration: built xce (race=%v) in %v\n", raceEnabled, time.Since(start).Round(time.Millisecond))
	return m.Run()
}

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// ---------------------------------------------------------------------------
// Cluster

// Option tunes newCluster.
type Option func(*clusterOptions)

type clusterOptions struct {
	raft      *raftSpec
	logLevel  string
	extra     string
	ownBinary bool
}

// WithOwnBinary runs the cluster's servers from a copy of the xce binary
// in the test's dir, which InstallBinary replaces (for upgrades).
func WithOwnBinary() Option {
	return func(o *clusterOptions) { o.ownBinary = true }
}

type raftSpec struct {
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
}

// WithRaft sets raft: {heartbeat_timeout, election_timeout,
// leader_lease_timeout} in every node's config (default: the product's
// defaults, i.e. no raft section).
func WithRaft(heartbeat, election, lease time.Duration) Option {
	return func(o *clusterOptions) { o.raft = &raftSpec{heartbeat, election, lease} }
}

// WithExtra appends YAML (whole top-level sections) to every node's config.
func WithExtra(yaml string) Option {
	return func(o *clusterOptions) { o.extra += yaml }
}

// WithLogLevel sets log.level (default debug).
func WithLogLevel(level string) Option {
	return func(o *clusterOptions) { o.logLevel = level }
}

// Cluster is n xce server processes on loopback with their configs, data
// dirs and logs in a test temp dir. Node indexes are 0-based; node i has id
// "n<i+1>".
type Cluster struct {
	t      testing.TB
	dir    string
	opts   clusterOptions
	nodes  []*Node
	bin    string         // the binary servers start from
	status *client.Client // for Status only: one endpoint per call
	http   *http.Client
}

// Node is one server of a Cluster.
type Node struct {
	Index      int
	ID         string
	ClientAddr string
	PeerAddr   string
	DataDir    string
	ConfigPath string
	LogPath    string

	PidFile string

	mu sync.Mutex
	// proc is the current (or last) process: the one the harness started,
	// or the one that took over in an upgrade (see Adopt).
	proc      *os.Process
	done      chan struct{} // closed when the current process has exited
	exitCode  int
	startedAt time.Time
	logOffset int64 // size of the log file when the current run started
	runs      int
}

// freePorts returns n distinct free loopback ports. All listeners are held
// until every port is chosen, so the ports differ from each other.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// newCluster prepares (does not start) an n-node cluster and registers the
// cleanup that kills every process left running and, on failure, prints the
// tail of every node's log.
func newCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := &Cluster{t: t, dir: t.TempDir(), opts: clusterOptions{logLevel: "debug"},
		http: &http.Client{Timeout: 5 * time.Second}, bin: xceBin}
	for _, o := range opts {
		o(&c.opts)
	}
	if c.opts.ownBinary {
		c.bin = filepath.Join(c.dir, "bin", "xce")
		if err := os.MkdirAll(filepath.Dir(c.bin), 0o755); err != nil {
			t.Fatal(err)
		}
		c.InstallBinary(xceBin)
	}
	ports := freePorts(t, 2*n)
	var eps []string
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		nd := &Node{
			Index:      i,
			ID:         id,
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			PeerAddr:   fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
			DataDir:    filepath.Join(c.dir, "data", id),
			ConfigPath: filepath.Join(c.dir, id+".yaml"),
			PidFile:    filepath.Join(c.dir, id+".pid"),
			LogPath:    filepath.Join(c.dir, id+".log"),
			exitCode:   -1,
		}
		c.nodes = append(c.nodes, nd)
		eps = append(eps, nd.ClientAddr)
	}
	for i := range c.nodes {
		if err := os.WriteFile(c.nodes[i].ConfigPath, []byte(c.ConfigSpec(i).YAML()), 0o644); err != nil {
			t.Fatalf("write config: %v", err)
		}
	}
	st, err := client.New(eps, client.Options{})
	if err != nil {
		t.Fatalf("status client: %v", err)
	}
	c.status = st
	// Cleanups run last-registered first: kill, then check and dump logs.
	t.Cleanup(c.checkLogs)
	t.Cleanup(c.killAll)
	return c
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(c.nodes) }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Addrs are the client addresses of every node.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.nodes {
		a = append(a, n.ClientAddr)
	}
	return a
}

// ---------------------------------------------------------------------------
// Configs

// ConfigSpec is one node's YAML config, as the harness writes it.
type ConfigSpec struct {
	NodeID, ClusterID, DataDir, ClientAddr, PeerAddr string
	Peers                                            []PeerSpec
	Raft                                             *raftSpec
	LogLevel, LogFormat                              string
	// Extra is appended verbatim (e.g. an unknown key).
	Extra string
}

// PeerSpec is one entry of peers.
type PeerSpec struct{ ID, PeerAddr, ClientAddr string }

// ConfigSpec returns the config the harness writes for node i.
func (c *Cluster) ConfigSpec(i int) ConfigSpec {
	n := c.nodes[i]
	s := ConfigSpec{
		NodeID: n.ID, ClusterID: "it", DataDir: n.DataDir, ClientAddr: n.ClientAddr, PeerAddr: n.PeerAddr,
		Raft: c.opts.raft, LogLevel: c.opts.logLevel, LogFormat: "json", Extra: c.opts.extra,
	}
	for _, p := range c.nodes {
		s.Peers = append(s.Peers, PeerSpec{ID: p.ID, PeerAddr: p.PeerAddr, ClientAddr: p.ClientAddr})
	}
	return s
}

// YAML renders the config.
func (s ConfigSpec) YAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node_id: %s\ncluster_id: %s\ndata_dir: %q\n", s.NodeID, s.ClusterID, s.DataDir)
	fmt.Fprintf(&b, "client_addr: %q\npeer_addr: %q\npeers:\n", s.ClientAddr, s.PeerAddr)
	for _, p := range s.Peers {
		fmt.Fprintf(&b, "  - {id: %s, peer_addr: %q, client_addr: %q}\n", p.ID, p.PeerAddr, p.ClientAddr)
	}
	if r := s.Raft; r != nil {
		fmt.Fprintf(&b, "raft: {heartbeat_timeout: %s, election_timeout: %s, leader_lease_timeout: %s}\n",
			r.HeartbeatTimeout, r.ElectionTimeout, r.LeaderLeaseTimeout)
	}
	fmt.Fprintf(&b, "log: {level: %s, format: %s}\n", s.LogLevel, s.LogFormat)
	b.WriteString(s.Extra)
	return b.String()
}

// writeFile writes content to a new file in the cluster's dir and returns its path.
func (c *Cluster) writeFile(name, content string) string {
	c.t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		c.t.Fatalf("write %s: %v", p, err)
	}
	return p
}

// ---------------------------------------------------------------------------
// Processes

// Start starts node i's server. Its stdout and stderr are appended to its log.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !isClosed(n.done) {
		c.t.Fatalf("start %s: already running (pid %d)", n.ID, n.proc.Pid)
	}
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatalf("start %s: %v", n.ID, err)
	}
	defer f.Close()
	n.runs++
	fmt.Fprintf(f, "=== harness: start %s (run %d) at %s\n", n.ID, n.runs, time.Now().Format(time.RFC3339Nano))
	if st, err := f.Stat(); err == nil {
		n.logOffset = st.Size()
	}
	cmd := exec.Command(c.bin, "server", "--config", n.ConfigPath, "--pid-file", n.PidFile)
	cmd.Stdout, cmd.Stderr = f, f
	n.startedAt = time.Now()
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", n.ID, err)
	}
	done := make(chan struct{})
	n.proc, n.done, n.exitCode = cmd.Process, done, -1
	go func() {
		_ = cmd.Wait()
		n.mu.Lock()
		if n.done == done {
			n.exitCode = cmd.ProcessState.ExitCode()
		}
		n.mu.Unlock()
		close(done)
	}()
}

// StartAll starts every node.
func (c *Cluster) StartAll() {
	c.t.Helper()
	for i := range c.nodes {
		c.Start(i)
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !isClosed(n.done)
}

// Live returns the indexes of the running nodes.
func (c *Cluster) Live() []int {
	var out []int
	for i := range c.nodes {
		if c.Running(i) {
			out = append(out, i)
		}
	}
	return out
}

// Pid is the pid of node i's current (or last) process.
func (c *Cluster) Pid(i int) int {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return 0
	}
	return n.proc.Pid
}

// InstallBinary replaces the cluster's own binary (WithOwnBinary) with a
// copy of src, atomically: running servers keep their old image, an
// upgrade starts the new one.
func (c *Cluster) InstallBinary(src string) {
	c.t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		c.t.Fatal(err)
	}
	tmp := c.bin + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, c.bin); err != nil {
		c.t.Fatal(err)
	}
}

func readPidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return pid
}

// Adopt makes the process named by node i's pid file its current process,
// once the previous one has exited after an upgrade. The test binary is a
// child subreaper (see testMain), so the orphaned successor is its child
// and can be waited for like the processes it started.
func (c *Cluster) Adopt(i int) int {
	c.t.Helper()
	n := c.nodes[i]
	if _, ok := c.waitExit(i, stopWait); !ok {
		c.t.Fatalf("%s: the old process did not exit after the upgrade", n.ID)
	}
	pid := readPidFile(n.PidFile)
	if pid <= 0 {
		c.t.Fatalf("%s: no pid in %s after the upgrade", n.ID, n.PidFile)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.proc, n.done, n.exitCode = proc, done, -1
	n.mu.Unlock()
	go func() {
		st, err := proc.Wait()
		n.mu.Lock()
		if n.done == done && err == nil {
			n.exitCode = st.ExitCode()
		}
		n.mu.Unlock()
		close(done)
	}()
	return pid
}

// Signal sends sig to node i's process.
func (c *Cluster) Signal(i int, sig syscall.Signal) {
	c.t.Helper()
	n := c.nodes[i]
	n.mu.Lock()
	proc := n.proc
	n.mu.Unlock()
	if proc == nil {
		c.t.Fatalf("signal %s: never started", n.ID)
	}
	if err := proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Fatalf("signal %v to %s: %v", sig, n.ID, err)
	}
}

// stopWait bounds a graceful stop; the server itself force-exits after 15 s.
const stopWait = 20 * time.Second

// Stop sends SIGTERM to node i and returns its exit code once it exited.
// Past stopWait the process is killed and the test fails.
func (c *Cluster) Stop(i int) int {
	c.t.Helper()
	c.Signal(i, syscall.SIGTERM)
	code, ok := c.waitExit(i, stopWait)
	if !ok {
		c.t.Errorf("%s did not exit within %v of SIGTERM; killing it", c.nodes[i].ID, stopWait)
		return c.Kill(i)
	}
	return code
}

// Kill sends SIGKILL to node i and returns its exit code (-1: killed by a signal).
func (c *Cluster) Kill(i int) int {
	c.t.Helper()
	c.Signal(i, syscall.SIGKILL)
	code, ok := c.waitExit(i, 10*time.Second)
	if !ok {
		c.t.Fatalf("%s did not die within 10s of SIGKILL", c.nodes[i].ID)
	}
	return code
}

// Wait waits (up to stopWait) for node i to exit and returns its exit code.
func (c *Cluster) Wait(i int) int {
	c.t.Helper()
	code, ok := c.waitExit(i, stopWait)
	if !ok {
		c.t.Fatalf("%s did not exit within %v", c.nodes[i].ID, stopWait)
	}
	return code
}

func (c *Cluster) waitExit(i int, d time.Duration) (int, bool) {
	n := c.nodes[i]
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		c.t.Fatalf("%s was never started", n.ID)
	}
	select {
	case <-done:
	case <-time.After(d):
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitCode, true
}

// killAll kills every process still running (cleanup; also after t.Fatal).
// All are signalled first, then waited for: a -race process takes about a
// second to exit.
func (c *Cluster) killAll() {
	type victim struct {
		n    *Node
		proc *os.Process
		done chan struct{}
	}
	var vs []victim
	for _, n := range c.nodes {
		n.mu.Lock()
		proc, done := n.proc, n.done
		n.mu.Unlock()
		if proc == nil || isClosed(done) {
			continue
		}
		_ = proc.Kill()
		vs = append(vs, victim{n, proc, done})
	}
	// A process that took over in an upgrade the test did not adopt.
	for _, n := range c.nodes {
		n.mu.Lock()
		cur := 0
		if n.proc != nil {
			cur = n.proc.Pid
		}
		n.mu.Unlock()
		if pid := readPidFile(n.PidFile); pid > 0 && pid != cur {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.After(10 * time.Second)
	for _, v := range vs {
		select {
		case <-v.done:
		case <-deadline:
			c.t.Errorf("%s (pid %d) did not die on SIGKILL", v.n.ID, v.proc.Pid)
		}
	}
}

// checkLogs fails the test on a data race report of a server, and on
// failure prints the tail of every node's log.
func (c *Cluster) checkLogs() {
	for _, n := range c.nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte("WARNING: DATA RACE")) {
			c.t.Errorf("%s: the race detector reported a data race; see its log", n.ID)
		}
	}
	if !c.t.Failed() {
		return
	}
	for _, n := range c.nodes {
		c.t.Logf("---- last 40 lines of %s (%s) ----\n%s", n.ID, n.LogPath, tailLines(n.LogPath, 40, 600))
	}
}

func tailLines(path string, n, maxLen int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > maxLen {
			lines[i] = l[:maxLen] + "…"
		}
	}
	return strings.Join(lines, "\n")
}

// RunLog returns what node i logged since its current (or last) start.
func (c *Cluster) RunLog(i int) string {
	n := c.nodes[i]
	n.mu.Lock()
	off := n.logOffset
	n.mu.Unlock()
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		c.t.Fatalf("read log of %s: %v", n.ID, err)
	}
	if off > int64(len(b)) {
		off = 0
	}
	return string(b[off:])
}

// ---------------------------------------------------------------------------
// Observing the cluster

// Status asks node i for its status (1 s timeout).
func (c *Cluster) Status(i int) (*xcev1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.status.Status(ctx, c.nodes[i].ClientAddr)
}

// raceSlack scales a startup deadline for a -race build of xce: the race
// runtime spends 50-300 ms (more on a loaded machine) initialising before
// main runs, and the instrumented code is several times slower.
func raceSlack(d time.Duration) time.Duration {
	if raceEnabled {
		return 2*d + time.Second
	}
	return d
}

// pollEvery is the interval of the harness's polling loops.
const pollEvery = 25 * time.Millisecond

// waitFor calls cond every `every` until it returns nil or timeout passes;
// it returns the last error then.
func waitFor(timeout, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		<-tick.C
	}
}

// WaitRoles polls the running nodes until exactly one is PRIMARY with write
// quorum and the others are STANDBY, all agreeing on term and leader id, and
// returns the primary's index. It fails the test after timeout.
func (c *Cluster) WaitRoles(timeout time.Duration) int {
	c.t.Helper()
	p, _, err := c.waitRolesAmong(timeout, c.Live())
	if err != nil {
		c.t.Fatalf("roles not settled within %v: %v", timeout, err)
	}
	return p
}

// waitRolesAmong is WaitRoles over the given nodes. It returns the primary's
// index and the statuses that showed it.
func (c *Cluster) waitRolesAmong(timeout time.Duration, idx []int) (int, []*xcev1.StatusResponse, error) {
	if len(idx) == 0 {
		return -1, nil, errors.New("no node to ask")
	}
	primary := -1
	var sts []*xcev1.StatusResponse
	err := waitFor(timeout, pollEvery, func() error {
		primary, sts = -1, nil
		var desc []string
		var problem error
		for _, i := range idx {
			s, err := c.Status(i)
			if err != nil {
				desc = append(desc, fmt.Sprintf("%s: %v", c.nodes[i].ID, err))
				problem = errors.New("a node did not answer")
				continue
			}
			sts = append(sts, s)
			desc = append(desc, describeStatus(s))
			switch s.Role {
			case xcev1.Role_ROLE_PRIMARY:
				if primary >= 0 {
					problem = errors.New("two primaries")
				}
				primary = i
				if !s.WriteQuorum {
					problem = errors.New("primary without write quorum")
				}
			case xcev1.Role_ROLE_STANDBY:
			default:
				problem = errors.New("a node is neither PRIMARY nor STANDBY")
			}
		}
		if problem == nil && primary < 0 {
			problem = errors.New("no primary")
		}
		if problem == nil {
			want := c.nodes[primary].ID
			for _, s := range sts {
				if s.Term != sts[0].Term || s.LeaderId != want {
					problem = errors.New("nodes disagree on term or leader")
				}
			}
		}
		if problem != nil {
			return fmt.Errorf("%w [%s]", problem, strings.Join(desc, "; "))
		}
		return nil
	})
	if err != nil {
		return -1, sts, err
	}
	return primary, sts, nil
}

func roleName(r xcev1.Role) string { return strings.TrimPrefix(r.String(), "ROLE_") }

func describeStatus(s *xcev1.StatusResponse) string {
	return fmt.Sprintf("%s: %s term=%d leader=%q wq=%v applied=%d (%s)",
		s.NodeId, roleName(s.Role), s.Term, s.LeaderId, s.WriteQuorum, s.AppliedIndex, s.Reason)
}

// Client returns a new client over every node's client address.
func (c *Cluster) Client() *client.Client {
	return c.ClientOf(c.Addrs()...)
}

// ClientOf returns a new client over the given endpoints.
func (c *Cluster) ClientOf(endpoints ...string) *client.Client {
	c.t.Helper()
	cl, err := client.New(endpoints, client.Options{})
	if err != nil {
		c.t.Fatalf("client: %v", err)
	}
	return cl
}

// HTTPGet GETs path on node i's client port and returns the status code and body.
func (c *Cluster) HTTPGet(i int, path string) (int, string, error) {
	resp, err := c.http.Get("http://" + c.nodes[i].ClientAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Metric scrapes node i's /metrics and sums every sample of the named metric
// (all label sets). A metric that is absent sums to 0.
func (c *Cluster) Metric(i int, name string) (float64, error) {
	code, body, err := c.HTTPGet(i, "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics: HTTP %d", code)
	}
	return sumMetric(body, name)
}

// sumMetric sums the samples of metric name in a Prometheus text exposition.
func sumMetric(body, name string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				return 0, fmt.Errorf("bad sample line %q", line)
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "):
		default:
			continue // another metric with this prefix
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, fmt.Errorf("bad sample line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("bad sample line %q: %v", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// ---------------------------------------------------------------------------
// Running the CLI

type cmdResult struct {
	Stdout, Stderr string
	Code           int
	Elapsed        time.Duration
}

// runXCE runs the xce binary with args and returns its output and exit code;
// past timeout it is killed and the test fails.
func runXCE(t testing.TB, timeout time.Duration, args ...string) cmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, xceBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := cmdResult{Stdout: out.String(), Stderr: errb.String(), Elapsed: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("xce %s: still running after %v (killed)\nstderr:\n%s", strings.Join(args, " "), timeout, r.Stderr)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	default:
		t.Fatalf("xce %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// nonEmptyLines splits s into its non-blank lines.
func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
