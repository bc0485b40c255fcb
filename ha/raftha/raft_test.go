package raftha

import (
	"cmp"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// startOne starts a one-node Raft backend on a fresh data dir.
func startOne(t *testing.T, mutate func(*Config)) (*Raft, string) {
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
	stream, err := peernet.NewStreamLayer(l, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeID: "n1", Peers: []Peer{{ID: "n1", Addr: addr}}, HeartbeatTimeout: 100 * time.Millisecond,
		ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout: 10 * time.Millisecond, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30, TrailingLogs: 1024}
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := Start(cfg, state.NewFSM("t"), store, stream, hclog.NewNullLogger())
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

// startInDir starts a one-node raft on the data dir dir (addr, or a free
// port where empty) with popts and fsm, and waits until it leads; it
// returns the node, its storage and the address it listens on.
func startInDir(t *testing.T, dir, addr string, popts persist.Options, fsm *state.FSM, mutate func(*Config)) (*Raft, *persist.Store, string) {
	t.Helper()
	l, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	popts.NodeID, popts.ClusterID = "n1", "t"
	store, err := persist.Open(dir, popts)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := peernet.NewStreamLayer(l, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.NodeID, cfg.Peers = "n1", []Peer{{ID: "n1", Addr: addr}}
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	r, err := Start(cfg, fsm, store, stream, hclog.NewNullLogger())
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool { return r.View().State == ha.StateLeader })
	return r, store, addr
}

// CampaignAllowed reaches raft: while it refuses, a single node does not
// elect itself and its term stays; once it allows, the node leads.
func TestStartRaftCampaignAllowed(t *testing.T) {
	var refuse atomic.Bool
	var asked atomic.Int64
	refuse.Store(true)
	r, _ := startOne(t, func(c *Config) {
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
		if v := r.View(); v.State != ha.StateFollower || v.Term != term {
			t.Fatalf("view %+v while campaigning was refused (term was %d)", v, term)
		}
		return asked.Load() >= 5
	})
	refuse.Store(false)
	testutil.Eventually(t, 10*time.Second, "a leader once campaigning was allowed", func() bool {
		return r.View().State == ha.StateLeader
	})
}

// The peer-port limits of Config reach the transport.
func TestStartRaftPeerLimits(t *testing.T) {
	r, _ := startOne(t, func(c *Config) {
		c.MaxRPCSize = minMaxRPCSize
		c.FirstByteTimeout = time.Second
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
		t.Errorf("silent connection closed after %s, first-byte timeout 1s", took)
	}
	testutil.Eventually(t, 5*time.Second, "the transport counts one first-byte timeout", func() bool {
		return r.trans.TransportStats().FirstByte == 1
	})
}

// Validate names each setting out of range, and the defaults pass.
func TestRaftConfigValidate(t *testing.T) {
	three := []Peer{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string // "" for valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"heartbeat zero", func(c *Config) { c.HeartbeatTimeout = 0 }, "heartbeat_timeout: must be positive (got 0s)"},
		{"commit below 5ms", func(c *Config) { c.CommitTimeout = ms(1) }, "commit_timeout: must be at least 5ms (got 1ms)"},
		{"election below heartbeat", func(c *Config) { c.HeartbeatTimeout = ms(300) }, "election_timeout: must not be less than heartbeat_timeout (200ms < 300ms)"},
		{"lease above heartbeat", func(c *Config) { c.HeartbeatTimeout = ms(100) }, "leader_lease_timeout: must not exceed heartbeat_timeout (150ms > 100ms)"},
		{"snapshot_threshold zero", func(c *Config) { c.SnapshotThreshold = 0 }, "snapshot_threshold: must be at least 1"},
		{"too few connections", func(c *Config) { c.MaxInboundConns = 15 }, "max_inbound_conns: must be at least 16, 8 for each other voter (got 15)"},
		{"one voter needs 8", func(c *Config) { c.Peers = three[:1]; c.MaxInboundConns = 7 }, "max_inbound_conns: must be at least 8"},
		{"one voter, 8 connections", func(c *Config) { c.Peers = three[:1]; c.MaxInboundConns = 8 }, ""},
		{"max RPC below the largest entry", func(c *Config) { c.MaxRPCSize = state.MaxAssignmentBytes }, "max_rpc_size: must be at least 17825792 (got 16777216)"},
		{"max RPC at the floor", func(c *Config) { c.MaxRPCSize = minMaxRPCSize }, ""},
		{"max RPC too big", func(c *Config) { c.MaxRPCSize = 2 << 30 }, "max_rpc_size: must be between 17825792 and 1073741824"},
		{"first byte zero", func(c *Config) { c.FirstByteTimeout = 0 }, "first_byte_timeout: must be between 100ms and 1h0m0s (got 0s)"},
		{"rpc timeout short", func(c *Config) { c.RPCTimeout = ms(50) }, "rpc_timeout: must be between 100ms and 1h0m0s (got 50ms)"},
		{"idle below a minute", func(c *Config) { c.IdleTimeout = 30 * time.Second }, "idle_timeout: must be between 1m0s and 24h0m0s (got 30s)"},
	} {
		c := DefaultConfig()
		c.Peers = three
		tc.edit(&c)
		testutil.CheckErr(t, tc.name, c.Validate(), tc.want)
	}
}

// A bound left zero takes the default, which raft's transport would also
// take, so that a caller that sets none gets raft's own limits.
func TestRaftConfigZeroBoundsTakeTheDefaults(t *testing.T) {
	c := Config{HeartbeatTimeout: time.Second}.withDefaults()
	d := DefaultConfig()
	if c.MaxRPCSize != d.MaxRPCSize || c.RPCTimeout != d.RPCTimeout || c.IdleTimeout != d.IdleTimeout ||
		c.FirstByteTimeout != d.FirstByteTimeout || c.MaxInboundConns != d.MaxInboundConns {
		t.Fatalf("withDefaults %+v, want the bounds of %+v", c, d)
	}
	if d.MaxRPCSize != raft.DefaultMaxRPCSize || d.RPCTimeout != raft.DefaultRPCTimeout || d.IdleTimeout != raft.DefaultIdleTimeout ||
		d.FirstByteTimeout != raft.DefaultFirstByteTimeout || d.MaxInboundConns != raft.DefaultMaxInboundConns {
		t.Fatalf("defaults %+v differ from raft's transport defaults", d)
	}
}

// The peer timeouts in force are never shorter than raft's timings ask.
func TestPeerTimeoutsFollowRaft(t *testing.T) {
	for _, tc := range []struct {
		heartbeat, read, idle time.Duration
		wantRead, wantIdle    time.Duration
	}{
		{200 * time.Millisecond, 10 * time.Second, 2 * time.Minute, 10 * time.Second, 2 * time.Minute},
		{200 * time.Millisecond, 500 * time.Millisecond, time.Minute, 2 * time.Second, time.Minute},
		{50 * time.Millisecond, 500 * time.Millisecond, time.Minute, time.Second, time.Minute},
		{3 * time.Second, 10 * time.Second, 2 * time.Minute, 30 * time.Second, 2 * time.Minute},
		{30 * time.Second, 10 * time.Second, 2 * time.Minute, 5 * time.Minute, 5 * time.Minute},
	} {
		c := DefaultConfig()
		c.HeartbeatTimeout, c.RPCTimeout, c.IdleTimeout = tc.heartbeat, tc.read, tc.idle
		if r, i := c.rpcTimeout(), c.idleTimeout(); r != tc.wantRead || i != tc.wantIdle {
			t.Errorf("heartbeat %v, read %v, idle %v: in force read %v idle %v, want %v and %v",
				tc.heartbeat, tc.read, tc.idle, r, i, tc.wantRead, tc.wantIdle)
		}
	}
}

// A follower must be able to take a message carrying the largest entry
// the node writes.
func TestMaxRPCFloorFitsTheLargestEntry(t *testing.T) {
	if minMaxRPCSize <= state.MaxAssignmentBytes || minMaxRPCSize <= state.MaxBatchBytes {
		t.Fatalf("minMaxRPCSize %d does not exceed state.MaxAssignmentBytes %d and state.MaxBatchBytes %d",
			minMaxRPCSize, state.MaxAssignmentBytes, state.MaxBatchBytes)
	}
	if d := DefaultConfig().MaxRPCSize; d < minMaxRPCSize {
		t.Fatalf("default max RPC size %d is below the floor %d", d, minMaxRPCSize)
	}
}

// While no primary is known, clients are told to come back after about
// one election: with the exit watch, its pace.
func TestElectingHint(t *testing.T) {
	cfg := func(detect bool, hb, election time.Duration) Config {
		c := DefaultConfig()
		c.DetectLeaderExit, c.HeartbeatTimeout, c.ElectionTimeout = detect, hb, election
		return c
	}
	tests := []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"exit watch: a quarter of the heartbeat timeout", cfg(true, 200*time.Millisecond, 200*time.Millisecond), 50 * time.Millisecond},
		{"exit watch, short election timeout", cfg(true, 1000*time.Millisecond, 200*time.Millisecond), 100 * time.Millisecond},
		{"raft's timeouts: half an election", cfg(false, 200*time.Millisecond, 200*time.Millisecond), 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.ElectingHint(); got != tt.want {
				t.Errorf("ElectingHint = %v, want %v", got, tt.want)
			}
		})
	}
}

// The peer port listens on peer_listen_addr when set, and its outbound
// connections then leave from that host.
func TestPeerListen(t *testing.T) {
	for _, tc := range []struct {
		peer, listen       string
		wantAddr, wantFrom string
	}{
		{"10.0.0.1:7201", "", "10.0.0.1:7201", ""},
		{"203.0.113.5:7201", "10.0.0.1:7301", "10.0.0.1:7301", "10.0.0.1"},
		{"203.0.113.5:7201", "0.0.0.0:7201", "0.0.0.0:7201", "0.0.0.0"},
	} {
		c := Config{PeerAddr: tc.peer, PeerListenAddr: tc.listen}
		if addr, from := c.PeerListen(); addr != tc.wantAddr || from != tc.wantFrom {
			t.Errorf("peer_addr %s, peer_listen_addr %q: listen on %s from %q, want %s from %q", tc.peer, tc.listen, addr, from, tc.wantAddr, tc.wantFrom)
		}
	}
}
