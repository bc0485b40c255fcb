package controller

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/testutil"
)

// raftNode is one in-process node of a real Raft cluster, serving the API.
type raftNode struct {
	n    *Node
	stop context.CancelFunc
	done chan error
}

func startRaftNode(t *testing.T, cfg *configs.Config) *raftNode {
	t.Helper()
	reg := prometheus.NewRegistry()
	n, err := New(withRaft(t, Options{Config: cfg, Logger: zerolog.New(zerolog.NewTestWriter(t)).With().Str("node", cfg.NodeID).Logger(), Registry: reg}))
	if err != nil {
		t.Fatal(err)
	}
	_, api := dispatch.New(n, reg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	rn := &raftNode{n: n, stop: cancel, done: make(chan error, 1)}
	go func() { rn.done <- n.Run(ctx, api) }()
	t.Cleanup(func() {
		cancel()
		if err := <-rn.done; err != nil {
			t.Errorf("%s: %v", cfg.NodeID, err)
		}
	})
	return rn
}

// raftConfigs are the configs of nodes n1..n<count> on free loopback
// ports; each lists peers n1..n<voters> (and itself).
func raftConfigs(t *testing.T, count, voters int) []*configs.Config {
	t.Helper()
	dir := t.TempDir()
	var peers []configs.Peer
	for i := 1; i <= count; i++ {
		peers = append(peers, configs.Peer{ID: fmt.Sprintf("n%d", i), PeerAddr: freeAddr(t), ClientAddr: freeAddr(t)})
	}
	var out []*configs.Config
	for i, p := range peers {
		cfg := configs.Default()
		cfg.NodeID, cfg.ClusterID, cfg.DataDir = p.ID, "t", filepath.Join(dir, p.ID)
		cfg.ClientAddr, cfg.PeerAddr = p.ClientAddr, p.PeerAddr
		cfg.Peers = append([]configs.Peer(nil), peers[:voters]...)
		if i >= voters {
			// A joining node learns the members from the cluster.
			cfg.Peers = []configs.Peer{p}
		}
		cfg.Autopilot.StabilizationTime = configs.Duration{Duration: 500 * time.Millisecond}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		out = append(out, &cfg)
	}
	return out
}

func primaryOf(nodes []*raftNode) *Node {
	for _, rn := range nodes {
		if rn.n.View().Serving() {
			return rn.n
		}
	}
	return nil
}

// TestJoinAndPromote runs three real Raft nodes in process and starts a
// fourth with join addresses on an empty data dir: it asks to be added,
// follows as a STANDBY non-voter, and the autopilot promotes it once it
// has stayed healthy for the (short) stabilization time.
func TestJoinAndPromote(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four raft nodes")
	}
	cfgs := raftConfigs(t, 4, 3)
	var nodes []*raftNode
	for _, cfg := range cfgs[:3] {
		nodes = append(nodes, startRaftNode(t, cfg))
	}
	var p *Node
	testutil.Eventually(t, 10*time.Second, "a PRIMARY", func() bool { p = primaryOf(nodes); return p != nil })
	m, err := p.Membership()
	if err != nil {
		t.Fatalf("the raft backend offers no membership: %v", err)
	}

	var joins []string
	for _, c := range cfgs[:3] {
		joins = append(joins, c.ClientAddr)
	}
	cfgs[3].Join = joins
	n4 := startRaftNode(t, cfgs[3])

	voter := func(id string) (in, isVoter bool) {
		members, _, _, err := m.Members()
		if err != nil {
			return false, false
		}
		for _, mb := range members {
			if mb.ID == id {
				return true, mb.Voter
			}
		}
		return false, false
	}
	testutil.Eventually(t, 20*time.Second, "n4 added", func() bool { in, _ := voter("n4"); return in })
	testutil.Eventually(t, 20*time.Second, "n4 promoted by the autopilot", func() bool { _, v := voter("n4"); return v })
	testutil.Eventually(t, 10*time.Second, "n4 STANDBY", func() bool {
		v := n4.n.View()
		return v.Role == ha.RoleStandby && v.LeaderID == p.cfg.NodeID
	})
	if got := p.ClientAddrs()["n4"]; got != cfgs[3].ClientAddr {
		t.Fatalf("n4's client address as the primary knows it: %q, want %q", got, cfgs[3].ClientAddr)
	}
}
