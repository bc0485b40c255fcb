package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/localcluster"
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

// apply sets the profile's raft timings in a node's config.
func (p Profile) apply(c *configs.Config) {
	if p.HeartbeatTimeout > 0 {
		c.Raft.HeartbeatTimeout = configs.Duration{Duration: p.HeartbeatTimeout}
		c.Raft.ElectionTimeout = configs.Duration{Duration: p.ElectionTimeout}
		c.Raft.LeaderLeaseTimeout = configs.Duration{Duration: p.LeaderLeaseTimeout}
	}
}

// localSpec is what a run asks of its local cluster beyond the size.
type localSpec struct {
	n       int
	profile Profile
	// secure: TLS on every port, an admin token.
	secure bool
	// conns is the fewest client connections a node must take at once
	// (its limits.client.max_connections is raised to it when lower).
	conns int
	// env is added to the servers' environment.
	env []string
}

// configure sets the spec's timings and connection limit in a node's
// config.
func (s localSpec) configure(c *configs.Config) {
	s.profile.apply(c)
	c.Limits.Client.MaxConnections = max(c.Limits.Client.MaxConnections, s.conns)
}

// startLocal starts a cluster of exe in dir as spec says; should the bench
// die, its servers go with it.
func startLocal(exe, dir string, spec localSpec) (*localcluster.Cluster, error) {
	c, err := localcluster.New(localcluster.Options{
		Exe: exe, Dir: dir, N: spec.n, ClusterID: "bench", Configure: spec.configure, DieWithParent: true,
		Secure: spec.secure, Env: spec.env,
	})
	if err != nil {
		return nil, err
	}
	if err := c.StartAll(); err != nil {
		c.Stop(stopGrace)
		return nil, err
	}
	return c, nil
}

// stopGrace is how long a local server may take to stop on SIGTERM.
const stopGrace = 10 * time.Second

// MaxKillLag is how far (in entries) a STANDBY may trail the PRIMARY's
// commit index when the bench kills the PRIMARY.
const MaxKillLag = 1024

// waitCaughtUp polls until every STANDBY has applied what the PRIMARY had
// committed when the wait began and then, for up to settle more, until
// one look finds every STANDBY within MaxKillLag entries of the PRIMARY's
// commit index, so that a kill that follows is a single failure rather
// than one during a restarted node's catch-up (raft cannot elect until
// that node answers votes, nor commit before it has the leader's log).
// It returns the largest lag of the last look: on a saturated machine a
// STANDBY can trail by more than MaxKillLag for good, and the caller
// reports that rather than waiting forever.
func waitCaughtUp(ctx context.Context, c *localcluster.Cluster, cl *client.Client, settle time.Duration) (lag uint64, err error) {
	var target uint64
	var settled time.Time // when the first target was reached
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
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
		case <-tick.C:
		}
	}
}
