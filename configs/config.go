// Package configs loads and validates the per-node YAML configuration of
// xce. Each node of the Raft cluster has one file; see n1.yaml, n2.yaml,
// n3.yaml and single.yaml in this directory for examples.
//
// Decoding is strict: unknown keys, duplicate keys and values of the wrong
// shape are errors that name the key path and line. A key that is absent or
// explicitly null (`key:` or `key: ~`) keeps its default. Relative paths such
// as data_dir are relative to the process's working directory, not to the
// config file.
package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xce/xce/persist/raftlog"
)

// Config is one node's configuration: one YAML file per node, each key
// listed with its type, default and meaning in docs/reference/config.md,
// which `make docs` generates from these comments and Default.
type Config struct {
	// NodeID names this node: 1-64 characters of [A-Za-z0-9._-], and one
	// of peers[].id unless the node joins. Required. It is written into
	// the data dir, which then refuses any other node.
	NodeID string `yaml:"node_id"`
	// ClusterID names the cluster: 1-64 characters of [A-Za-z0-9._-]. It
	// is written into the data dir (which then refuses any other cluster),
	// certificates name it, and the Kafka names derive from it.
	ClusterID string `yaml:"cluster_id"`
	// DataDir holds the node's durable state: the Raft log, the stable
	// store, snapshots and a lock file. Required; a relative path is
	// relative to the process's working directory.
	DataDir string `yaml:"data_dir"`
	// ClientAddr is where the node serves the API, /healthz, /readyz and
	// /metrics: host:port, the host empty or unspecified for every
	// interface. Required, and different from peer_addr. Beyond loopback
	// it needs tls or insecure.
	ClientAddr string `yaml:"client_addr"`
	// PeerAddr is where the other nodes reach this node's Raft port:
	// host:port with a concrete host, since it is advertised to them.
	// Required; unused with ha.backend kafka. Beyond loopback it needs
	// peer_tls or insecure.
	PeerAddr string `yaml:"peer_addr"`
	// PeerListenAddr, when set, is where the Raft listener binds instead
	// of peer_addr (behind NAT or a proxy, peers dial peer_addr);
	// outbound peer connections then leave from its host, so peers see a
	// stable source address. host:port.
	PeerListenAddr string `yaml:"peer_listen_addr"`
	// Peers are the voters a new cluster starts with, this node included:
	// they bootstrap its first configuration. Once the data dir holds
	// Raft state the cluster's own configuration says who the members are
	// (members are added and removed through the API) and a change here
	// has no effect on it. At least one, unless the node joins; with join,
	// list only this node or nothing. With ha.backend kafka, every member,
	// for their client_addr.
	Peers []Peer `yaml:"peers"`
	// Join lists client addresses (host:port with a concrete host, each
	// once, not this node's own) of members of an existing cluster. A node
	// with join and an empty data dir does not bootstrap: it asks those
	// members to add it, starts as a non-voter and becomes a voter once
	// autopilot promotes it. Ignored once the data dir holds Raft state.
	// Raft backend only.
	Join []string `yaml:"join"`
	// Autopilot decides, on the leader, when a non-voter becomes a voter
	// and when a dead voter is replaced (docs/design.md, "Membership"). A
	// server is healthy when the leader heard from it within
	// last_contact_threshold and it is at most max_lag entries behind.
	// Keep the section equal on every node, since any voter may lead.
	Autopilot Autopilot `yaml:"autopilot"`
	// HA selects the election backend. With backend kafka, Kafka
	// coordinates the role (a lease in a coordination topic, fenced by
	// the producer epoch) and holds the replicated log; peers then only
	// give each member's client_addr (for leader hints), peer_addr is
	// unused, and of the raft section snapshot_interval and
	// snapshot_threshold time the snapshots while the election and
	// replication settings are unused.
	HA HA `yaml:"ha"`
	// Raft tunes the Raft backend's elections, log and snapshots.
	Raft Raft `yaml:"raft"`
	// Kafka is where committed changes are published, and with
	// ha.backend kafka what coordinates the role.
	Kafka Kafka `yaml:"kafka"`
	// Assignor holds the task placement settings (docs/design.md, "The
	// assignor") and the worker session timings. Only the primary plans,
	// but every node should carry the same values so that a failover
	// keeps the policy.
	Assignor Assignor `yaml:"assignor"`
	// Limits bound what clients and peers can make a node hold: sockets,
	// memory and time. Each refusal is counted and logged.
	Limits Limits `yaml:"limits"`
	// Log configures the node's logger.
	Log Log `yaml:"log"`
	// TLS secures the client port (API, /healthz, /readyz, /metrics) with
	// TLS 1.3, HTTP/2 and HTTP/1.1 chosen by ALPN. With no cert_file the
	// port is plaintext.
	TLS ClientTLS `yaml:"tls"`
	// PeerTLS secures the peer port with mutual TLS 1.3: every peer
	// presents a certificate signed by ca_file that names its node of this
	// cluster. All three files, or none (plaintext).
	PeerTLS PeerTLS `yaml:"peer_tls"`
	// Auth decides who may call what on the client port. Permissions apply
	// once the node can tell callers apart: a tokens file, or client
	// certificates (tls.client_auth optional or required).
	Auth Auth `yaml:"auth"`
	// Insecure lets a node start without TLS on a client or peer port
	// reachable beyond this machine (it then logs an INSECURE warning), and
	// send a SASL PLAIN password in clear to a broker beyond it; xce status
	// shows it. When false such a node refuses to start.
	Insecure bool `yaml:"insecure"`
}

// ClientTLS is the client port's TLS.
type ClientTLS struct {
	// CAFile is the CA (PEM) that signs client certificates. Required
	// when client_auth is optional or required.
	CAFile string `yaml:"ca_file"`
	// CertFile is the node's certificate (PEM); set together with
	// key_file. Renewed files are picked up without a restart.
	CertFile string `yaml:"cert_file"`
	// KeyFile is cert_file's key (PEM).
	KeyFile string `yaml:"key_file"`
	// ClientAuth says whether callers present certificates: none (none
	// asked for), optional (verified when sent) or required (for every
	// call but /healthz, /readyz and the gRPC health check). optional and
	// required need cert_file and ca_file.
	ClientAuth string `yaml:"client_auth"`
}

// PeerTLS is the peer port's mutual TLS.
type PeerTLS struct {
	// CAFile is the cluster's CA (PEM): every peer's certificate must
	// chain to it.
	CAFile string `yaml:"ca_file"`
	// CertFile is this node's certificate (PEM), naming
	// `xce://<cluster_id>/node/<node_id>`. Renewed files are picked up
	// without a restart.
	CertFile string `yaml:"cert_file"`
	// KeyFile is cert_file's key (PEM).
	KeyFile string `yaml:"key_file"`
}

// Auth is who may call what.
type Auth struct {
	// TokensFile holds one token a line, `<sha256 of the token, hex>
	// <principal> <role>[,<role>…]`, with roles admin, writer, reader and
	// worker. It is read at start; a malformed line stops the node. Empty:
	// no tokens.
	TokensFile string `yaml:"tokens_file"`
	// Anonymous is the role of a caller with no credentials where
	// permissions apply: none (the call is refused Unauthenticated) or
	// reader.
	Anonymous string `yaml:"anonymous"`
}

// Limits bound the two ports.
type Limits struct {
	// Client bounds the client port (API, /healthz, /readyz, /metrics).
	Client ClientLimits `yaml:"client"`
	// Peer bounds the Raft peer port.
	Peer PeerLimits `yaml:"peer"`
}

// ClientLimits bound the client port.
type ClientLimits struct {
	// MaxConnections caps the client connections open at once, 1 to
	// 1048576. When they are all open, a new connection takes the place of
	// one that has not sent a request yet (or has sat idle between
	// requests for longer than read_header_timeout); when there is none,
	// it goes to the health reserve. The node lowers the cap at start,
	// with a warning, when RLIMIT_NOFILE leaves too few descriptors for
	// it.
	MaxConnections int `yaml:"max_connections"`
	// HealthReserve is how many connections more, 0 to 1024, may be open
	// for /healthz and /readyz only: anything else on them gets 503.
	// Beyond the reserve a new connection is closed at once.
	HealthReserve int `yaml:"health_reserve"`
	// ReadHeaderTimeout: a connection must send a request's headers within
	// this, counted from when it opens or from the first byte of a request
	// after an idle spell. 100ms to 1h.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout: a request's body must arrive whole within this of the
	// request's start, over HTTP/1.1 and HTTP/2 alike. 100ms to 1h.
	ReadTimeout Duration `yaml:"read_timeout"`
	// WriteTimeout: a response must be written within this of the
	// request's start, or of the end of its body; on a long stream
	// (WatchStatus), each message within this of being sent. A worker's
	// held heartbeat is answered within half of it. 100ms to 1h.
	WriteTimeout Duration `yaml:"write_timeout"`
	// IdleTimeout closes a connection that carries no request for this
	// long. 1s to 24h.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes caps a request's headers, in bytes: 4096 to 16777216
	// (16 MiB).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
}

// PeerLimits bound the Raft peer port.
type PeerLimits struct {
	// MaxConnections caps the inbound peer connections open at once: at
	// least 8 for each other voter in peers (8 with one voter), at most
	// 1048576. At the cap a new connection takes the place of the oldest
	// that never carried a message; otherwise it is closed at once.
	MaxConnections int `yaml:"max_connections"`
	// MaxMessageBytes caps one Raft message, in bytes (an AppendEntries
	// with its entries; snapshot data that follows an InstallSnapshot is
	// not part of it): 17825792 (17 MiB) to 1073741824 (1 GiB). It must
	// fit the largest entry the node writes, an assignment of up to
	// 16 MiB; a larger message is refused from its declared lengths,
	// before it is read.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// FirstByteTimeout: a new connection must start its first message
	// within this. Raft writes as soon as it dials, so only a connection
	// nobody meant to use waits longer. 100ms to 1h.
	FirstByteTimeout Duration `yaml:"first_byte_timeout"`
	// ReadTimeout: a message must arrive whole within this of its first
	// byte (and its answer be written within this). 100ms to 1h; in force
	// never less than raft's own RPC timeout, 10 × raft.heartbeat_timeout
	// and at least 1s.
	ReadTimeout Duration `yaml:"read_timeout"`
	// IdleTimeout closes a connection that starts no message for this
	// long. Raft's leader sends on its connections every heartbeat; what
	// sits idle longer is a pooled connection nobody uses. 1m to 24h; in
	// force never less than 10 × raft.heartbeat_timeout.
	IdleTimeout Duration `yaml:"idle_timeout"`
}

// Assignor is the task placement policy and the worker sessions.
type Assignor struct {
	// AcceptableRecoveryLag is the largest lag, in the units workers
	// report it in (records, for xce's own workers), at which a worker
	// counts as caught up on a task; actives go to caught-up workers, and
	// one that is not gets a warm-up first. 0 or more.
	AcceptableRecoveryLag int64 `yaml:"acceptable_recovery_lag"`
	// MaxWarmupReplicas caps the warm-up copies in the whole assignment at
	// once: each restores a task's state and costs the cluster I/O. At
	// least 1, so that an unbalanced cluster always makes progress.
	MaxWarmupReplicas int `yaml:"max_warmup_replicas"`
	// NumStandbyReplicas is how many standbys each stateful task gets, on
	// workers other than the active's, 0 to 16; a task submitted with its
	// own standby_replicas above 0 (`xce submit --standbys N`) gets that
	// many instead. Either is capped by the workers with capacity above
	// 0, less one.
	NumStandbyReplicas int `yaml:"num_standby_replicas"`
	// ProbingRebalanceInterval is how long after a plan that left moves
	// waiting the primary plans again; a warm-up that catches up triggers
	// a plan at once. At least 1m.
	ProbingRebalanceInterval Duration `yaml:"probing_rebalance_interval"`
	// SessionTimeout: a worker silent for this long is gone; a new primary
	// also waits this long for workers to report before it plans. 500ms
	// to 1h.
	SessionTimeout Duration `yaml:"session_timeout"`
	// HeartbeatInterval is what workers are told to use: at least 50ms
	// and at most half of session_timeout.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	// GrantMargin separates a worker's active lease from its session: a
	// worker runs its actives at most session_timeout − grant_margin (its
	// active lease) after sending its last acknowledged heartbeat, and an
	// active it held moves to another worker no sooner than
	// session_timeout + grant_margin after the primary last heard from it
	// (docs/design.md, "At most one active"). 0 means session_timeout/5;
	// not negative, and the lease must exceed heartbeat_interval.
	GrantMargin Duration `yaml:"grant_margin"`
	// ReplaceDelay is how long a worker whose session expired stays away
	// before its copies are replaced: meanwhile its actives move to other
	// copies at once, but its standbys are kept for it and not re-created
	// elsewhere (unless fewer than min_copies copies of a task would be
	// left), so a worker that restarts finds its state still in use. 0s
	// (off) to 24h. A worker that stops gracefully (its actives handed
	// over first, as in a planned restart) is away too.
	ReplaceDelay Duration `yaml:"replace_delay"`
	// MinCopies is the fewest copies of a stateful task (its active
	// included) kept on live workers while a worker is away
	// (replace_delay): below it, replacements are made at once. 0 to 17;
	// 0 and 1 keep only the active.
	MinCopies int `yaml:"min_copies"`
	// SpreadBy lists worker label keys (xce worker --label), most
	// important first: for each in turn, the copies of a stateful task
	// take distinct values as far as the workers allow (zone, then rack,
	// for example). At most 8 keys, each a valid label key, none twice.
	SpreadBy []string `yaml:"spread_by"`
	// Balance is what the assignor balances over the workers' capacity:
	// "weight" (the tasks' weights, xce submit --weight) or "load" (the
	// actives' loads the workers report).
	Balance string `yaml:"balance"`
	// LoadTolerance is, with balance: load, how far in percent of the
	// ideal load a worker's load may stray before actives move: 0 to 100.
	LoadTolerance int `yaml:"load_tolerance"`
	// MaxLoadMoves bounds, with balance: load, the actives one plan moves
	// to even the load out (caught-up standbys first): 0 or more.
	MaxLoadMoves int `yaml:"max_load_moves"`
}

// Autopilot is the leader's membership policy.
type Autopilot struct {
	// StabilizationTime is how long a non-voter must stay healthy before
	// it is promoted, so that a node that restarts in a loop, or whose
	// link flaps, never votes. 0s to 24h.
	StabilizationTime Duration `yaml:"stabilization_time"`
	// MaxLag is how many log entries a server may trail the leader and
	// still be healthy: 1 to 1099511627776 (2^40).
	MaxLag uint64 `yaml:"max_lag"`
	// LastContactThreshold is how long ago the leader may last have heard
	// from a server that is healthy: above 0s, at most 24h.
	LastContactThreshold Duration `yaml:"last_contact_threshold"`
	// CleanupDeadServers removes a voter unhealthy for
	// dead_server_timeout once a stabilized non-voter is ready to replace
	// it, never the leader and never below a healthy quorum.
	CleanupDeadServers bool `yaml:"cleanup_dead_servers"`
	// DeadServerTimeout is how long a voter must be unhealthy before
	// cleanup_dead_servers removes it: at least last_contact_threshold, at
	// most 24h. Keep it longer than a node's restart, or a restart looks
	// like a death.
	DeadServerTimeout Duration `yaml:"dead_server_timeout"`
}

// Peer is one voter of the cluster.
type Peer struct {
	// ID is the voter's node_id, unique in the list.
	ID string `yaml:"id"`
	// PeerAddr is where the other nodes reach its Raft port: host:port
	// with a concrete host, unique in the list. This node's entry equals
	// its peer_addr.
	PeerAddr string `yaml:"peer_addr"`
	// ClientAddr is its API address, given to clients in leader hints:
	// host:port, unique in the list. This node's entry equals its
	// client_addr.
	ClientAddr string `yaml:"client_addr"`
}

// HA is the election backend and its lease.
type HA struct {
	// Backend is raft (the nodes elect among themselves) or kafka (two or
	// more nodes, coordinated by the brokers of kafka.brokers, which it
	// needs).
	Backend string `yaml:"backend"`
	// Lease is how long a granted or renewed lease lasts, with the kafka
	// backend: at least 100ms, in whole milliseconds. Failover takes about
	// lease + rank × stagger. Every member must use the same lease, renew
	// and stagger.
	Lease Duration `yaml:"lease"`
	// Renew is how long after each grant the holder renews, with the
	// kafka backend: above 0s and below lease, in whole milliseconds; the
	// rest of the lease absorbs a slow renewal.
	Renew Duration `yaml:"renew"`
	// Stagger separates the challenges of successive ranks once a lease
	// has run out, with the kafka backend: rank n challenges at the
	// deadline + n × stagger. 0s or more, in whole milliseconds; 0s lets
	// every challenger go at once (exactly one still wins).
	Stagger Duration `yaml:"stagger"`
}

// Backend names.
const (
	BackendRaft  = "raft"
	BackendKafka = "kafka"
)

// Raft holds the hashicorp/raft tuning knobs.
type Raft struct {
	// HeartbeatTimeout: a follower that stops hearing from the leader
	// starts an election after this long, so it bounds failover when the
	// leader is alive but cut off or stalled. At least 5ms; not above
	// election_timeout, not below leader_lease_timeout or commit_timeout.
	HeartbeatTimeout Duration `yaml:"heartbeat_timeout"`
	// ElectionTimeout is how long a candidate waits before it retries: at
	// least heartbeat_timeout (and 5ms).
	ElectionTimeout Duration `yaml:"election_timeout"`
	// LeaderLeaseTimeout: a leader that has not heard from a majority for
	// this long steps down, so a partitioned primary stops admitting
	// writes. 5ms to heartbeat_timeout.
	LeaderLeaseTimeout Duration `yaml:"leader_lease_timeout"`
	// CommitTimeout is an idle leader's AppendEntries pace, so that
	// followers learn of commits promptly. 5ms to heartbeat_timeout.
	CommitTimeout Duration `yaml:"commit_timeout"`
	// SnapshotInterval is how often a node checks snapshot_threshold
	// (with either backend). At least 5ms.
	SnapshotInterval Duration `yaml:"snapshot_interval"`
	// SnapshotThreshold is how many log entries (records, with the kafka
	// backend) applied since the last snapshot make the next one. At
	// least 1.
	SnapshotThreshold uint64 `yaml:"snapshot_threshold"`
	// SnapshotWrites also takes a snapshot once this many writes were
	// applied since the last one and eight times as long as the last one
	// took has passed since it ended, checked every second: it bounds
	// what a restart replays. 0 leaves it to snapshot_threshold. Raft
	// backend only.
	SnapshotWrites uint64 `yaml:"snapshot_writes"`
	// TrailingLogs is how many log entries a snapshot leaves behind, so
	// that a follower a little behind catches up from the log rather than
	// from a whole snapshot. 0 or more.
	TrailingLogs uint64 `yaml:"trailing_logs"`
	// DetectLeaderExit: a follower that finds the leader's peer port
	// refusing connections (the leader's process has exited) starts an
	// election at once instead of after heartbeat_timeout. Turn it off
	// only where something in front of the peer ports refuses connections
	// for a live node.
	DetectLeaderExit bool `yaml:"detect_leader_exit"`
	// LogSegmentSize is the space each Raft log segment file is given when
	// it is created, in bytes: 1048576 (1 MiB) to 1073741824 (1 GiB).
	// Segments are preallocated, so an append changes no file size; a new
	// one starts once a segment is full. The disk needs room for one more
	// segment than the log holds.
	LogSegmentSize int64 `yaml:"log_segment_size"`
}

// Kafka is the brokers and what goes to them.
type Kafka struct {
	// Brokers are the Kafka bootstrap brokers, host:port each with a
	// concrete host. Empty: publishing is disabled (the outbox is trimmed
	// without being published); ha.backend kafka needs at least one.
	Brokers []string `yaml:"brokers"`
	// Topic is the events topic, one partition: 1-249 characters of
	// [A-Za-z0-9._-], not "." or "..". Checked with publishing disabled
	// too.
	Topic string `yaml:"topic"`
	// TransactionalIDPrefix starts every Kafka name the cluster uses: the
	// publisher's transactional id `<prefix>.<cluster_id>.primary`, and
	// with ha.backend kafka the topics `<prefix>.<cluster_id>.coord` and
	// `<prefix>.<cluster_id>.state` and the transactional id
	// `<prefix>.<cluster_id>.role`. 1-64 characters of [A-Za-z0-9._-].
	TransactionalIDPrefix string `yaml:"transactional_id_prefix"`
	// TLS secures the connections to the brokers (the publisher's, the
	// Kafka backend's) with TLS 1.2 or later: on when enabled is true or
	// ca_file or cert_file is set. Renewed files are picked up without a
	// restart.
	TLS KafkaTLS `yaml:"tls"`
	// SASL authenticates this node to the brokers. The password is read
	// from a file, never written in the config.
	SASL KafkaSASL `yaml:"sasl"`
}

// KafkaTLS is TLS to the brokers.
type KafkaTLS struct {
	// Enabled turns TLS on with the system's roots, when no ca_file is
	// set.
	Enabled bool `yaml:"enabled"`
	// CAFile is the CA (PEM) that signs the brokers' certificates; empty:
	// the system's roots. A broker's certificate must also name the host
	// it is dialed by.
	CAFile string `yaml:"ca_file"`
	// CertFile is a client certificate (PEM), for brokers that ask for
	// one; set together with key_file.
	CertFile string `yaml:"cert_file"`
	// KeyFile is cert_file's key (PEM).
	KeyFile string `yaml:"key_file"`
}

// KafkaSASL is SASL authentication to the brokers.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: no SASL.
	// PLAIN sends the password as it is, so to a broker beyond loopback it
	// needs kafka.tls (or insecure).
	Mechanism string `yaml:"mechanism"`
	// Username is the user to authenticate as. Required with a mechanism.
	Username string `yaml:"username"`
	// PasswordFile is a file whose first line is the password. Required
	// with a mechanism. It is read at start (missing or empty: the node
	// stops) and at every authentication, so a changed password applies
	// to new connections.
	PasswordFile string `yaml:"password_file"`
}

// Log configures the node's logger.
type Log struct {
	// Level is the least severe level logged: trace, debug, info, warn or
	// error.
	Level string `yaml:"level"`
	// Format is json, console, or auto (console on a terminal, else json).
	Format string `yaml:"format"`
}

// Duration is a time.Duration written as "150ms" or "1s" in YAML (and JSON).
type Duration struct{ time.Duration }

// D returns the duration as a time.Duration.
func (d Duration) D() time.Duration { return d.Duration }

// MarshalText renders the duration as e.g. "150ms"; yaml.v3 and encoding/json use it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.Duration.String()), nil }

// UnmarshalText parses a duration such as "150ms" or "1s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q, want a number with a unit such as \"150ms\" or \"1s\"", b)
	}
	d.Duration = v
	return nil
}

// UnmarshalYAML accepts only scalars; see UnmarshalText.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected a duration such as \"150ms\", got %s", describe(n))
	}
	return d.UnmarshalText([]byte(n.Value))
}

// Default returns a Config with every default filled and no node identity
// (node_id, data_dir, addresses and peers are empty). The defaults of the
// settings a package uses are that package's (see convert.go); the rest are
// the file's own, here.
func Default() Config {
	c := Config{
		ClusterID: "local",
		HA:        HA{Backend: BackendRaft},
		Raft:      Raft{LogSegmentSize: raftlog.DefaultSegmentSize},
		Kafka:     Kafka{TransactionalIDPrefix: "xce"},
		Log:       Log{Level: "info", Format: "auto"},
		TLS:       ClientTLS{ClientAuth: "none"},
		Auth:      Auth{Anonymous: "none"},
	}
	for _, b := range bindings {
		b.fill(&c)
	}
	return c
}

// Self returns this node's entry in Peers. If there is none (the config was
// not validated), it returns an entry built from the top-level fields.
func (c *Config) Self() Peer {
	for _, p := range c.Peers {
		if p.ID == c.NodeID {
			return p
		}
	}
	return Peer{ID: c.NodeID, PeerAddr: c.PeerAddr, ClientAddr: c.ClientAddr}
}

// ValidationError lists every problem found in a config, each as
// "field.path: problem". Error joins them with "; ".
type ValidationError struct{ Problems []string }

func (e *ValidationError) Error() string { return strings.Join(e.Problems, "; ") }

// Load reads the file at path and returns the parsed, defaulted and validated
// config. Errors are prefixed with "config PATH: ".
func Load(path string) (*Config, error) {
	fail := func(err error) (*Config, error) { return nil, fmt.Errorf("config %s: %w", path, err) }
	fi, err := os.Stat(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fail(err)
	}
	if fi.IsDir() {
		return fail(errors.New("is a directory, want a YAML file"))
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fail(err)
	}
	c, err := Parse(data)
	if err != nil {
		return fail(err)
	}
	return c, nil
}

// Parse decodes a config from YAML strictly, fills defaults and validates it.
func Parse(data []byte) (*Config, error) {
	root, err := document(data)
	if err != nil {
		return nil, err
	}
	// Walk the node tree first: it reports unknown keys, duplicates and
	// wrongly shaped values with their full key path and line, and drops
	// null values so that their defaults apply.
	w := walker{seen: map[visit]bool{}}
	w.walk(root, reflect.TypeFor[Config](), "")
	if len(w.problems) > 0 {
		return nil, &ValidationError{w.problems}
	}
	// Backstop: yaml.v3's own strict decode of the original text.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	var scratch Config
	if err := strict.Decode(&scratch); err != nil {
		return nil, yamlError(err)
	}
	c := Default()
	if err := root.Decode(&c); err != nil {
		return nil, yamlError(err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// document parses data as exactly one YAML document holding a mapping.
func document(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("file is empty")
		}
		return nil, yamlError(err)
	}
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, fmt.Errorf("more than one YAML document (the second starts at line %d), want one", extra.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, errors.New("file is empty")
	}
	n := resolve(doc.Content[0])
	if isNull(n) {
		return nil, errors.New("file has no settings")
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("expected a mapping of settings, got %s at line %d", describe(n), n.Line)
	}
	return n, nil
}

var unknownField = regexp.MustCompile(`^line (\d+): field (.*) not found in type \S+$`)

// yamlError rewords yaml.v3 errors: "yaml: line 3: ..." becomes
// "yaml syntax error: line 3: ...", and strict-decode type errors are listed
// one by one, unknown fields as `unknown key "foo" at line 3`.
func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		var p []string
		for _, e := range te.Errors {
			if m := unknownField.FindStringSubmatch(e); m != nil {
				e = fmt.Sprintf("unknown key %q at line %s", m[2], m[1])
			}
			p = append(p, e)
		}
		return &ValidationError{p}
	}
	return fmt.Errorf("yaml syntax error: %s", strings.TrimPrefix(err.Error(), "yaml: "))
}

type visit struct {
	n *yaml.Node
	t reflect.Type
}

// walker checks a YAML node tree against the shape of a Go type.
type walker struct {
	problems
	seen map[visit]bool // each (node, type) once: aliases cannot blow up the walk
}

var durationType = reflect.TypeFor[Duration]()

func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	n = resolve(n)
	if w.seen[visit{n, t}] {
		return
	}
	w.seen[visit{n, t}] = true
	switch {
	case t.Kind() == reflect.Struct && t != durationType:
		w.mapping(n, t, path)
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			w.add(path, "expected a list, got %s at line %d", describe(n), n.Line)
			return
		}
		for i, e := range n.Content {
			w.walk(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		w.leaf(n, t, path)
	}
}

func (w *walker) mapping(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind != yaml.MappingNode {
		w.add(path, "expected a mapping, got %s at line %d", describe(n), n.Line)
		return
	}
	var names []string
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if name := yamlName(f); name != "" && name != "-" {
			names = append(names, name)
			fields[name] = f.Type
		}
	}
	keys := map[string]int{}
	kept := make([]*yaml.Node, 0, len(n.Content))
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			w.add(path, "expected a plain key, got %s at line %d", describe(k), k.Line)
			continue
		}
		if k.ShortTag() == "!!merge" { // "<<: *anchor" merges mappings
			vs := []*yaml.Node{resolve(v)}
			if vs[0].Kind == yaml.SequenceNode {
				vs = vs[0].Content
			}
			for _, m := range vs {
				w.walk(m, t, path)
			}
			kept = append(kept, n.Content[i], v)
			continue
		}
		if line, dup := keys[k.Value]; dup {
			w.add(path, "duplicate key %q at line %d (first at line %d)", k.Value, k.Line, line)
			continue
		}
		keys[k.Value] = k.Line
		ft, ok := fields[k.Value]
		if !ok {
			w.add(path, "unknown key %q at line %d%s", k.Value, k.Line, suggest(k.Value, names))
			continue
		}
		if isNull(resolve(v)) {
			continue // absent: the default applies
		}
		w.walk(v, ft, join(path, k.Value))
		kept = append(kept, n.Content[i], v)
	}
	n.Content = kept
}

func (w *walker) leaf(n *yaml.Node, t reflect.Type, path string) {
	want := map[reflect.Type]string{
		durationType:              `a duration such as "150ms" or "1s"`,
		reflect.TypeFor[uint64](): "a non-negative integer",
		reflect.TypeFor[int]():    "an integer",
		reflect.TypeFor[string](): "a string",
	}[t]
	if want == "" {
		want = t.String()
	}
	if n.Kind != yaml.ScalarNode {
		w.add(path, "expected %s, got %s at line %d", want, describe(n), n.Line)
	} else if err := n.Decode(reflect.New(t).Interface()); err != nil {
		w.add(path, "expected %s, got %s at line %d", want, describe(n), n.Line)
	}
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("%q", v)
	}
	return "an unsupported node"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest returns ` (did you mean "x")` for a known key within one edit
// (two for keys of 6 characters or more), or "".
func suggest(key string, names []string) string {
	best, bestD := "", 1
	if len(key) >= 6 {
		bestD = 2
	}
	for _, name := range names {
		if d := editDistance(key, name); d <= bestD {
			best, bestD = name, d-1 // later names must be strictly closer
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
