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

// Config is one node's configuration.
type Config struct {
	NodeID     string `yaml:"node_id"`     // required; this node's id, one of peers[].id, written into the data dir
	ClusterID  string `yaml:"cluster_id"`  // default "local"
	DataDir    string `yaml:"data_dir"`    // relative to the working directory
	ClientAddr string `yaml:"client_addr"` // API, /healthz, /readyz, /metrics; host may be empty (all interfaces)
	PeerAddr   string `yaml:"peer_addr"`   // Raft; advertised to peers, so it needs a concrete host
	// PeerListenAddr, when set, is where the Raft listener binds (behind NAT
	// or a proxy, peers dial peer_addr); outbound peer connections then
	// leave from its host, so peers see a stable source address.
	PeerListenAddr string `yaml:"peer_listen_addr"`
	// Peers are the voters a new cluster starts with, this node included:
	// they bootstrap its first configuration. Once the data dir holds
	// Raft state the cluster's own configuration says who the members are
	// (members are added and removed through the API) and a change here
	// has no effect on it. With join, list only this node or nothing.
	Peers []Peer `yaml:"peers"`
	// Join lists client addresses (host:port) of members of an existing
	// cluster. A node with join and an empty data dir does not bootstrap:
	// it asks those members to add it, starts as a non-voter and becomes
	// a voter once autopilot promotes it. Ignored once the data dir holds
	// Raft state. Raft backend only.
	Join      []string  `yaml:"join"`
	Autopilot Autopilot `yaml:"autopilot"`
	HA        HA        `yaml:"ha"`
	Raft      Raft      `yaml:"raft"`
	Kafka     Kafka     `yaml:"kafka"`
	Assignor  Assignor  `yaml:"assignor"`
	Limits    Limits    `yaml:"limits"`
	Log       Log       `yaml:"log"`
	// TLS secures the client port (API, /healthz, /readyz, /metrics).
	TLS ClientTLS `yaml:"tls"`
	// PeerTLS secures the peer port with mutual TLS: every peer presents a
	// certificate signed by ca_file that names its node of this cluster.
	PeerTLS PeerTLS `yaml:"peer_tls"`
	// Auth decides who may call what on the client port.
	Auth Auth `yaml:"auth"`
	// Insecure lets a node whose client or peer address is reachable
	// beyond this machine start without TLS on that port. Default false:
	// such a node refuses to start.
	Insecure bool `yaml:"insecure"`
}

// ClientTLS is the client port's TLS. With no cert_file the port is
// plaintext.
type ClientTLS struct {
	CAFile   string `yaml:"ca_file"`   // CA that signs client certificates; required unless client_auth is none
	CertFile string `yaml:"cert_file"` // the node's certificate (PEM); renewed files are picked up without a restart
	KeyFile  string `yaml:"key_file"`  // its key (PEM)
	// ClientAuth: none (no client certificates), optional (verified when
	// sent), or required. Default none.
	ClientAuth string `yaml:"client_auth"`
}

// PeerTLS is the peer port's mutual TLS: all three files, or none
// (plaintext).
type PeerTLS struct {
	CAFile   string `yaml:"ca_file"`   // the cluster's CA: every peer's certificate must chain to it
	CertFile string `yaml:"cert_file"` // this node's certificate, naming xce://<cluster_id>/node/<node_id>
	KeyFile  string `yaml:"key_file"`  // its key (PEM)
}

// Auth is who may call what. Permissions apply once the node can tell
// callers apart: a tokens file, or client certificates (tls.client_auth
// optional or required).
type Auth struct {
	// TokensFile holds one token a line: <sha256 of the token, hex>
	// <principal> <role>[,<role>…]. Roles: admin, writer, reader, worker.
	TokensFile string `yaml:"tokens_file"`
	// Anonymous is the role of a caller with no credentials: none or
	// reader. Default none.
	Anonymous string `yaml:"anonymous"`
}

// Limits bound what clients and peers can make a node hold: sockets,
// memory and time.
type Limits struct {
	Client ClientLimits `yaml:"client"`
	Peer   PeerLimits   `yaml:"peer"`
}

// ClientLimits bound the client port (API, /healthz, /readyz, /metrics).
type ClientLimits struct {
	// MaxConnections caps the client connections open at once. When they
	// are all open, a new connection takes the place of one that has not
	// sent a request yet (or has sat idle between requests for longer than
	// read_header_timeout); when there is none, it goes to the health
	// reserve. The node lowers the cap at start, with a warning, when
	// RLIMIT_NOFILE leaves too few descriptors for it.
	MaxConnections int `yaml:"max_connections"` // default 1024
	// HealthReserve connections more may be open for /healthz and /readyz
	// only: anything else on them gets 503. Beyond the reserve a new
	// connection is closed at once.
	HealthReserve int `yaml:"health_reserve"` // default 8
	// ReadHeaderTimeout: a connection must send a request's headers within
	// this, counted from when it opens or from the first byte of a request
	// after an idle spell.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"` // default 5s
	// ReadTimeout: a request's body must arrive whole within this of the
	// request's start, over HTTP/1.1 and HTTP/2 alike.
	ReadTimeout Duration `yaml:"read_timeout"` // default 10s
	// WriteTimeout: a response must be written within this of the
	// request's start, or of the end of its body; on a long stream
	// (WatchStatus), each message within this of being sent.
	WriteTimeout Duration `yaml:"write_timeout"` // default 10s
	// IdleTimeout closes a connection that carries no request for this long.
	IdleTimeout Duration `yaml:"idle_timeout"` // default 2m
	// MaxHeaderBytes caps a request's headers.
	MaxHeaderBytes int `yaml:"max_header_bytes"` // default 65536
}

// PeerLimits bound the Raft peer port.
type PeerLimits struct {
	// MaxConnections caps the inbound peer connections open at once. Each
	// other voter may hold up to 8 of them.
	MaxConnections int `yaml:"max_connections"` // default 128
	// MaxMessageBytes caps one Raft message (an AppendEntries with its
	// entries; snapshot data that follows an InstallSnapshot is not part of
	// it). It must fit the largest entry the node writes: one
	// CmdSetAssignment of up to state.MaxAssignmentBytes.
	MaxMessageBytes int `yaml:"max_message_bytes"` // default 33554432 (32 MiB)
	// FirstByteTimeout: a new connection must start its first message
	// within this. Raft writes as soon as it dials, so only a connection
	// nobody meant to use waits longer.
	FirstByteTimeout Duration `yaml:"first_byte_timeout"` // default 5s
	// ReadTimeout: a message must arrive whole within this of its first
	// byte (and its answer be written within this); never less than
	// raft's own RPC timeout, 10 × raft.heartbeat_timeout and at least 1s.
	ReadTimeout Duration `yaml:"read_timeout"` // default 10s
	// IdleTimeout closes a connection that starts no message for this
	// long. Raft's leader sends on its connections every heartbeat; what
	// sits idle longer is a pooled connection nobody uses. Never less than
	// 10 × raft.heartbeat_timeout.
	IdleTimeout Duration `yaml:"idle_timeout"` // default 2m, at least 1m
}

// Assignor holds the task placement settings (docs/design.md, "The
// assignor") and the worker session timings. Only the primary plans, but
// every node should carry the same values so that a failover keeps the
// policy.
type Assignor struct {
	AcceptableRecoveryLag int64 `yaml:"acceptable_recovery_lag"` // default 10000
	MaxWarmupReplicas     int   `yaml:"max_warmup_replicas"`     // default 2, at least 1
	// NumStandbyReplicas: standbys per stateful task, on workers other than
	// the active's; a task submitted with its own standby_replicas above 0
	// (`xce submit --standbys N`) gets that many instead. Either is capped
	// by the workers with capacity above 0, less one.
	NumStandbyReplicas       int      `yaml:"num_standby_replicas"`       // default 0, at most 16
	ProbingRebalanceInterval Duration `yaml:"probing_rebalance_interval"` // default 10m, at least 1m
	// SessionTimeout: a worker silent for this long is gone; a new primary
	// also waits this long for workers to report before it plans.
	SessionTimeout Duration `yaml:"session_timeout"` // default 10s
	// HeartbeatInterval is what workers are told to use.
	HeartbeatInterval Duration `yaml:"heartbeat_interval"` // default 1s, below session_timeout/2
	// GrantMargin: a worker runs its actives at most session_timeout −
	// grant_margin (its active lease) after sending its last acknowledged
	// heartbeat, and an active it held moves to another worker no sooner
	// than session_timeout + grant_margin after the primary last heard from
	// it (docs/design.md, "At most one active").
	GrantMargin Duration `yaml:"grant_margin"` // default 0: session_timeout/5; the lease must exceed heartbeat_interval
}

// Autopilot decides, on the leader, when a non-voter becomes a voter and
// when a dead voter is replaced (docs/design.md, "Membership").
type Autopilot struct {
	// A non-voter must stay healthy this long before it is promoted.
	StabilizationTime Duration `yaml:"stabilization_time"` // default 10s
	// A server more log entries than this behind the leader is not
	// healthy.
	MaxLag uint64 `yaml:"max_lag"` // default 1024
	// A server the leader has not heard from for longer than this is not
	// healthy.
	LastContactThreshold Duration `yaml:"last_contact_threshold"` // default 2s
	// Remove a voter unhealthy for dead_server_timeout once a stabilized
	// non-voter is ready to replace it, never the leader and never below
	// a healthy quorum. Default false.
	CleanupDeadServers bool `yaml:"cleanup_dead_servers"`
	// How long a voter must be unhealthy before cleanup_dead_servers
	// removes it; at least last_contact_threshold.
	DeadServerTimeout Duration `yaml:"dead_server_timeout"` // default 30s
}

// Peer is one voter of the cluster.
type Peer struct {
	ID         string `yaml:"id"`          // unique in the cluster
	PeerAddr   string `yaml:"peer_addr"`   // where the other nodes reach its raft port
	ClientAddr string `yaml:"client_addr"` // its API address, given to clients in leader hints
}

// HA selects the election backend. With backend kafka, Kafka coordinates
// the role (a lease in a coordination topic, fenced by the producer epoch)
// and holds the replicated log; peers then only give each member's
// client_addr (for leader hints) and the raft section is unused.
type HA struct {
	Backend string   `yaml:"backend"` // raft (default) or kafka
	Lease   Duration `yaml:"lease"`   // kafka: how long a lease lasts; default 3s
	Renew   Duration `yaml:"renew"`   // kafka: renew this long after the grant; default 1s
	Stagger Duration `yaml:"stagger"` // kafka: delay between successive ranks' challenges; default 500ms
}

// Backend names.
const (
	BackendRaft  = "raft"
	BackendKafka = "kafka"
)

// Raft holds the hashicorp/raft tuning knobs.
type Raft struct {
	HeartbeatTimeout   Duration `yaml:"heartbeat_timeout"`    // default 200ms
	ElectionTimeout    Duration `yaml:"election_timeout"`     // default 200ms
	LeaderLeaseTimeout Duration `yaml:"leader_lease_timeout"` // default 150ms
	CommitTimeout      Duration `yaml:"commit_timeout"`       // default 10ms
	SnapshotInterval   Duration `yaml:"snapshot_interval"`    // default 30s
	SnapshotThreshold  uint64   `yaml:"snapshot_threshold"`   // default 65536
	// SnapshotWrites also takes a snapshot once this many writes, or a
	// sixteenth of the task count if that is more, were applied since the
	// last one (0: only snapshot_threshold). Default 131072.
	SnapshotWrites uint64 `yaml:"snapshot_writes"`
	TrailingLogs   uint64 `yaml:"trailing_logs"` // default 10240
	// DetectLeaderExit: a follower that finds the leader's peer port
	// refusing connections (the leader's process has exited) starts an
	// election at once instead of after heartbeat_timeout. Default true.
	DetectLeaderExit bool `yaml:"detect_leader_exit"`
	// LogSegmentSize is the space each Raft log segment file is given when
	// it is created (preallocated, so an append changes no file size); a
	// new one starts once a segment is full. The disk needs room for one
	// more segment than the log holds.
	LogSegmentSize int64 `yaml:"log_segment_size"` // bytes, default 16777216 (16 MiB), 1 MiB to 1 GiB
}

// Kafka configures event publishing. No brokers means publishing is disabled.
type Kafka struct {
	Brokers               []string `yaml:"brokers"`                 // host:port each; empty: publishing disabled
	Topic                 string   `yaml:"topic"`                   // default "xce.events"
	TransactionalIDPrefix string   `yaml:"transactional_id_prefix"` // default "xce"
	// TLS secures the connections to the brokers (the publisher's, the
	// Kafka backend's).
	TLS KafkaTLS `yaml:"tls"`
	// SASL authenticates this node to the brokers.
	SASL KafkaSASL `yaml:"sasl"`
}

// KafkaTLS is TLS to the brokers: on when enabled is true or ca_file or
// cert_file is set. Renewed files are picked up without a restart.
type KafkaTLS struct {
	Enabled  bool   `yaml:"enabled"`   // TLS with the system's roots when no ca_file is set
	CAFile   string `yaml:"ca_file"`   // CA that signs the brokers' certificates; default the system's roots
	CertFile string `yaml:"cert_file"` // client certificate (PEM), for brokers that ask for one
	KeyFile  string `yaml:"key_file"`  // its key (PEM)
}

// KafkaSASL is SASL authentication to the brokers. The password is read
// from a file, never written in the config; a changed file applies to new
// connections.
type KafkaSASL struct {
	Mechanism    string `yaml:"mechanism"`     // PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty: no SASL
	Username     string `yaml:"username"`      // required with a mechanism
	PasswordFile string `yaml:"password_file"` // its first line is the password; required with a mechanism
}

// Log configures the node's logger.
type Log struct {
	Level  string `yaml:"level"`  // trace|debug|info|warn|error, default info
	Format string `yaml:"format"` // json|console|auto, default auto (console on a terminal, else json)
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
