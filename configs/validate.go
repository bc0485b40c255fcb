package configs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ValidID reports whether s is a valid id: 1-64 characters of [A-Za-z0-9._-].
func ValidID(s string) bool { return len(s) >= 1 && len(s) <= 64 && validChars(s) }

func validChars(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

const idRule = "must be 1-64 characters of [A-Za-z0-9._-]"

// Validate checks the whole config and returns a *ValidationError listing
// every problem, or nil.
func (c *Config) Validate() error {
	var p problems
	p.id("node_id", c.NodeID)
	p.id("cluster_id", c.ClusterID)
	if strings.TrimSpace(c.DataDir) == "" {
		p.add("data_dir", "required")
	}
	p.addr("client_addr", c.ClientAddr, false)
	p.addr("peer_addr", c.PeerAddr, true)
	if c.PeerListenAddr != "" {
		p.addr("peer_listen_addr", c.PeerListenAddr, false)
	}
	if c.ClientAddr != "" && c.ClientAddr == c.PeerAddr {
		p.add("client_addr", "must differ from peer_addr (both are %q)", c.PeerAddr)
	}
	c.validatePeers(&p)
	c.Raft.validate(&p)
	k := c.Kafka
	for i, b := range k.Brokers {
		p.addr(fmt.Sprintf("kafka.brokers[%d]", i), b, true)
	}
	switch {
	case k.Topic == "":
		p.add("kafka.topic", "required")
	case len(k.Topic) > 249 || !validChars(k.Topic):
		p.add("kafka.topic", "must be 1-249 characters of [A-Za-z0-9._-]")
	case k.Topic == "." || k.Topic == "..":
		p.add("kafka.topic", `must not be "." or ".."`)
	}
	p.id("kafka.transactional_id_prefix", k.TransactionalIDPrefix)
	c.Assignor.validate(&p)
	c.Limits.validate(&p, len(c.Peers))
	switch c.HA.Backend {
	case BackendRaft:
	case BackendKafka:
		if len(c.Kafka.Brokers) == 0 {
			p.add("ha.backend", "kafka needs kafka.brokers")
		}
		l, r, st := c.HA.Lease.Duration, c.HA.Renew.Duration, c.HA.Stagger.Duration
		switch {
		case l < 100*time.Millisecond:
			p.add("ha.lease", "must be at least 100ms (got %s)", l)
		case r <= 0 || r >= l:
			p.add("ha.renew", "must be positive and less than ha.lease (got %s, lease %s)", r, l)
		}
		if st < 0 {
			p.add("ha.stagger", "must not be negative (got %s)", st)
		}
	default:
		p.add("ha.backend", "must be raft or kafka (got %q)", c.HA.Backend)
	}
	p.oneOf("log.level", c.Log.Level, "trace", "debug", "info", "warn", "error")
	p.oneOf("log.format", c.Log.Format, "json", "console", "auto")
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{p}
}

func (c *Config) validatePeers(p *problems) {
	if len(c.Peers) == 0 {
		p.add("peers", "at least one peer required")
		return
	}
	ids := map[string]int{}
	addrs := map[string]string{} // address -> field that has it
	self := -1
	for i, pe := range c.Peers {
		at := fmt.Sprintf("peers[%d]", i)
		if p.id(at+".id", pe.ID) {
			if j, dup := ids[pe.ID]; dup {
				p.add(at+".id", "duplicate id %q (also peers[%d])", pe.ID, j)
			} else {
				ids[pe.ID] = i
			}
		}
		if pe.ID == c.NodeID && self < 0 {
			self = i
		}
		for _, a := range []struct {
			field, value string
			dialed       bool
		}{{"peer_addr", pe.PeerAddr, true}, {"client_addr", pe.ClientAddr, false}} {
			if !p.addr(at+"."+a.field, a.value, a.dialed) {
				continue
			}
			if other, dup := addrs[a.value]; dup {
				p.add(at+"."+a.field, "duplicate address %q (also %s)", a.value, other)
			} else {
				addrs[a.value] = at + "." + a.field
			}
		}
	}
	if c.NodeID == "" {
		return
	}
	if self < 0 {
		p.add("peers", "node_id %q is not in the list", c.NodeID)
		return
	}
	s := c.Peers[self]
	if s.PeerAddr != c.PeerAddr {
		p.add(fmt.Sprintf("peers[%d].peer_addr", self), "this node's entry has %q but top-level peer_addr is %q; they must be equal", s.PeerAddr, c.PeerAddr)
	}
	if s.ClientAddr != c.ClientAddr {
		p.add(fmt.Sprintf("peers[%d].client_addr", self), "this node's entry has %q but top-level client_addr is %q; they must be equal", s.ClientAddr, c.ClientAddr)
	}
}

const minTimeout = 5 * time.Millisecond

func (r Raft) validate(p *problems) {
	ok := true
	for _, d := range []struct {
		field string
		d     time.Duration
	}{
		{"heartbeat_timeout", r.HeartbeatTimeout.Duration},
		{"election_timeout", r.ElectionTimeout.Duration},
		{"leader_lease_timeout", r.LeaderLeaseTimeout.Duration},
		{"commit_timeout", r.CommitTimeout.Duration},
		{"snapshot_interval", r.SnapshotInterval.Duration},
	} {
		switch {
		case d.d <= 0:
			p.add("raft."+d.field, "must be positive (got %s)", d.d)
			ok = false
		case d.d < minTimeout:
			p.add("raft."+d.field, "must be at least %s (got %s)", minTimeout, d.d)
			ok = false
		}
	}
	if hb := r.HeartbeatTimeout.Duration; ok {
		if el := r.ElectionTimeout.Duration; el < hb {
			p.add("raft.election_timeout", "must not be less than raft.heartbeat_timeout (%s < %s)", el, hb)
		}
		if l := r.LeaderLeaseTimeout.Duration; l > hb {
			p.add("raft.leader_lease_timeout", "must not exceed raft.heartbeat_timeout (%s > %s)", l, hb)
		}
		if c := r.CommitTimeout.Duration; c > hb {
			p.add("raft.commit_timeout", "must not exceed raft.heartbeat_timeout (%s > %s)", c, hb)
		}
	}
	if r.SnapshotThreshold < 1 {
		p.add("raft.snapshot_threshold", "must be at least 1")
	}
	if r.LogSegmentSize < 1<<20 || r.LogSegmentSize > 1<<30 {
		p.add("raft.log_segment_size", "must be between %d (1 MiB) and %d (1 GiB) bytes (got %d)", 1<<20, 1<<30, r.LogSegmentSize)
	}
}

func (a Assignor) validate(p *problems) {
	if a.AcceptableRecoveryLag < 0 {
		p.add("assignor.acceptable_recovery_lag", "must not be negative (got %d)", a.AcceptableRecoveryLag)
	}
	if a.MaxWarmupReplicas < 1 {
		p.add("assignor.max_warmup_replicas", "must be at least 1 (got %d)", a.MaxWarmupReplicas)
	}
	if a.NumStandbyReplicas < 0 || a.NumStandbyReplicas > 16 {
		p.add("assignor.num_standby_replicas", "must be between 0 and 16 (got %d)", a.NumStandbyReplicas)
	}
	if d := a.ProbingRebalanceInterval.Duration; d < time.Minute {
		p.add("assignor.probing_rebalance_interval", "must be at least 1m (got %s)", d)
	}
	st, hb := a.SessionTimeout.Duration, a.HeartbeatInterval.Duration
	switch {
	case st < 500*time.Millisecond || st > time.Hour:
		p.add("assignor.session_timeout", "must be between 500ms and 1h (got %s)", st)
	case hb < 50*time.Millisecond:
		p.add("assignor.heartbeat_interval", "must be at least 50ms (got %s)", hb)
	case hb*2 > st:
		p.add("assignor.heartbeat_interval", "must be at most half of assignor.session_timeout (%s > %s/2)", hb, st)
	}
}

// Bounds of the limits section.
const (
	// peerConnsPerVoter is how many connections one other voter may hold
	// to this node at once: raft's pool of RPC connections, its heartbeat
	// and pipeline connections, a snapshot, and a leader-exit probe.
	peerConnsPerVoter = 8
	// minPeerMessageBytes fits an AppendEntries that carries one entry of
	// the largest kind, a CmdSetAssignment of state.MaxAssignmentBytes
	// (16 MiB), with room for the message around it. A smaller cap would
	// leave a follower unable ever to take that entry.
	minPeerMessageBytes = 17 << 20
	maxPeerMessageBytes = 1 << 30
	maxConnections      = 1 << 20
	maxHealthReserve    = 1024
	minHeaderBytes      = 4 << 10
	maxHeaderBytes      = 16 << 20
	minLimitTimeout     = 100 * time.Millisecond
	maxLimitTimeout     = time.Hour
	minClientIdle       = time.Second
	maxIdle             = 24 * time.Hour
	minPeerIdle         = time.Minute
)

// peerRPCTimeout is how long raft's transport gives one RPC to a peer
// (ha.StartRaft): ten heartbeat timeouts, at least a second.
func peerRPCTimeout(heartbeat time.Duration) time.Duration {
	return max(10*heartbeat, time.Second)
}

func (l Limits) validate(p *problems, voters int) {
	c := l.Client
	p.intRange("limits.client.max_connections", c.MaxConnections, 1, maxConnections)
	p.intRange("limits.client.health_reserve", c.HealthReserve, 0, maxHealthReserve)
	p.durRange("limits.client.read_header_timeout", c.ReadHeaderTimeout.Duration, minLimitTimeout, maxLimitTimeout)
	p.durRange("limits.client.read_timeout", c.ReadTimeout.Duration, minLimitTimeout, maxLimitTimeout)
	p.durRange("limits.client.write_timeout", c.WriteTimeout.Duration, minLimitTimeout, maxLimitTimeout)
	p.durRange("limits.client.idle_timeout", c.IdleTimeout.Duration, minClientIdle, maxIdle)
	p.intRange("limits.client.max_header_bytes", c.MaxHeaderBytes, minHeaderBytes, maxHeaderBytes)

	pe := l.Peer
	if need := peerConnsPerVoter * max(voters-1, 1); pe.MaxConnections < need {
		p.add("limits.peer.max_connections", "must be at least %d, %d for each other voter (got %d)", need, peerConnsPerVoter, pe.MaxConnections)
	} else {
		p.intRange("limits.peer.max_connections", pe.MaxConnections, need, maxConnections)
	}
	if pe.MaxMessageBytes < minPeerMessageBytes {
		p.add("limits.peer.max_message_bytes", "must be at least %d (got %d): a message carrying the largest entry, an assignment of up to 16 MiB, must fit",
			minPeerMessageBytes, pe.MaxMessageBytes)
	} else {
		p.intRange("limits.peer.max_message_bytes", pe.MaxMessageBytes, minPeerMessageBytes, maxPeerMessageBytes)
	}
	p.durRange("limits.peer.first_byte_timeout", pe.FirstByteTimeout.Duration, minLimitTimeout, maxLimitTimeout)
	p.durRange("limits.peer.read_timeout", pe.ReadTimeout.Duration, minLimitTimeout, maxLimitTimeout)
	p.durRange("limits.peer.idle_timeout", pe.IdleTimeout.Duration, minPeerIdle, maxIdle)
}

// PeerReadTimeout is the time a peer has to send one message once its
// first byte arrived: limits.peer.read_timeout, or raft's own RPC timeout
// when that is longer, since raft gives its peers that long to send.
func (c *Config) PeerReadTimeout() time.Duration {
	return max(c.Limits.Peer.ReadTimeout.Duration, peerRPCTimeout(c.Raft.HeartbeatTimeout.Duration))
}

// PeerIdleTimeout is how long a peer connection may carry no message:
// limits.peer.idle_timeout, and at least 10 × raft.heartbeat_timeout, so
// that it stays well above the heartbeat timings.
func (c *Config) PeerIdleTimeout() time.Duration {
	return max(c.Limits.Peer.IdleTimeout.Duration, 10*c.Raft.HeartbeatTimeout.Duration)
}

// problems collects "path: problem" messages.
type problems []string

func (p *problems) add(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	*p = append(*p, msg)
}

// id checks a required id field and reports whether it is valid.
func (p *problems) id(path, s string) bool {
	switch {
	case s == "":
		p.add(path, "required")
	case !ValidID(s):
		p.add(path, idRule)
	default:
		return true
	}
	return false
}

func (p *problems) intRange(path string, v, lo, hi int) {
	if v < lo || v > hi {
		p.add(path, "must be between %d and %d (got %d)", lo, hi, v)
	}
}

func (p *problems) durRange(path string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		p.add(path, "must be between %s and %s (got %s)", lo, hi, d)
	}
}

func (p *problems) oneOf(path, s string, allowed ...string) {
	for _, a := range allowed {
		if s == a {
			return
		}
	}
	p.add(path, "must be one of %s (got %q)", strings.Join(allowed, ", "), s)
}

// addr checks a host:port and reports whether it is valid. A dialed address
// (one that other processes connect to) needs a concrete host.
func (p *problems) addr(path, s string, dialed bool) bool {
	if msg := addrProblem(s, dialed); msg != "" {
		p.add(path, "%s", msg)
		return false
	}
	return true
}

func addrProblem(s string, dialed bool) string {
	if s == "" {
		return "required"
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		switch {
		case errors.As(err, &ae) && strings.HasPrefix(ae.Err, "missing port"):
			return "missing port"
		case errors.As(err, &ae) && strings.HasPrefix(ae.Err, "too many colons"):
			return fmt.Sprintf("invalid address %q (write IPv6 hosts in brackets, e.g. \"[::1]:7201\")", s)
		}
		return fmt.Sprintf("invalid address %q", s)
	}
	if port == "" {
		return "missing port"
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strings.TrimLeft(port, "0123456789") != "" {
		return fmt.Sprintf("invalid port %q", port)
	}
	if host == "" {
		if dialed {
			return "empty host"
		}
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if dialed && ip.IsUnspecified() {
			return fmt.Sprintf("host %q is unspecified and cannot be dialed; use a concrete address", host)
		}
		return ""
	}
	if len(host) > 253 || !validChars(host) {
		return fmt.Sprintf("invalid host %q", host)
	}
	return ""
}
