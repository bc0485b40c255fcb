package ha

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

func TestPeerLimits(t *testing.T) {
	base := RaftConfig{HeartbeatTimeout: time.Second, Peers: []Peer{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	maxRPC, idle, conns, err := peerLimits(base)
	if err != nil {
		t.Fatal(err)
	}
	if maxRPC != 2*state.MaxAssignmentBytes || idle != 0 || conns != 0 {
		t.Errorf("defaults: max RPC %d, idle %s, conns %d", maxRPC, idle, conns)
	}
	for name, mutate := range map[string]func(*RaftConfig){
		"max RPC below the largest entry": func(c *RaftConfig) { c.MaxRPCSize = state.MaxAssignmentBytes },
		"idle near the heartbeat":         func(c *RaftConfig) { c.IdleTimeout = 2 * time.Second },
		"too few connections":             func(c *RaftConfig) { c.MaxInboundConns = 10 },
	} {
		c := base
		mutate(&c)
		if _, _, _, err := peerLimits(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := base
	c.MaxRPCSize, c.IdleTimeout, c.MaxInboundConns = -1, 10*time.Second, 64
	if maxRPC, idle, conns, err := peerLimits(c); err != nil || maxRPC != -1 || idle != 10*time.Second || conns != 64 {
		t.Errorf("explicit limits: %d %s %d %v", maxRPC, idle, conns, err)
	}
}

// startOne starts a one-node Raft backend on a fresh data dir.
func startOne(t *testing.T, mutate func(*RaftConfig)) (*Raft, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	store, err := persist.Open(t.TempDir(), persist.Options{NodeID: "n1", ClusterID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := netio.NewStreamLayer(l, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := RaftConfig{NodeID: "n1", Peers: []Peer{{ID: "n1", Addr: addr}}, HeartbeatTimeout: 100 * time.Millisecond,
		ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout: 10 * time.Millisecond, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30, TrailingLogs: 1024}
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := StartRaft(cfg, state.NewFSM("t"), store, stream, hclog.NewNullLogger())
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		store.Close()
	})
	return r, addr
}

// CampaignAllowed reaches raft: while it refuses, a single node does not
// elect itself and its term stays; once it allows, the node leads.
func TestStartRaftCampaignAllowed(t *testing.T) {
	var refuse atomic.Bool
	var asked atomic.Int64
	refuse.Store(true)
	r, _ := startOne(t, func(c *RaftConfig) {
		c.CampaignAllowed = func() error {
			asked.Add(1)
			if refuse.Load() {
				return errors.New("storage failing")
			}
			return nil
		}
	})
	term := r.View().Term
	testutil.Eventually(t, 10*time.Second, "raft asks the gate", func() bool {
		if v := r.View(); v.State != StateFollower || v.Term != term {
			t.Fatalf("view %+v while campaigning was refused (term was %d)", v, term)
		}
		return asked.Load() >= 5
	})
	refuse.Store(false)
	testutil.Eventually(t, 10*time.Second, "a leader once campaigning was allowed", func() bool {
		return r.View().State == StateLeader
	})
}

// The peer-port limits of RaftConfig reach the transport.
func TestStartRaftPeerLimits(t *testing.T) {
	r, _ := startOne(t, func(c *RaftConfig) {
		c.MaxRPCSize = minMaxRPCSize
		c.IdleTimeout = time.Second
	})
	if got := r.trans.MaxRPCSize(); got != minMaxRPCSize {
		t.Errorf("transport max RPC size %d, want %d", got, minMaxRPCSize)
	}
	c, err := net.Dial("tcp", string(r.trans.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a silent connection")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("silent connection closed after %s, idle timeout 1s", took)
	}
	testutil.Eventually(t, 5*time.Second, "the silent connection counted as idle", func() bool {
		return r.trans.TransportStats().Idle == 1
	})
}
