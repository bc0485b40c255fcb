package configs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/netio"
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
	c.validateJoin(&p)
	p.from(c.RaftConfig().Validate(), raftBinding.keys())
	p.from(c.AutopilotConfig().Validate(), autopilotBinding.keys())
	if s := c.Raft.LogSegmentSize; s < minSegmentSize || s > maxSegmentSize {
		p.add("raft.log_segment_size", "must be between %d (1 MiB) and %d (1 GiB) bytes (got %d)", minSegmentSize, maxSegmentSize, s)
	}
	k := c.Kafka
	for i, b := range k.Brokers {
		p.addr(fmt.Sprintf("kafka.brokers[%d]", i), b, true)
	}
	p.id("kafka.transactional_id_prefix", k.TransactionalIDPrefix)
	// The publisher's settings are checked with publishing off too, so
	// that turning it on later needs no other change.
	p.from(c.FenceConfig().Validate(), fenceBinding.keys())
	p.from(c.AssignorConfig().Validate(), assignorBinding.keys())
	p.from(c.ClientLimits().Validate(), clientLimitsBinding.keys())
	switch c.HA.Backend {
	case BackendRaft:
	case BackendKafka:
		if len(c.Kafka.Brokers) == 0 {
			p.add("ha.backend", "kafka needs kafka.brokers")
		}
		p.from(c.KafkaLease().Validate(), leaseBinding.keys())
	default:
		p.add("ha.backend", "must be raft or kafka (got %q)", c.HA.Backend)
	}
	c.validateTLS(&p)
	c.validateKafkaSecurity(&p)
	p.oneOf("log.level", c.Log.Level, "trace", "debug", "info", "warn", "error")
	p.oneOf("log.format", c.Log.Format, "json", "console", "auto")
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{p}
}

func (c *Config) validatePeers(p *problems) {
	if len(c.Peers) == 0 {
		if len(c.Join) == 0 {
			p.add("peers", "at least one peer required")
		}
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

// validateJoin checks join: dialable addresses, each once, none this
// node's own, and peers listing at most this node, since a joining node
// learns the members from the cluster it joins (a longer list would
// suggest it bootstraps with them, which it does not).
func (c *Config) validateJoin(p *problems) {
	if len(c.Join) == 0 {
		return
	}
	seen := map[string]int{}
	for i, a := range c.Join {
		at := fmt.Sprintf("join[%d]", i)
		if !p.addr(at, a, true) {
			continue
		}
		if j, dup := seen[a]; dup {
			p.add(at, "duplicate address %q (also join[%d])", a, j)
			continue
		}
		seen[a] = i
		if a == c.ClientAddr {
			p.add(at, "%q is this node's own client_addr; list members of the cluster to join", a)
		}
	}
	if len(c.Peers) > 1 || len(c.Peers) == 1 && c.Peers[0].ID != c.NodeID {
		p.add("peers", "with join, list only this node or nothing: a joining node learns the members from the cluster (got %d peers)", len(c.Peers))
	}
	if c.HA.Backend == BackendKafka {
		p.add("join", "needs ha.backend raft: with kafka, members need no joining")
	}
}

// Bounds of raft.log_segment_size.
const (
	minSegmentSize = 1 << 20
	maxSegmentSize = 1 << 30
)

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

// validateTLS checks the tls, peer_tls and auth sections, and that a port
// reachable beyond this machine has TLS unless insecure says otherwise.
func (c *Config) validateTLS(p *problems) {
	t := c.TLS
	p.oneOf("tls.client_auth", t.ClientAuth, "none", "optional", "required")
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.add("tls", "cert_file and key_file are set together")
	}
	if t.ClientAuth != "none" && t.ClientAuth != "" {
		if t.CertFile == "" {
			p.add("tls.client_auth", "%s needs tls.cert_file and tls.key_file", t.ClientAuth)
		}
		if t.CAFile == "" {
			p.add("tls.ca_file", "required when client_auth is %s", t.ClientAuth)
		}
	}
	pt := c.PeerTLS
	if set := btoi(pt.CAFile != "") + btoi(pt.CertFile != "") + btoi(pt.KeyFile != ""); set != 0 && set != 3 {
		p.add("peer_tls", "ca_file, cert_file and key_file are set together (mutual TLS)")
	}
	p.oneOf("auth.anonymous", c.Auth.Anonymous, "none", "reader")
	if c.Insecure {
		return
	}
	if t.CertFile == "" && c.ClientAddr != "" && !netio.IsLoopback(c.ClientAddr) {
		p.add("client_addr", "%s is reachable beyond this machine and the client port has no TLS: set tls.cert_file and tls.key_file, or insecure: true", c.ClientAddr)
	}
	if c.HA.Backend != BackendKafka && pt.CertFile == "" {
		for _, a := range []string{c.PeerAddr, c.PeerListenAddr} {
			if a != "" && !netio.IsLoopback(a) {
				p.add("peer_addr", "%s is reachable beyond this machine and the peer port has no TLS: set peer_tls, or insecure: true", a)
				break
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// validateKafkaSecurity refuses SASL PLAIN, which sends the password as
// it is, over plaintext connections to brokers beyond this machine unless
// insecure says otherwise. The other rules of kafka.tls and kafka.sasl are
// kafkaopts' (through FenceConfig).
func (c *Config) validateKafkaSecurity(p *problems) {
	sec := c.KafkaSecurity()
	if c.Insecure || sec.SASL.Mechanism != kafkaopts.Plain || sec.TLS.On() {
		return
	}
	for _, b := range c.Kafka.Brokers {
		if !netio.IsLoopback(b) {
			p.add("kafka.sasl.mechanism", "PLAIN sends the password in clear to %s: set kafka.tls, use SCRAM-SHA-256 or SCRAM-SHA-512, or insecure: true", b)
			return
		}
	}
}
