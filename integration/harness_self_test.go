package integration

import (
	"testing"
	"time"

	"github.com/xce/xce/configs"
)

// The configs the harness writes pass the product's own strict validation,
// with and without a raft section.
func TestHarnessConfigs(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithRaft(time.Second, time.Second, 500*time.Millisecond), WithLogLevel("info")}} {
		c := newCluster(t, 3, opts...)
		for i := range c.N() {
			cfg, err := configs.Parse([]byte(c.ConfigSpec(i).YAML()))
			if err != nil {
				t.Fatalf("config of %s: %v\n%s", c.Node(i).ID, err, c.ConfigSpec(i).YAML())
			}
			n := c.Node(i)
			if cfg.NodeID != n.ID || cfg.ClusterID != "it" || cfg.DataDir != n.DataDir || cfg.ClientAddr != n.ClientAddr ||
				cfg.PeerAddr != n.PeerAddr || len(cfg.Peers) != 3 || cfg.Log.Format != "json" {
				t.Errorf("config of %s parsed as %+v", n.ID, cfg)
			}
			if r := c.opts.raft; r != nil {
				if cfg.Raft.HeartbeatTimeout.D() != r.HeartbeatTimeout || cfg.Raft.ElectionTimeout.D() != r.ElectionTimeout ||
					cfg.Raft.LeaderLeaseTimeout.D() != r.LeaderLeaseTimeout || cfg.Log.Level != "info" {
					t.Errorf("raft/log settings of %s: %+v %+v", n.ID, cfg.Raft, cfg.Log)
				}
			} else if cfg.Raft != configs.Default().Raft || cfg.Log.Level != "debug" {
				t.Errorf("default raft/log settings of %s: %+v %+v", n.ID, cfg.Raft, cfg.Log)
			}
		}
	}
	if got, err := sumMetric("# HELP x_total y\nx_total{reason=\"a\"} 2\nx_total{reason=\"b\"} 3.5\nx_total_other 7\nx_total 1\n", "x_total"); err != nil || got != 6.5 {
		t.Errorf("sumMetric = %v, %v; want 6.5", got, err)
	}
}
