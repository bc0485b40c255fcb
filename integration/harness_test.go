package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
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
	changes   []func(*configs.Config)
	ownBinary bool
	// secure and peerTLS: localcluster.Options.Secure and PeerTLSOnly.
	secure, peerTLS bool
}

// WithPeerTLS gives every node mutual TLS on the peer port, with a CA and
// certificates generated in the test's dir; the client port stays
// plaintext.
func WithPeerTLS() Option {
	return func(o *clusterOptions) { o.peerTLS = true }
}

// WithSecure gives every node mutual TLS on the peer port, TLS on the
// client port and an admin token (Credentials).
func WithSecure() Option {
	return func(o *clusterOptions) { o.secure = true }
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
// defaults).
func WithRaft(heartbeat, election, lease time.Duration) Option {
	return func(o *clusterOptions) { o.raft = &raftSpec{heartbeat, election, lease} }
}

// WithConfig changes every node's config.
func WithConfig(change func(*configs.Config)) Option {
	return func(o *clusterOptions) { o.changes = append(o.changes, change) }
}

// WithLogLevel sets log.level (default debug).
func WithLogLevel(level string) Option {
	return func(o *clusterOptions) { o.logLevel = level }
}

// Cluster is n xce server processes on loopback with their configs, data
// dirs and logs in a test temp dir, run by the local-cluster launcher.
// Node indexes are 0-based; node i has id "n<i+1>".
type Cluster struct {
	t      testing.TB
	dir    string
	opts   clusterOptions
	lc     *localcluster.Cluster
	nodes  []*Node
	bin    string         // the binary servers start from
	status *client.Client // for Status only: one endpoint per call
	http   *http.Client
}

// Node is one server of a Cluster.
type Node = localcluster.Node

// freePorts returns n distinct free loopback ports.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := localcluster.FreePorts(n)
	if err != nil {
		t.Fatal(err)
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
	lc, err := localcluster.New(localcluster.Options{
		Exe: c.bin, Dir: c.dir, N: n, ClusterID: "it", PidFiles: true, MarkStarts: true,
		Secure: c.opts.secure, PeerTLSOnly: c.opts.peerTLS,
		Configure: func(cfg *configs.Config) {
			if r := c.opts.raft; r != nil {
				cfg.Raft.HeartbeatTimeout = configs.Duration{Duration: r.HeartbeatTimeout}
				cfg.Raft.ElectionTimeout = configs.Duration{Duration: r.ElectionTimeout}
				cfg.Raft.LeaderLeaseTimeout = configs.Duration{Duration: r.LeaderLeaseTimeout}
			}
			cfg.Log.Level = c.opts.logLevel
			for _, change := range c.opts.changes {
				change(cfg)
			}
		},
	})
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	c.lc, c.nodes = lc, lc.Nodes
	st, err := client.New(lc.ClientAddrs(), c.clientOptions())
	if err != nil {
		t.Fatalf("status client: %v", err)
	}
	c.status = st
	if c.opts.secure {
		tlsCfg, err := c.Credentials().TLSConfig()
		if err != nil {
			t.Fatalf("TLS config: %v", err)
		}
		tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		c.http.Transport = bearerTransport{base: tr, token: c.Credentials().Token}
	}
	// Cleanups run last-registered first: kill, then check and dump logs.
	t.Cleanup(c.checkLogs)
	t.Cleanup(c.killAll)
	return c
}

// clientOptions are the options of the harness's clients: the admin's
// credentials on a secured cluster (WithSecure), plaintext otherwise.
func (c *Cluster) clientOptions() client.Options {
	if !c.opts.secure {
		return client.Options{}
	}
	return client.Options{Credentials: c.Credentials()}
}

// bearerTransport sends the admin's bearer token with every request of
// the harness's HTTP client on a secured cluster.
type bearerTransport struct {
	base  http.RoundTripper
	token string
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(c.nodes) }

// Node returns node i.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Credentials are the admin's credentials of a secured cluster.
func (c *Cluster) Credentials() localcluster.Credentials { return c.lc.Credentials() }

// TLSDir holds a secured cluster's CA and certificates.
func (c *Cluster) TLSDir() string { return c.lc.TLSDir() }

// Addrs are the client addresses of every node.
func (c *Cluster) Addrs() []string { return c.lc.ClientAddrs() }

// ---------------------------------------------------------------------------
// Configs

// ConfigSpec is one node's config, as the harness writes it.
type ConfigSpec struct {
	configs.Config
	// Extra is appended verbatim (e.g. an unknown key).
	Extra string
}

// ConfigSpec returns the config the harness writes for node i.
func (c *Cluster) ConfigSpec(i int) ConfigSpec {
	return ConfigSpec{Config: c.lc.Config(i)}
}

// YAML renders the config.
func (s ConfigSpec) YAML() string {
	b, err := configs.Marshal(&s.Config)
	if err != nil {
		panic(err) // a Config of plain values always marshals
	}
	return string(b) + s.Extra
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
	if err := c.lc.Start(i); err != nil {
		c.t.Fatal(err)
	}
}

// StartAll starts every node.
func (c *Cluster) StartAll() {
	c.t.Helper()
	for i := range c.nodes {
		c.Start(i)
	}
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool { return c.lc.Running(i) }

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
func (c *Cluster) Pid(i int) int { return c.lc.Pid(i) }

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

// Adopt makes the process named by node i's pid file its current process,
// once the previous one has exited after an upgrade. The test binary is a
// child subreaper (see testMain), so the orphaned successor is its child
// and can be waited for like the processes it started.
func (c *Cluster) Adopt(i int) int {
	c.t.Helper()
	pid, err := c.lc.Adopt(i, stopWait)
	if err != nil {
		c.t.Fatal(err)
	}
	return pid
}

// Signal sends sig to node i's process.
func (c *Cluster) Signal(i int, sig syscall.Signal) {
	c.t.Helper()
	if err := c.lc.Signal(i, sig); err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, c.nodes[i].ID, err)
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
	code, err := c.lc.Kill(i)
	if err != nil {
		c.t.Fatal(err)
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
	p := c.lc.Process(i)
	if p == nil {
		c.t.Fatalf("%s was never started", c.nodes[i].ID)
	}
	return p.Wait(d)
}

// killAll kills every process still running (cleanup; also after t.Fatal),
// and one that took over in an upgrade the test did not adopt.
func (c *Cluster) killAll() {
	if err := c.lc.KillAll(10 * time.Second); err != nil {
		c.t.Error(err)
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
		if i := bytes.Index(b, []byte("WARNING: DATA RACE")); i >= 0 {
			report := b[i:]
			if end := bytes.Index(report, []byte("\n==================")); end >= 0 {
				report = report[:end]
			}
			c.t.Errorf("%s: the race detector reported a data race:\n%s", n.ID, report)
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
	off := c.lc.LogOffset(i)
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
	err := testutil.Poll(timeout, pollEvery, func() error {
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
	cl, err := client.New(endpoints, c.clientOptions())
	if err != nil {
		c.t.Fatalf("client: %v", err)
	}
	return cl
}

// HTTPGet GETs path on node i's client port and returns the status code
// and body; on a secured cluster over TLS with the admin's token.
func (c *Cluster) HTTPGet(i int, path string) (int, string, error) {
	scheme := "http://"
	if c.opts.secure {
		scheme = "https://"
	}
	resp, err := c.http.Get(scheme + c.nodes[i].ClientAddr + path)
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
