package raftha

import (
	"net"
	"time"

	"github.com/xce/xce/internal/fielderr"
	"github.com/xce/xce/state"
)

// Config is what the Raft backend needs from the node's config: raft's
// timings (the config's raft section) and the bounds of the peer port (its
// limits.peer section).
type Config struct {
	NodeID string
	// Peers are the voters a fresh data dir is bootstrapped with; once
	// raft has state they are ignored (raft's configuration holds the
	// members).
	Peers []Peer
	// PeerAddr is the address the other nodes dial to reach this one
	// (peer_addr): the peer port advertises it.
	PeerAddr string
	// PeerListenAddr, when set, is where the peer port listens instead
	// (peer_listen_addr, behind NAT or a proxy); see PeerListen.
	PeerListenAddr string
	// Join: a fresh data dir is not bootstrapped; the node starts with an
	// empty configuration and waits for a leader to add it (Membership's
	// AddNonvoter). Ignored once the data dir has raft state.
	Join               bool
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotInterval   time.Duration
	SnapshotThreshold  uint64
	// SnapshotWrites, when above zero, also takes a snapshot once this
	// many commands were applied since the last one (a batch entry holds
	// many) and eight times as long as the last one took has passed since
	// it ended, checked every second: it bounds what a restart replays.
	SnapshotWrites uint64
	TrailingLogs   uint64
	// DetectLeaderExit starts an election as soon as the leader's peer port
	// refuses connections (its process has exited) instead of after the
	// heartbeat timeout; see exitWatch.
	DetectLeaderExit bool
	// CampaignAllowed, if set, is asked before this node stands for
	// election (raft's Config.CampaignAllowed). While it returns an error
	// the node starts no election, refuses a leadership transfer to it, and
	// a candidate steps back. Raft calls it on its main goroutine: it must
	// be quick.
	CampaignAllowed func() error
	// Snapshots, if set, receives the cost of each snapshot the node
	// takes.
	Snapshots *SnapshotMetrics

	// Bounds on the peer port (raft's NetworkTransportConfig). Start
	// takes DefaultConfig's value for each one left zero; Validate says
	// what is refused.
	//
	// MaxRPCSize bounds one encoded RPC (InstallSnapshot's data aside). It
	// must hold the largest entry: at least minMaxRPCSize.
	MaxRPCSize int64
	// RPCTimeout bounds reading an RPC once it has begun and writing its
	// answer. The transport gives a peer at least as long as raft gives its
	// own RPCs (see rpcTimeout).
	RPCTimeout time.Duration
	// IdleTimeout closes an inbound peer connection that starts no RPC for
	// this long; in force never less than 10 × HeartbeatTimeout (see
	// idleTimeout).
	IdleTimeout time.Duration
	// FirstByteTimeout closes an inbound peer connection that begins no
	// RPC this long after it was accepted (the exit watch's connection is
	// exempt).
	FirstByteTimeout time.Duration
	// MaxInboundConns caps the inbound peer connections: at least
	// connsPerPeer for each other voter.
	MaxInboundConns int
}

// DefaultConfig returns the defaults of every setting but the node's
// identity (NodeID, Peers) and CampaignAllowed. The config file's raft and
// limits.peer sections default to these.
func DefaultConfig() Config {
	return Config{
		HeartbeatTimeout:   200 * time.Millisecond,
		ElectionTimeout:    200 * time.Millisecond,
		LeaderLeaseTimeout: 150 * time.Millisecond,
		CommitTimeout:      10 * time.Millisecond,
		SnapshotInterval:   30 * time.Second,
		SnapshotThreshold:  65536,
		SnapshotWrites:     8192,
		TrailingLogs:       10240,
		DetectLeaderExit:   true,
		MaxRPCSize:         2 * state.MaxAssignmentBytes,
		RPCTimeout:         10 * time.Second,
		IdleTimeout:        2 * time.Minute,
		FirstByteTimeout:   5 * time.Second,
		MaxInboundConns:    128,
	}
}

// Bounds of Config.
const (
	// minTimeout is the shortest of raft's timings.
	minTimeout = 5 * time.Millisecond
	// minMaxRPCSize fits an AppendEntries that carries one entry of the
	// largest kind, a CmdSetAssignment of state.MaxAssignmentBytes, with
	// room for the message around it. A smaller cap would leave a follower
	// unable ever to take that entry.
	minMaxRPCSize = state.MaxAssignmentBytes + 1<<20
	maxMaxRPCSize = 1 << 30
	// connsPerPeer is how many connections a peer may hold to this node at
	// once: heartbeats, the replication pipeline, its connection pool, a
	// snapshot and the exit watch.
	connsPerPeer    = 8
	maxInboundConns = 1 << 20
	minPeerTimeout  = 100 * time.Millisecond
	maxPeerTimeout  = time.Hour
	minPeerIdle     = time.Minute
	maxPeerIdle     = 24 * time.Hour
)

// Validate reports every invalid setting as a fielderr.List, each named
// by its field. NodeID and Peers are the caller's to check; Peers only
// sets how many connections are needed.
func (c Config) Validate() error {
	var l fielderr.List
	ok := true
	for _, d := range []struct {
		field string
		d     time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout},
		{"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout},
		{"CommitTimeout", c.CommitTimeout},
		{"SnapshotInterval", c.SnapshotInterval},
	} {
		switch {
		case d.d <= 0:
			l.Add(d.field, "must be positive (got %s)", d.d)
			ok = false
		case d.d < minTimeout:
			l.Add(d.field, "must be at least %s (got %s)", minTimeout, d.d)
			ok = false
		}
	}
	if hb := c.HeartbeatTimeout; ok {
		if el := c.ElectionTimeout; el < hb {
			l.Add("ElectionTimeout", "must not be less than {HeartbeatTimeout} (%s < %s)", el, hb)
		}
		if lt := c.LeaderLeaseTimeout; lt > hb {
			l.Add("LeaderLeaseTimeout", "must not exceed {HeartbeatTimeout} (%s > %s)", lt, hb)
		}
		if ct := c.CommitTimeout; ct > hb {
			l.Add("CommitTimeout", "must not exceed {HeartbeatTimeout} (%s > %s)", ct, hb)
		}
	}
	if c.SnapshotThreshold < 1 {
		l.Add("SnapshotThreshold", "must be at least 1")
	}

	if need := connsPerPeer * max(len(c.Peers)-1, 1); c.MaxInboundConns < need {
		l.Add("MaxInboundConns", "must be at least %d, %d for each other voter (got %d)", need, connsPerPeer, c.MaxInboundConns)
	} else if c.MaxInboundConns > maxInboundConns {
		l.Add("MaxInboundConns", "must be between %d and %d (got %d)", need, maxInboundConns, c.MaxInboundConns)
	}
	switch {
	case c.MaxRPCSize < minMaxRPCSize:
		l.Add("MaxRPCSize", "must be at least %d (got %d): a message carrying the largest entry, an assignment of up to %d MiB, must fit",
			minMaxRPCSize, c.MaxRPCSize, state.MaxAssignmentBytes>>20)
	case c.MaxRPCSize > maxMaxRPCSize:
		l.Add("MaxRPCSize", "must be between %d and %d (got %d)", minMaxRPCSize, maxMaxRPCSize, c.MaxRPCSize)
	}
	for _, d := range []struct {
		field  string
		d      time.Duration
		lo, hi time.Duration
	}{
		{"FirstByteTimeout", c.FirstByteTimeout, minPeerTimeout, maxPeerTimeout},
		{"RPCTimeout", c.RPCTimeout, minPeerTimeout, maxPeerTimeout},
		{"IdleTimeout", c.IdleTimeout, minPeerIdle, maxPeerIdle},
	} {
		if d.d < d.lo || d.d > d.hi {
			l.Add(d.field, "must be between %s and %s (got %s)", d.lo, d.hi, d.d)
		}
	}
	return l.Err()
}

// withDefaults returns c with DefaultConfig's peer-port bounds in place
// of those left zero.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxRPCSize == 0 {
		c.MaxRPCSize = d.MaxRPCSize
	}
	if c.RPCTimeout == 0 {
		c.RPCTimeout = d.RPCTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.FirstByteTimeout == 0 {
		c.FirstByteTimeout = d.FirstByteTimeout
	}
	if c.MaxInboundConns == 0 {
		c.MaxInboundConns = d.MaxInboundConns
	}
	return c
}

// PeerListen returns the address the peer port listens on, and the host
// outbound peer connections leave from ("": the system chooses):
// PeerListenAddr and its host when set, so that peers see connections come
// from the address they know this node by; otherwise PeerAddr.
func (c Config) PeerListen() (addr, dialFrom string) {
	if c.PeerListenAddr == "" {
		return c.PeerAddr, ""
	}
	dialFrom, _, _ = net.SplitHostPort(c.PeerListenAddr)
	return c.PeerListenAddr, dialFrom
}

// ElectingHint is how long a client is told to wait before it retries
// while no primary is known: about one election. With the exit watch
// (DetectLeaderExit), the election after a leader's exit starts within the
// watch's pace and then takes milliseconds, so a client that waited half an
// election timeout would come back well after the new primary serves;
// otherwise raft's own timeouts decide, and half the election timeout
// stands.
func (c Config) ElectingHint() time.Duration {
	hint := c.ElectionTimeout / 2
	if c.DetectLeaderExit {
		hint = min(hint, exitPace(c.HeartbeatTimeout))
	}
	return hint
}

// transportTimeout is how long raft's transport gives one RPC to a peer:
// ten heartbeat timeouts, at least a second. It bounds one RPC on a
// stalled peer link; raft's own lease check steps a cut-off leader down
// sooner.
func transportTimeout(heartbeat time.Duration) time.Duration {
	return max(10*heartbeat, time.Second)
}

// rpcTimeout is the time a peer has to send one RPC once its first byte
// arrived: RPCTimeout, or the transport's own timeout when that is longer,
// since raft gives its peers that long to send.
func (c Config) rpcTimeout() time.Duration {
	return max(c.RPCTimeout, transportTimeout(c.HeartbeatTimeout))
}

// idleTimeout is how long a peer connection may carry no RPC: IdleTimeout,
// and at least 10 × HeartbeatTimeout, so that it stays well above the
// heartbeat timings.
func (c Config) idleTimeout() time.Duration {
	return max(c.IdleTimeout, 10*c.HeartbeatTimeout)
}
