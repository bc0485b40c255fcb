package configs

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/ha/autopilot"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/fielderr"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/persist/raftlog"
	"github.com/xce/xce/placement"
	"github.com/xce/xce/tlsconf"
)

// sameFields reports every field in which got differs from want, skipping
// the fields named in skip (a node's identity, which has no default).
func sameFields(t *testing.T, what string, got, want any, skip ...string) {
	t.Helper()
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < g.NumField(); i++ {
		name := g.Type().Field(i).Name
		if contains(skip, name) {
			continue
		}
		gf, wf := g.Field(i), w.Field(i)
		if gf.Kind() == reflect.Func {
			if !gf.IsNil() || !wf.IsNil() {
				t.Errorf("%s.%s: a function is set", what, name)
			}
			continue
		}
		if !gf.CanInterface() {
			continue // unexported
		}
		if gf.Kind() == reflect.Struct {
			sameFields(t, what+"."+name, gf.Interface(), wf.Interface())
			continue
		}
		if !reflect.DeepEqual(gf.Interface(), wf.Interface()) {
			t.Errorf("%s.%s: the config file's default gives %v, the package's default is %v", what, name, gf.Interface(), wf.Interface())
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A config file that sets nothing but the node's identity gives each
// package exactly its own defaults: there is one default per setting.
func TestDefaultsAreThePackages(t *testing.T) {
	c := mustParse(t, minimal)
	sameFields(t, "raftha.Config", c.RaftConfig(), raftha.DefaultConfig(), "NodeID", "PeerAddr", "Peers")
	sameFields(t, "placement.Config", c.AssignorConfig(), placement.DefaultConfig())
	sameFields(t, "fence.Config", c.FenceConfig(), fence.DefaultConfig(), "Brokers", "TransactionalID", "Logger")
	sameFields(t, "succession.LeaseConfig", c.KafkaLease(), succession.DefaultLeaseConfig())
	sameFields(t, "netio.Limits", c.ClientLimits(), netio.DefaultLimits())
	sameFields(t, "autopilot.Config", c.AutopilotConfig(), autopilot.DefaultConfig())
	sameFields(t, "kafkaha.Config.Lease", c.KafkaHAConfig().Lease, succession.DefaultLeaseConfig())
	if c.Raft.LogSegmentSize != raftlog.DefaultSegmentSize {
		t.Errorf("raft.log_segment_size defaults to %d, the log's default is %d", c.Raft.LogSegmentSize, raftlog.DefaultSegmentSize)
	}
	// And what a YAML user gets by default has not moved.
	if c.HA.Lease.Duration != 3*time.Second || c.HA.Renew.Duration != time.Second || c.HA.Stagger.Duration != 500*time.Millisecond ||
		c.Raft.HeartbeatTimeout.Duration != 200*time.Millisecond || c.Limits.Peer.MaxMessageBytes != 32<<20 ||
		c.Assignor.SessionTimeout.Duration != 10*time.Second || c.Kafka.Topic != "xce.events" {
		t.Errorf("defaults moved: %+v", c)
	}
}

// The conversions carry every value of the file.
func TestConversions(t *testing.T) {
	c := mustParse(t, minimal+`cluster_id: c1
peer_listen_addr: 127.0.0.1:7301
ha: {lease: 4s, renew: 1500ms, stagger: 0s}
raft: {heartbeat_timeout: 300ms, election_timeout: 400ms, leader_lease_timeout: 250ms, commit_timeout: 20ms,
  snapshot_interval: 1m, snapshot_threshold: 100, snapshot_writes: 5000, trailing_logs: 7, detect_leader_exit: false}
kafka: {brokers: ["k1:9092"], topic: events, transactional_id_prefix: tx,
  tls: {ca_file: ca.pem, cert_file: c.pem, key_file: c-key.pem}, sasl: {mechanism: SCRAM-SHA-512, username: xce, password_file: pw}}
assignor: {acceptable_recovery_lag: 5, max_warmup_replicas: 3, num_standby_replicas: 1,
  probing_rebalance_interval: 2m, session_timeout: 4s, heartbeat_interval: 500ms, grant_margin: 1s,
  replace_delay: 5m, min_copies: 2, spread_by: [zone, rack], balance: load, load_tolerance: 20, max_load_moves: 3}
limits: {client: {max_connections: 10, read_timeout: 2s}, peer: {max_connections: 64, max_message_bytes: 20971520, first_byte_timeout: 2s, read_timeout: 3s, idle_timeout: 5m}}
`)
	r := c.RaftConfig()
	want := raftha.Config{NodeID: "n1", PeerAddr: "127.0.0.1:7201", PeerListenAddr: "127.0.0.1:7301", Peers: []raftha.Peer{{ID: "n1", Addr: "127.0.0.1:7201"}, {ID: "n2", Addr: "127.0.0.1:7202"}, {ID: "n3", Addr: "127.0.0.1:7203"}},
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond, LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout: 20 * time.Millisecond, SnapshotInterval: time.Minute, SnapshotThreshold: 100, SnapshotWrites: 5000, TrailingLogs: 7,
		MaxRPCSize: 20 << 20, RPCTimeout: 3 * time.Second, IdleTimeout: 5 * time.Minute, FirstByteTimeout: 2 * time.Second, MaxInboundConns: 64}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("RaftConfig\n%+v\nwant\n%+v", r, want)
	}
	if l := c.ClientLimits(); l.MaxConnections != 10 || l.ReadTimeout != 2*time.Second || l.FDHeadroom != netio.FDHeadroom(64) ||
		l.HealthReserve != 8 {
		t.Errorf("ClientLimits %+v", l)
	}
	a := c.AssignorConfig()
	if a.Assign.AcceptableRecoveryLag != 5 || a.Assign.MaxWarmupReplicas != 3 || a.Assign.NumStandbyReplicas != 1 ||
		a.Assign.ProbingRebalanceInterval != 2*time.Minute || a.SessionTimeout != 4*time.Second || a.HeartbeatInterval != 500*time.Millisecond ||
		a.GrantMargin != time.Second || a.ActiveLease() != 3*time.Second || a.ReplaceDelay != 5*time.Minute ||
		a.Assign.MinCopies != 2 || !reflect.DeepEqual(a.Assign.SpreadBy, []string{"zone", "rack"}) || a.Assign.Balance != "load" ||
		a.Assign.LoadTolerance != 20 || a.Assign.MaxLoadMoves != 3 {
		t.Errorf("AssignorConfig %+v", a)
	}
	if f := c.FenceConfig(); !reflect.DeepEqual(f.Brokers, []string{"k1:9092"}) || f.Topic != "events" || f.TransactionalID != "tx.c1.primary" {
		t.Errorf("FenceConfig %+v", f)
	}
	sec := kafkaopts.Security{TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: "ca.pem", Cert: "c.pem", Key: "c-key.pem"}},
		SASL: kafkaopts.SASL{Mechanism: "SCRAM-SHA-512", Username: "xce", PasswordFile: "pw"}}
	if f := c.FenceConfig(); f.Security != sec {
		t.Errorf("FenceConfig's Security %+v, want %+v", f.Security, sec)
	}
	if k := c.KafkaHAConfig(); k.Security != sec {
		t.Errorf("KafkaHAConfig's Security %+v, want %+v", k.Security, sec)
	}
	if l := c.KafkaLease(); l != (succession.LeaseConfig{LeaseMillis: 4000, RenewMillis: 1500}) {
		t.Errorf("KafkaLease %+v", l)
	}
	k := c.KafkaHAConfig()
	if k.Member != "n1" || k.Role != "primary" || k.CoordTopic != "tx.c1.coord" || k.StateTopic != "tx.c1.state" || k.TransactionalID != "tx.c1.role" ||
		k.SnapshotInterval != time.Minute || k.SnapshotThreshold != 100 || k.Lease != c.KafkaLease() || !reflect.DeepEqual(k.Brokers, []string{"k1:9092"}) ||
		k.ElectingHint != 200*time.Millisecond {
		t.Errorf("KafkaHAConfig %+v", k)
	}
}

// The problems a package finds are reported under the YAML keys.
func TestPackageProblemsNameTheKeys(t *testing.T) {
	kafka := func(c *Config) { c.HA.Backend, c.Kafka.Brokers = BackendKafka, []string{"k1:9092"} }
	checkValidate(t, []validateCase{
		{"lease below 100ms", func(c *Config) { kafka(c); c.HA.Lease = ms(50); c.HA.Renew = ms(10) }, "ha.lease: must be at least 100ms, got 50ms"},
		{"renew not below lease", func(c *Config) { kafka(c); c.HA.Renew = c.HA.Lease }, "ha.renew: must be positive and less than ha.lease (3s), got 3s"},
		{"stagger negative", func(c *Config) { kafka(c); c.HA.Stagger = ms(-1) }, "ha.stagger: must not be negative, got -1ms"},
		{"lease unchecked with raft", func(c *Config) { c.HA.Lease = ms(1) }, ""},
		{"kafka without brokers", func(c *Config) { c.HA.Backend = BackendKafka }, "ha.backend: kafka needs kafka.brokers"},
		{"recovery lag negative", func(c *Config) { c.Assignor.AcceptableRecoveryLag = -1 }, "assignor.acceptable_recovery_lag: must not be negative"},
		{"warmups zero", func(c *Config) { c.Assignor.MaxWarmupReplicas = 0 }, "assignor.max_warmup_replicas: must be at least 1"},
		{"standbys negative", func(c *Config) { c.Assignor.NumStandbyReplicas = -1 }, "assignor.num_standby_replicas: must not be negative"},
		{"standbys above 16", func(c *Config) { c.Assignor.NumStandbyReplicas = 17 }, "assignor.num_standby_replicas: must be at most 16"},
		{"standbys 16", func(c *Config) { c.Assignor.NumStandbyReplicas = 16 }, ""},
		{"probing below 1m", func(c *Config) { c.Assignor.ProbingRebalanceInterval = Duration{59 * time.Second} }, "assignor.probing_rebalance_interval: must be at least 1m0s"},
		{"session too short", func(c *Config) { c.Assignor.SessionTimeout = ms(100) }, "assignor.session_timeout: must be between 500ms and 1h0m0s (got 100ms)"},
		{"heartbeat too short", func(c *Config) { c.Assignor.HeartbeatInterval = ms(10) }, "assignor.heartbeat_interval: must be at least 50ms (got 10ms)"},
		{"heartbeat above half", func(c *Config) { c.Assignor.HeartbeatInterval = Duration{6 * time.Second} },
			"assignor.heartbeat_interval: must be at most half of assignor.session_timeout (6s > 10s/2)"},
		{"replace delay negative", func(c *Config) { c.Assignor.ReplaceDelay = ms(-1) }, "assignor.replace_delay: must be between 0s and 24h0m0s (got -1ms)"},
		{"replace delay above a day", func(c *Config) { c.Assignor.ReplaceDelay = Duration{25 * time.Hour} }, "assignor.replace_delay: must be between 0s and 24h0m0s"},
		{"replace delay 1h", func(c *Config) { c.Assignor.ReplaceDelay = Duration{time.Hour} }, ""},
		{"min copies negative", func(c *Config) { c.Assignor.MinCopies = -1 }, "assignor.min_copies: must be between 0 and 17"},
		{"min copies above 17", func(c *Config) { c.Assignor.MinCopies = 18 }, "assignor.min_copies: must be between 0 and 17"},
		{"min copies 2", func(c *Config) { c.Assignor.MinCopies = 2 }, ""},
		{"spread by a bad key", func(c *Config) { c.Assignor.SpreadBy = []string{"zo ne"} }, `assignor.spread_by: "zo ne" is not a label key`},
		{"spread by a key twice", func(c *Config) { c.Assignor.SpreadBy = []string{"zone", "zone"} }, `assignor.spread_by: "zone" is listed twice`},
		{"spread by too many keys", func(c *Config) { c.Assignor.SpreadBy = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} }, "assignor.spread_by: must list at most 8 keys"},
		{"spread by zone and rack", func(c *Config) { c.Assignor.SpreadBy = []string{"zone", "topology.kubernetes.io/rack"} }, ""},
		{"balance unknown", func(c *Config) { c.Assignor.Balance = "cpu" }, `assignor.balance: must be "weight" or "load" (got "cpu")`},
		{"balance load", func(c *Config) { c.Assignor.Balance = "load" }, ""},
		{"load tolerance above 100", func(c *Config) { c.Assignor.LoadTolerance = 101 }, "assignor.load_tolerance: must be between 0 and 100 percent"},
		{"load tolerance negative", func(c *Config) { c.Assignor.LoadTolerance = -1 }, "assignor.load_tolerance: must be between 0 and 100 percent"},
		{"max load moves negative", func(c *Config) { c.Assignor.MaxLoadMoves = -1 }, "assignor.max_load_moves: must not be negative"},
		{"grant margin leaves no lease", func(c *Config) { c.Assignor.GrantMargin = Duration{9500 * time.Millisecond} },
			"assignor.grant_margin: assignor.session_timeout − assignor.grant_margin (the active lease, 500ms) must exceed assignor.heartbeat_interval (1s)"},
		{"kafka cert without key", func(c *Config) { c.Kafka.TLS.CertFile = "c.pem" }, "kafka.tls.cert_file: cert_file and key_file are set together"},
		{"kafka sasl mechanism", func(c *Config) { c.Kafka.SASL = KafkaSASL{Mechanism: "GSSAPI", Username: "u", PasswordFile: "p"} },
			`kafka.sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (got "GSSAPI")`},
		{"kafka sasl username", func(c *Config) { c.Kafka.SASL = KafkaSASL{Mechanism: "SCRAM-SHA-256", PasswordFile: "p"} }, "kafka.sasl.username: required"},
		{"kafka sasl password file", func(c *Config) { c.Kafka.SASL = KafkaSASL{Mechanism: "SCRAM-SHA-512", Username: "u"} }, "kafka.sasl.password_file: required"},
		{"kafka sasl without mechanism", func(c *Config) { c.Kafka.SASL.Username = "u" }, "kafka.sasl.mechanism: required with a username or a password file"},
		{"kafka plain in clear beyond this machine", func(c *Config) {
			c.Kafka.Brokers = []string{"127.0.0.1:9092", "k1:9092"}
			c.Kafka.SASL = KafkaSASL{Mechanism: "PLAIN", Username: "u", PasswordFile: "p"}
		}, "kafka.sasl.mechanism: PLAIN sends the password in clear to k1:9092: set kafka.tls, use SCRAM-SHA-256 or SCRAM-SHA-512, or insecure: true"},
		{"kafka plain in clear on loopback", func(c *Config) {
			c.Kafka.Brokers = []string{"127.0.0.1:9092", "localhost:9093"}
			c.Kafka.SASL = KafkaSASL{Mechanism: "PLAIN", Username: "u", PasswordFile: "p"}
		}, ""},
		{"kafka plain over tls", func(c *Config) {
			c.Kafka.Brokers, c.Kafka.TLS.Enabled = []string{"k1:9092"}, true
			c.Kafka.SASL = KafkaSASL{Mechanism: "PLAIN", Username: "u", PasswordFile: "p"}
		}, ""},
		{"kafka plain in clear when insecure", func(c *Config) {
			c.Kafka.Brokers, c.Insecure = []string{"k1:9092"}, true
			c.Kafka.SASL = KafkaSASL{Mechanism: "PLAIN", Username: "u", PasswordFile: "p"}
		}, ""},
		{"kafka scram in clear", func(c *Config) {
			c.Kafka.Brokers = []string{"k1:9092"}
			c.Kafka.SASL = KafkaSASL{Mechanism: "SCRAM-SHA-256", Username: "u", PasswordFile: "p"}
		}, ""},
	})
}

// Every field a package's Validate can name, and every other field its
// problems mention, has a YAML key.
func TestEveryPackageProblemHasAKey(t *testing.T) {
	for _, tc := range []struct {
		err  error
		keys map[string]string
	}{
		{raftha.Config{}.Validate(), raftBinding.keys()},
		{raftha.Config{HeartbeatTimeout: time.Second, ElectionTimeout: time.Millisecond * 5, LeaderLeaseTimeout: time.Hour,
			CommitTimeout: time.Hour, SnapshotInterval: time.Hour, MaxRPCSize: 1 << 40, MaxInboundConns: 1 << 30}.Validate(), raftBinding.keys()},
		{autopilot.Config{}.Validate(), autopilotBinding.keys()},
		{autopilot.Config{MaxLag: 1, LastContactThreshold: time.Hour, DeadServerTimeout: time.Second}.Validate(), autopilotBinding.keys()},
		{placement.Config{}.Validate(), assignorBinding.keys()},
		{placement.Config{SessionTimeout: time.Second, HeartbeatInterval: time.Second}.Validate(), assignorBinding.keys()},
		{placement.Config{SessionTimeout: time.Second, HeartbeatInterval: 400 * time.Millisecond, GrantMargin: 700 * time.Millisecond}.Validate(), assignorBinding.keys()},
		{fence.Config{Topic: "..", TransactionalID: "x", BatchMax: 1, TrimEvery: 1, TxnTimeout: 1}.Validate(), fenceBinding.keys()},
		{fence.Config{Topic: "t", TransactionalID: "x", BatchMax: 1, TrimEvery: 1, TxnTimeout: 1,
			Security: kafkaopts.Security{TLS: kafkaopts.TLS{Files: tlsconf.Files{Key: "k"}}, SASL: kafkaopts.SASL{Mechanism: "PLAIN"}}}.Validate(), fenceBinding.keys()},
		{fence.Config{Topic: "t", TransactionalID: "x", BatchMax: 1, TrimEvery: 1, TxnTimeout: 1,
			Security: kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: "X", Username: "u"}}}.Validate(), fenceBinding.keys()},
		{succession.LeaseConfig{StaggerMillis: -1}.Validate(), leaseBinding.keys()},
		{netio.Limits{MaxConnections: -1, HealthReserve: -1, MaxHeaderBytes: -1}.Validate(), clientLimitsBinding.keys()},
	} {
		all := fielderr.All(tc.err)
		if len(all) == 0 {
			t.Fatalf("%v: no problems", tc.err)
		}
		for _, e := range all {
			e.Text(func(path string) string {
				if _, ok := tc.keys[path]; !ok {
					t.Errorf("%q: %s has no YAML key", e, path)
				}
				return path
			})
		}
	}
}

// The problems of a package's Validate are found wherever the error holds
// them and named by their keys, the settings they mention too.
func TestFromNamesTheKeys(t *testing.T) {
	sentinel := errors.New("bad")
	var l fielderr.List
	l.Add("AB", "must exceed {CD} (1 > 2)")
	l.Add("EF", "not linked")
	err := errors.Join(
		fmt.Errorf("wrapped: %w", l.Err()),
		fmt.Errorf("%w: %w", sentinel, fielderr.Errorf("CD", "must not be negative")),
	)
	var p problems
	p.from(err, map[string]string{"AB": "x.a_b", "CD": "x.c_d"})
	p.from(errors.New("no field here"), nil)
	p.from(nil, nil)
	want := problems{"x.a_b: must exceed x.c_d (1 > 2)", "ef: not linked", "x.c_d: must not be negative", "no field here"}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %q\nwant %q", p, want)
	}
}

// Each binding names every linked setting by a key of the file, and no
// key twice.
func TestBindingKeys(t *testing.T) {
	leaves := map[string]bool{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			key := join(prefix, yamlName(f))
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(f.Type, key)
			} else {
				leaves[key] = true
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
	for name, keys := range map[string]map[string]string{
		"raft": raftBinding.keys(), "autopilot": autopilotBinding.keys(), "assignor": assignorBinding.keys(),
		"fence": fenceBinding.keys(), "client limits": clientLimitsBinding.keys(), "lease": leaseBinding.keys(),
	} {
		seen := map[string]string{}
		for path, key := range keys {
			if !leaves[key] {
				t.Errorf("%s: %s is linked to %q, not a key of the file", name, path, key)
			}
			if other, dup := seen[key]; dup {
				t.Errorf("%s: %s and %s are both linked to %s", name, path, other, key)
			}
			seen[key] = path
		}
	}
	for _, tc := range []struct{ got, want string }{
		{raftBinding.keys()["MaxRPCSize"], "limits.peer.max_message_bytes"},
		{fenceBinding.keys()["Security.TLS.Files.Cert"], "kafka.tls.cert_file"},
		{assignorBinding.keys()["Assign.MaxWarmupReplicas"], "assignor.max_warmup_replicas"},
		{leaseBinding.keys()["RenewMillis"], "ha.renew"},
	} {
		if tc.got != tc.want {
			t.Errorf("linked to %q, want %q", tc.got, tc.want)
		}
	}
}
