// Package localcluster runs a cluster of `xce server` processes on
// loopback, the one launcher behind `xce dev`, `xce bench --local` and the
// integration tests. Each node's config is built as a configs.Config and
// written by marshalling; the launcher starts, signals, kills and stops the
// processes, keeps each node's log and waits until the cluster has elected.
// A secured cluster (Options.Secure) gets its own CA, certificates and
// admin token, and for a local Kafka broker a certificate and a SASL
// password (Options.SecureKafka).
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/upgrade"
)

// Options describe a cluster.
type Options struct {
	Exe string // the xce binary the servers run
	Dir string // the configs (n<i>.yaml), data dirs (data/n<i>), pid files
	// LogDir holds the logs (n<i>.log); default Dir.
	LogDir    string
	N         int
	ClusterID string
	// BasePort, when set, puts node n<i> at client port BasePort+i and
	// peer port BasePort+100+i; otherwise free loopback ports are chosen.
	BasePort int
	// Configure adjusts every node's config after its identity is set
	// (log: info, json, unless changed here).
	Configure func(*configs.Config)
	// PidFiles starts each server with --pid-file <Dir>/n<i>.pid.
	PidFiles bool
	// DieWithParent SIGKILLs the servers should this process die.
	DieWithParent bool
	// Env (KEY=value) is added to the environment the servers inherit.
	Env []string
	// MarkStarts writes a line into a node's log before each start.
	MarkStarts bool
	// Secure generates, under <Dir>/tls, a CA, a certificate per node, the
	// admin's client certificate and an admin token (reused by a later New
	// on the same Dir), and gives every node mutual TLS on the peer port
	// (peer_tls), TLS on the client port (tls, client certificates
	// optional) and a tokens file naming the admin (auth.tokens_file).
	// Credentials returns what a client needs.
	Secure bool
	// PeerTLSOnly is Secure for the peer port alone: the certificates and
	// the token are made the same way, but the client port stays plaintext
	// with no permissions.
	PeerTLSOnly bool
	// Workers, with Secure, are the workers to make certificates for
	// (WorkerCredentials).
	Workers []string
	// SecureKafka, with Secure, also makes under <Dir>/tls a certificate
	// for a local Kafka broker (for 127.0.0.1 and localhost) and a random
	// SASL password, and sets every node's kafka.tls and kafka.sasl to
	// them: KafkaBroker is what the broker serves, KafkaSecurity what its
	// clients use. The brokers themselves are Configure's to set.
	SecureKafka bool
}

// Node is one server of a Cluster. Indexes are 0-based; node i has id
// "n<i+1>".
type Node struct {
	Index      int
	ID         string
	ClientAddr string
	PeerAddr   string
	DataDir    string
	ConfigPath string
	LogPath    string
	PidFile    string // "" without Options.PidFiles
	// Join, for a node added by AddNode, are the members' client
	// addresses it joins through; its peers list only itself.
	Join []string

	mu        sync.Mutex
	proc      *Process // the current (or last) process
	runs      int
	logOffset int64 // size of the log when the current run started
}

// Cluster is N server processes on loopback.
type Cluster struct {
	opts  Options
	Nodes []*Node
	creds Credentials
}

// FreePorts returns n distinct free loopback ports. Every listener is held
// until all ports are chosen, so the ports differ from each other.
func FreePorts(n int) ([]int, error) {
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
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// New lays the cluster out and writes every node's config; it starts
// nothing.
func New(o Options) (*Cluster, error) {
	if o.LogDir == "" {
		o.LogDir = o.Dir
	}
	for _, d := range []string{o.Dir, o.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var clientPort, peerPort func(i int) int
	if o.BasePort > 0 {
		clientPort = func(i int) int { return o.BasePort + i + 1 }
		peerPort = func(i int) int { return o.BasePort + 100 + i + 1 }
	} else {
		ports, err := FreePorts(2 * o.N)
		if err != nil {
			return nil, err
		}
		clientPort = func(i int) int { return ports[2*i] }
		peerPort = func(i int) int { return ports[2*i+1] }
	}
	c := &Cluster{opts: o}
	for i := range o.N {
		id := fmt.Sprintf("n%d", i+1)
		nd := &Node{
			Index: i, ID: id,
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", clientPort(i)),
			PeerAddr:   fmt.Sprintf("127.0.0.1:%d", peerPort(i)),
			DataDir:    filepath.Join(o.Dir, "data", id),
			ConfigPath: filepath.Join(o.Dir, id+".yaml"),
			LogPath:    filepath.Join(o.LogDir, id+".log"),
		}
		if o.PidFiles {
			nd.PidFile = filepath.Join(o.Dir, id+".pid")
		}
		c.Nodes = append(c.Nodes, nd)
	}
	if o.secured() {
		if err := c.secure(); err != nil {
			return nil, fmt.Errorf("certificates of the local cluster: %w", err)
		}
	}
	for i := range c.Nodes {
		cfg := c.Config(i)
		if err := configs.WriteFile(c.Nodes[i].ConfigPath, &cfg); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Config is the config New writes for node i.
func (c *Cluster) Config(i int) configs.Config {
	n := c.Nodes[i]
	cfg := configs.Default()
	cfg.NodeID, cfg.ClusterID, cfg.DataDir = n.ID, c.opts.ClusterID, n.DataDir
	cfg.ClientAddr, cfg.PeerAddr = n.ClientAddr, n.PeerAddr
	if n.Join != nil {
		cfg.Join = n.Join
		cfg.Peers = []configs.Peer{{ID: n.ID, PeerAddr: n.PeerAddr, ClientAddr: n.ClientAddr}}
	} else {
		for _, p := range c.Nodes {
			if p.Join == nil {
				cfg.Peers = append(cfg.Peers, configs.Peer{ID: p.ID, PeerAddr: p.PeerAddr, ClientAddr: p.ClientAddr})
			}
		}
	}
	cfg.Log = configs.Log{Level: "info", Format: "json"}
	c.secureConfig(n, &cfg)
	if c.opts.Configure != nil {
		c.opts.Configure(&cfg)
	}
	return cfg
}

// N is the number of nodes.
func (c *Cluster) N() int { return len(c.Nodes) }

// ClientAddrs are the nodes' client addresses, by index.
func (c *Cluster) ClientAddrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.ClientAddr)
	}
	return a
}

// Start starts node i's server (again); its output is appended to its log.
func (c *Cluster) Start(i int) error {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.Exited() {
		return fmt.Errorf("start %s: already running (pid %d)", n.ID, n.proc.Pid())
	}
	n.runs++
	if f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		if c.opts.MarkStarts {
			fmt.Fprintf(f, "=== harness: start %s (run %d) at %s\n", n.ID, n.runs, time.Now().Format(time.RFC3339Nano))
		}
		if st, err := f.Stat(); err == nil {
			n.logOffset = st.Size()
		}
		f.Close()
	}
	args := []string{"server", "--config", n.ConfigPath}
	if n.PidFile != "" {
		args = append(args, "--pid-file", n.PidFile)
	}
	p, err := StartProcessEnv(c.opts.Exe, n.LogPath, c.opts.DieWithParent, c.opts.Env, args...)
	if err != nil {
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	n.proc = p
	return nil
}

// StartAll starts every node.
func (c *Cluster) StartAll() error {
	for i := range c.Nodes {
		if err := c.Start(i); err != nil {
			return err
		}
	}
	return nil
}

// Process is node i's current (or last) process; nil before it started.
func (c *Cluster) Process(i int) *Process {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// Running reports whether node i's process is running.
func (c *Cluster) Running(i int) bool {
	p := c.Process(i)
	return p != nil && !p.Exited()
}

// Pid is the pid of node i's current (or last) process, 0 before it started.
func (c *Cluster) Pid(i int) int {
	if p := c.Process(i); p != nil {
		return p.Pid()
	}
	return 0
}

// LogOffset is the size node i's log had when its current run started.
func (c *Cluster) LogOffset(i int) int64 {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.logOffset
}

// Signal sends sig to node i's process.
func (c *Cluster) Signal(i int, sig os.Signal) error {
	p := c.Process(i)
	if p == nil {
		return fmt.Errorf("signal %s: never started", c.Nodes[i].ID)
	}
	return p.Signal(sig)
}

// Kill SIGKILLs node i and waits until it is gone; it returns the exit
// code (-1: killed by the signal).
func (c *Cluster) Kill(i int) (int, error) {
	p := c.Process(i)
	if p == nil {
		return 0, fmt.Errorf("kill %s: never started", c.Nodes[i].ID)
	}
	return p.Kill(10 * time.Second)
}

// Adopt makes the process named by node i's pid file its current one, once
// the previous one has exited after an upgrade; the caller must be the new
// process's parent or a child subreaper. It returns the pid.
func (c *Cluster) Adopt(i int, wait time.Duration) (int, error) {
	n := c.Nodes[i]
	if p := c.Process(i); p != nil {
		if _, ok := p.Wait(wait); !ok {
			return 0, fmt.Errorf("%s: the old process did not exit after the upgrade", n.ID)
		}
	}
	pid := upgrade.ReadPid(n.PidFile)
	if pid <= 0 {
		return 0, fmt.Errorf("%s: no pid in %s after the upgrade", n.ID, n.PidFile)
	}
	p, err := Adopt(pid)
	if err != nil {
		return 0, err
	}
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return pid, nil
}

// Stop stops every node: SIGTERM, then SIGKILL past grace.
func (c *Cluster) Stop(grace time.Duration) {
	var ps []*Process
	for i := range c.Nodes {
		if p := c.Process(i); p != nil {
			ps = append(ps, p)
		}
	}
	StopAll(grace, ps...)
}

// KillAll SIGKILLs every running node, and a process that took over in an
// upgrade but was not adopted, and waits at most wait for them to go. It
// returns an error naming those that did not.
func (c *Cluster) KillAll(wait time.Duration) error {
	var victims []*Process
	for i, n := range c.Nodes {
		p := c.Process(i)
		if p != nil && !p.Exited() {
			_ = p.Signal(syscall.SIGKILL)
			victims = append(victims, p)
		}
		if pid := upgrade.ReadPid(n.PidFile); pid > 0 && (p == nil || pid != p.Pid()) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(wait)
	var errs []error
	for _, p := range victims {
		if _, ok := p.Wait(time.Until(deadline)); !ok {
			errs = append(errs, fmt.Errorf("pid %d did not die on SIGKILL", p.Pid()))
		}
	}
	return errors.Join(errs...)
}

// Statuses asks every node for its status (nil where it fails).
func (c *Cluster) Statuses(ctx context.Context, cl *client.Client) []*xcev1.StatusResponse {
	out := make([]*xcev1.StatusResponse, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if s, err := cl.Status(sctx, n.ClientAddr); err == nil {
				out[i] = s
			}
		})
	}
	wg.Wait()
	return out
}

// pollEvery is the interval of the launcher's status polls.
const pollEvery = 20 * time.Millisecond

// WaitPrimary polls until exactly one node is PRIMARY with write quorum
// and at least wantStandbys others are STANDBY; it returns the primary's
// index.
func (c *Cluster) WaitPrimary(ctx context.Context, cl *client.Client, wantStandbys int) (int, error) {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		sts := c.Statuses(ctx, cl)
		primaries := slices.IndexFunc(sts, func(s *xcev1.StatusResponse) bool { return isWritingPrimary(s) })
		standbys := 0
		for _, s := range sts {
			if s != nil && s.Role == xcev1.Role_ROLE_STANDBY {
				standbys++
			}
		}
		single := primaries >= 0 && !slices.ContainsFunc(sts[primaries+1:], isWritingPrimary)
		if single && standbys >= wantStandbys {
			return primaries, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no single PRIMARY with %d STANDBY: %w", wantStandbys, ctx.Err())
		case <-tick.C:
		}
	}
}

func isWritingPrimary(s *xcev1.StatusResponse) bool {
	return s != nil && s.Role == xcev1.Role_ROLE_PRIMARY && s.WriteQuorum
}
