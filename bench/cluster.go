package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/xce/xce/client"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// Profile is a raft timing profile for a local cluster.
type Profile struct {
	Name                                                  string
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
}

// Profiles: "default" uses the config defaults; "fast" halves the timeout
// that bounds failover from a cut-off or stalled primary, to 100 ms: the
// shortest that held through loaded 5-minute runs without an election on a
// small machine, whose goroutines now and then wait tens of milliseconds for
// a core (docs/benchmarks.md).
var Profiles = map[string]Profile{
	"default": {Name: "default"},
	"fast":    {Name: "fast", HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond},
}

// LocalCluster is N child `xce server` processes on loopback in a temp dir.
type LocalCluster struct {
	Exe     string
	Dir     string
	N       int
	Profile Profile
	Client  []string // client addrs, by node index 0..N-1
	Peer    []string

	mu    sync.Mutex
	procs []*exec.Cmd
	done  []chan struct{}
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartLocal writes configs and starts n nodes.
func StartLocal(exe, dir string, n int, p Profile) (*LocalCluster, error) {
	c := &LocalCluster{Exe: exe, Dir: dir, N: n, Profile: p, procs: make([]*exec.Cmd, n), done: make([]chan struct{}, n)}
	for i := 0; i < n; i++ {
		ca, err := freePort()
		if err != nil {
			return nil, err
		}
		pa, err := freePort()
		if err != nil {
			return nil, err
		}
		c.Client, c.Peer = append(c.Client, ca), append(c.Peer, pa)
	}
	for i := 0; i < n; i++ {
		if err := os.WriteFile(c.configPath(i), []byte(c.config(i)), 0o644); err != nil {
			return nil, err
		}
	}
	for i := 0; i < n; i++ {
		if err := c.Start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

func (c *LocalCluster) configPath(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("n%d.yaml", i+1))
}

// LogPath is node i's log file.
func (c *LocalCluster) LogPath(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("n%d.log", i+1))
}

func (c *LocalCluster) config(i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node_id: n%d\ncluster_id: bench\ndata_dir: %s\nclient_addr: %s\npeer_addr: %s\npeers:\n",
		i+1, filepath.Join(c.Dir, fmt.Sprintf("data-n%d", i+1)), c.Client[i], c.Peer[i])
	for j := 0; j < c.N; j++ {
		fmt.Fprintf(&b, "  - {id: n%d, peer_addr: %s, client_addr: %s}\n", j+1, c.Peer[j], c.Client[j])
	}
	if p := c.Profile; p.HeartbeatTimeout > 0 {
		fmt.Fprintf(&b, "raft: {heartbeat_timeout: %s, election_timeout: %s, leader_lease_timeout: %s}\n",
			p.HeartbeatTimeout, p.ElectionTimeout, p.LeaderLeaseTimeout)
	}
	b.WriteString("log: {level: info, format: json}\n")
	return b.String()
}

// Start starts node i (again).
func (c *LocalCluster) Start(i int) error {
	logf, err := os.OpenFile(c.LogPath(i), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.Exe, "server", "--config", c.configPath(i))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Should the bench itself die, its servers go with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start n%d: %w", i+1, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.procs[i], c.done[i] = cmd, done
	c.mu.Unlock()
	return nil
}

// Kill SIGKILLs node i and waits until it is gone.
func (c *LocalCluster) Kill(i int) {
	c.mu.Lock()
	p, done := c.procs[i], c.done[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Process.Kill()
	<-done
}

// Signal sends sig to node i.
func (c *LocalCluster) Signal(i int, sig syscall.Signal) error {
	c.mu.Lock()
	p := c.procs[i]
	c.mu.Unlock()
	if p == nil {
		return errors.New("not running")
	}
	return p.Process.Signal(sig)
}

// Stop stops every node: SIGTERM, then SIGKILL after a grace period.
func (c *LocalCluster) Stop() {
	c.mu.Lock()
	procs, dones := append([]*exec.Cmd(nil), c.procs...), append([]chan struct{}(nil), c.done...)
	c.mu.Unlock()
	for _, p := range procs {
		if p != nil {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
	}
	for i, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-dones[i]:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-dones[i]
		}
	}
}

// Statuses asks every running node for its status (nil where it fails).
func (c *LocalCluster) Statuses(ctx context.Context, cl *client.Client) []*xcev1.StatusResponse {
	out := make([]*xcev1.StatusResponse, c.N)
	var wg sync.WaitGroup
	for i := 0; i < c.N; i++ {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			if s, err := cl.Status(sctx, c.Client[i]); err == nil {
				out[i] = s
			}
		})
	}
	wg.Wait()
	return out
}

// WaitPrimary polls until exactly one node is PRIMARY with write quorum
// and every other running node is STANDBY; it returns the primary's index.
func (c *LocalCluster) WaitPrimary(ctx context.Context, cl *client.Client, wantStandbys int) (int, error) {
	for {
		primary, standbys := -1, 0
		for i, s := range c.Statuses(ctx, cl) {
			if s == nil {
				continue
			}
			switch s.Role {
			case xcev1.Role_ROLE_PRIMARY:
				if s.WriteQuorum {
					if primary >= 0 {
						primary = -2
					} else if primary == -1 {
						primary = i
					}
				}
			case xcev1.Role_ROLE_STANDBY:
				standbys++
			}
		}
		if primary >= 0 && standbys >= wantStandbys {
			return primary, nil
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no single PRIMARY with %d STANDBY: %w", wantStandbys, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// MaxKillLag is how far (in entries) a STANDBY may trail the PRIMARY's
// commit index when the bench kills the PRIMARY.
const MaxKillLag = 1024

// WaitCaughtUp polls until every STANDBY has applied what the PRIMARY had
// committed when the wait began and then, for up to settle more, until
// one look finds every STANDBY within MaxKillLag entries of the PRIMARY's
// commit index, so that a kill that follows is a single failure rather
// than one during a restarted node's catch-up (raft cannot elect until
// that node answers votes, nor commit before it has the leader's log).
// It returns the largest lag of the last look: on a saturated machine a
// STANDBY can trail by more than MaxKillLag for good, and the caller
// reports that rather than waiting forever.
func (c *LocalCluster) WaitCaughtUp(ctx context.Context, cl *client.Client, settle time.Duration) (lag uint64, err error) {
	var target uint64
	var settled time.Time // when the first target was reached
	for {
		var commit uint64
		sts := c.Statuses(ctx, cl)
		for _, s := range sts {
			if s != nil && s.Role == xcev1.Role_ROLE_PRIMARY {
				commit = s.CommitIndex
			}
		}
		if target == 0 {
			target = commit
		}
		// A look without the PRIMARY's answer says nothing about the lag.
		if target > 0 && commit > 0 {
			behind := 0
			lag = 0
			for _, s := range sts {
				if s == nil || s.Role != xcev1.Role_ROLE_STANDBY {
					continue
				}
				if s.AppliedIndex < target {
					behind++
				}
				if commit > s.AppliedIndex {
					lag = max(lag, commit-s.AppliedIndex)
				}
			}
			if behind == 0 {
				if settled.IsZero() {
					settled = time.Now()
				}
				if lag <= MaxKillLag || time.Since(settled) >= settle {
					return lag, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return lag, fmt.Errorf("standbys not caught up to index %d: %w", target, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
