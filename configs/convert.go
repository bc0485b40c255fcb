package configs

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/ha/autopilot"
	"github.com/xce/xce/ha/kafkaha"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/placement"
	"github.com/xce/xce/tlsconf"
)

// The conversions below are the one place where the file's sections become
// the settings of the packages that use them. Each package owns its
// defaults (Default starts from them) and its rules (Validate converts and
// asks the package, then names each problem by its YAML key).

// RaftConfig returns the Raft backend's settings: the raft section, the
// limits.peer section, node_id, peer_addr and peer_listen_addr, each
// peer's peer_addr, and Join when join lists any address. The caller sets
// CampaignAllowed and Snapshots.
func (c *Config) RaftConfig() raftha.Config {
	r, p := c.Raft, c.Limits.Peer
	rc := raftha.Config{
		NodeID:             c.NodeID,
		PeerAddr:           c.PeerAddr,
		PeerListenAddr:     c.PeerListenAddr,
		Join:               len(c.Join) > 0,
		HeartbeatTimeout:   r.HeartbeatTimeout.Duration,
		ElectionTimeout:    r.ElectionTimeout.Duration,
		LeaderLeaseTimeout: r.LeaderLeaseTimeout.Duration,
		CommitTimeout:      r.CommitTimeout.Duration,
		SnapshotInterval:   r.SnapshotInterval.Duration,
		SnapshotThreshold:  r.SnapshotThreshold,
		SnapshotWrites:     r.SnapshotWrites,
		TrailingLogs:       r.TrailingLogs,
		DetectLeaderExit:   r.DetectLeaderExit,
		MaxRPCSize:         int64(p.MaxMessageBytes),
		RPCTimeout:         p.ReadTimeout.Duration,
		IdleTimeout:        p.IdleTimeout.Duration,
		FirstByteTimeout:   p.FirstByteTimeout.Duration,
		MaxInboundConns:    p.MaxConnections,
	}
	for _, pe := range c.Peers {
		rc.Peers = append(rc.Peers, raftha.Peer{ID: pe.ID, Addr: pe.PeerAddr})
	}
	return rc
}

// AutopilotConfig returns autopilot's settings from the autopilot section.
func (c *Config) AutopilotConfig() autopilot.Config {
	a := c.Autopilot
	return autopilot.Config{
		StabilizationTime:    a.StabilizationTime.Duration,
		MaxLag:               a.MaxLag,
		LastContactThreshold: a.LastContactThreshold.Duration,
		CleanupDeadServers:   a.CleanupDeadServers,
		DeadServerTimeout:    a.DeadServerTimeout.Duration,
	}
}

// autopilotKeys are the YAML keys of autopilot.Config's fields, as its
// Validate names them.
var autopilotKeys = map[string]string{
	"stabilization_time":     "autopilot.stabilization_time",
	"max_lag":                "autopilot.max_lag",
	"last_contact_threshold": "autopilot.last_contact_threshold",
	"dead_server_timeout":    "autopilot.dead_server_timeout",
}

// PeerTLSFiles are the peer_tls section's files (all empty: plaintext).
func (c *Config) PeerTLSFiles() tlsconf.Files {
	return tlsconf.Files{CA: c.PeerTLS.CAFile, Cert: c.PeerTLS.CertFile, Key: c.PeerTLS.KeyFile}
}

// raftKeys are the YAML keys of raftha.Config's fields, as its Validate
// names them.
var raftKeys = map[string]string{
	"heartbeat_timeout":    "raft.heartbeat_timeout",
	"election_timeout":     "raft.election_timeout",
	"leader_lease_timeout": "raft.leader_lease_timeout",
	"commit_timeout":       "raft.commit_timeout",
	"snapshot_interval":    "raft.snapshot_interval",
	"snapshot_threshold":   "raft.snapshot_threshold",
	"snapshot_writes":      "raft.snapshot_writes",
	"trailing_logs":        "raft.trailing_logs",
	"max_rpc_size":         "limits.peer.max_message_bytes",
	"rpc_timeout":          "limits.peer.read_timeout",
	"idle_timeout":         "limits.peer.idle_timeout",
	"first_byte_timeout":   "limits.peer.first_byte_timeout",
	"max_inbound_conns":    "limits.peer.max_connections",
}

// AssignorConfig returns the placement service's settings, the assignor's
// among them, from the assignor section; the loop's own timings keep
// placement's defaults.
func (c *Config) AssignorConfig() placement.Config {
	a := c.Assignor
	pc := placement.DefaultConfig()
	pc.Assign.AcceptableRecoveryLag = a.AcceptableRecoveryLag
	pc.Assign.MaxWarmupReplicas = a.MaxWarmupReplicas
	pc.Assign.NumStandbyReplicas = a.NumStandbyReplicas
	pc.Assign.ProbingRebalanceInterval = a.ProbingRebalanceInterval.Duration
	pc.SessionTimeout = a.SessionTimeout.Duration
	pc.HeartbeatInterval = a.HeartbeatInterval.Duration
	pc.GrantMargin = a.GrantMargin.Duration
	// A held heartbeat must be answered well within the client port's
	// write deadline.
	if wt := c.Limits.Client.WriteTimeout.Duration; wt > 0 {
		pc.MaxHold = min(pc.HeartbeatInterval, placement.MaxHoldLimit, wt/2)
	}
	return pc
}

// assignorKeys are the YAML keys of placement.Config's fields (and of its
// assign.Config's), as their Validate names them.
var assignorKeys = map[string]string{
	"acceptable_recovery_lag":    "assignor.acceptable_recovery_lag",
	"max_warmup_replicas":        "assignor.max_warmup_replicas",
	"num_standby_replicas":       "assignor.num_standby_replicas",
	"probing_rebalance_interval": "assignor.probing_rebalance_interval",
	"session_timeout":            "assignor.session_timeout",
	"heartbeat_interval":         "assignor.heartbeat_interval",
	"grant_margin":               "assignor.grant_margin",
}

// FenceConfig returns the outbox publisher's settings from the kafka
// section; the transactional id names the cluster's primary role,
// <transactional_id_prefix>.<cluster_id>.primary. The caller sets the
// logger.
func (c *Config) FenceConfig() fence.Config {
	fc := fence.DefaultConfig()
	fc.Brokers = c.Kafka.Brokers
	fc.Topic = c.Kafka.Topic
	fc.TransactionalID = c.Kafka.TransactionalIDPrefix + "." + c.ClusterID + ".primary"
	fc.Security = c.KafkaSecurity()
	return fc
}

// fenceKeys are the YAML keys of fence.Config's fields (and of its
// kafkaopts.Security's), as its Validate names them.
var fenceKeys = map[string]string{
	"topic":              "kafka.topic",
	"tls.cert_file":      "kafka.tls.cert_file",
	"sasl.mechanism":     "kafka.sasl.mechanism",
	"sasl.username":      "kafka.sasl.username",
	"sasl.password_file": "kafka.sasl.password_file",
}

// KafkaSecurity returns the TLS and SASL of every Kafka client from
// kafka.tls and kafka.sasl.
func (c *Config) KafkaSecurity() kafkaopts.Security {
	t, a := c.Kafka.TLS, c.Kafka.SASL
	return kafkaopts.Security{
		TLS:  kafkaopts.TLS{Enabled: t.Enabled, Files: tlsconf.Files{CA: t.CAFile, Cert: t.CertFile, Key: t.KeyFile}},
		SASL: kafkaopts.SASL{Mechanism: a.Mechanism, Username: a.Username, PasswordFile: a.PasswordFile},
	}
}

// ClientLimits returns the client port's limits from limits.client; the
// descriptors kept for everything else count limits.peer.max_connections.
func (c *Config) ClientLimits() netio.Limits {
	l, cl := netio.DefaultLimits(), c.Limits.Client
	l.MaxConnections = cl.MaxConnections
	l.HealthReserve = cl.HealthReserve
	l.FDHeadroom = netio.FDHeadroom(c.Limits.Peer.MaxConnections)
	l.ReadHeaderTimeout = cl.ReadHeaderTimeout.Duration
	l.ReadTimeout = cl.ReadTimeout.Duration
	l.WriteTimeout = cl.WriteTimeout.Duration
	l.IdleTimeout = cl.IdleTimeout.Duration
	l.MaxHeaderBytes = cl.MaxHeaderBytes
	return l
}

// clientKeys are the YAML keys of netio.Limits' fields, as its Validate
// names them.
var clientKeys = map[string]string{
	"max_connections":     "limits.client.max_connections",
	"health_reserve":      "limits.client.health_reserve",
	"read_header_timeout": "limits.client.read_header_timeout",
	"read_timeout":        "limits.client.read_timeout",
	"write_timeout":       "limits.client.write_timeout",
	"idle_timeout":        "limits.client.idle_timeout",
	"max_header_bytes":    "limits.client.max_header_bytes",
}

// KafkaLease returns the Kafka backend's lease timing from the ha section.
func (c *Config) KafkaLease() succession.LeaseConfig {
	return succession.LeaseConfig{
		LeaseMillis:   c.HA.Lease.Milliseconds(),
		RenewMillis:   c.HA.Renew.Milliseconds(),
		StaggerMillis: c.HA.Stagger.Milliseconds(),
	}
}

// leaseKeys are the YAML keys of succession.LeaseConfig's fields, as its
// Validate names them.
var leaseKeys = map[string]string{
	"LeaseMillis":   "ha.lease",
	"RenewMillis":   "ha.renew",
	"StaggerMillis": "ha.stagger",
}

// KafkaHAConfig returns the Kafka backend's settings (ha.backend: kafka):
// the brokers, this node as the member of the primary role, the topics and
// transactional id kafkaha.Names derives from transactional_id_prefix and
// cluster_id, the lease, and the raft section's snapshot settings and
// election timeout. The caller sets the logger.
func (c *Config) KafkaHAConfig() kafkaha.Config {
	coord, state, txn := kafkaha.Names(c.Kafka.TransactionalIDPrefix, c.ClusterID)
	return kafkaha.Config{
		Brokers: c.Kafka.Brokers, Security: c.KafkaSecurity(), Member: c.NodeID, Role: "primary",
		CoordTopic: coord, StateTopic: state, TransactionalID: txn,
		Lease:             c.KafkaLease(),
		SnapshotInterval:  c.Raft.SnapshotInterval.Duration,
		SnapshotThreshold: c.Raft.SnapshotThreshold,
		// Half the raft section's election timeout, as for Raft without
		// the exit watch.
		ElectingHint: c.Raft.ElectionTimeout.Duration / 2,
	}
}

// millis is a count of milliseconds as a Duration.
func millis(n int64) Duration { return Duration{time.Duration(n) * time.Millisecond} }

var word = regexp.MustCompile(`[A-Za-z_]+`)

// from adds the problems in err, which a package's Validate words as
// "field: problem" (joined with errors.Join, possibly after a sentinel
// error it wraps), each named by its YAML key: the field, and every other
// field a problem mentions, become their keys in keys.
func (p *problems) from(err error, keys map[string]string) {
	for _, e := range leaves(err) {
		text := e.Error()
		if u := errors.Unwrap(e); u != nil {
			text = strings.TrimPrefix(text, u.Error()+": ")
		}
		field, problem, ok := strings.Cut(text, ": ")
		if !ok {
			p.add("", "%s", text)
			continue
		}
		if k, ok := keys[field]; ok {
			field = k
		}
		problem = word.ReplaceAllStringFunc(problem, func(w string) string {
			if k, ok := keys[w]; ok {
				return k
			}
			return w
		})
		p.add(field, "%s", problem)
	}
}

// leaves flattens errors.Join trees into their leaves, in order.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, leaves(e)...)
	}
	return out
}
