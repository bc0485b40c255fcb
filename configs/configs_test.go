package configs

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const minimal = `node_id: n1
data_dir: ./data/n1
client_addr: 127.0.0.1:7101
peer_addr: 127.0.0.1:7201
peers:
  - {id: n1, peer_addr: 127.0.0.1:7201, client_addr: 127.0.0.1:7101}
  - {id: n2, peer_addr: 127.0.0.1:7202, client_addr: 127.0.0.1:7102}
  - {id: n3, peer_addr: 127.0.0.1:7203, client_addr: 127.0.0.1:7103}
`

func ms(n int) Duration { return Duration{time.Duration(n) * time.Millisecond} }

func mustParse(t *testing.T, s string) *Config {
	t.Helper()
	c, err := Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, s)
	}
	return c
}

func TestMinimalGetsDefaults(t *testing.T) {
	got := mustParse(t, minimal)
	want := Default()
	want.NodeID, want.DataDir = "n1", "./data/n1"
	want.ClientAddr, want.PeerAddr = "127.0.0.1:7101", "127.0.0.1:7201"
	want.Peers = []Peer{
		{"n1", "127.0.0.1:7201", "127.0.0.1:7101"},
		{"n2", "127.0.0.1:7202", "127.0.0.1:7102"},
		{"n3", "127.0.0.1:7203", "127.0.0.1:7103"},
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("got  %+v\nwant %+v", *got, want)
	}
	if got.ClusterID != "local" || got.Kafka.Topic != "xce.events" || got.Kafka.TransactionalIDPrefix != "xce" ||
		got.Log != (Log{"info", "auto"}) || len(got.Kafka.Brokers) != 0 ||
		got.Raft != (Raft{ms(200), ms(200), ms(150), ms(10), ms(30000), 65536, 8192, 10240, true, 16 << 20}) {
		t.Fatalf("defaults not applied: %+v", *got)
	}
	if s := got.Self(); s != want.Peers[0] {
		t.Fatalf("Self = %+v", s)
	}
}

func TestDefaultHasNoIdentity(t *testing.T) {
	d := Default()
	if d.NodeID != "" || d.DataDir != "" || d.ClientAddr != "" || d.PeerAddr != "" || d.Peers != nil {
		t.Fatalf("Default has identity: %+v", d)
	}
	err := d.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate(Default()) = %v, want *ValidationError", err)
	}
	want := []string{"node_id: required", "data_dir: required", "client_addr: required", "peer_addr: required", "peers: at least one peer required"}
	if !reflect.DeepEqual(ve.Problems, want) {
		t.Fatalf("problems = %q, want %q", ve.Problems, want)
	}
}

func TestNullKeepsDefault(t *testing.T) {
	c := mustParse(t, minimal+"cluster_id:\nraft:\nkafka: {topic: ~, brokers: ~}\nlog: {level: null}\n")
	d := Default()
	if c.ClusterID != d.ClusterID || c.Raft != d.Raft || c.Kafka.Topic != d.Kafka.Topic || c.Log.Level != "info" {
		t.Fatalf("nulls did not keep defaults: %+v", c)
	}
}

// validateCase edits a valid config and names the error Validate must then
// give ("" for none).
type validateCase struct {
	name string
	edit func(c *Config)
	want string // substring of the error; "" means valid
}

func checkValidate(t *testing.T, tests []validateCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, minimal)
			tt.edit(c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("no error, want %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("error %q\ndoes not contain %q", err, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 65)
	tests := []validateCase{
		{"valid", func(c *Config) {}, ""},
		{"node_id required", func(c *Config) { c.NodeID = "" }, "node_id: required"},
		{"node_id chars", func(c *Config) { c.NodeID = "n 1" }, "node_id: must be 1-64 characters of [A-Za-z0-9._-]"},
		{"node_id too long", func(c *Config) { c.NodeID = long }, "node_id: must be 1-64 characters of [A-Za-z0-9._-]"},
		{"cluster_id required", func(c *Config) { c.ClusterID = "" }, "cluster_id: required"},
		{"cluster_id chars", func(c *Config) { c.ClusterID = "a/b" }, "cluster_id: must be 1-64 characters of [A-Za-z0-9._-]"},
		{"data_dir required", func(c *Config) { c.DataDir = "" }, "data_dir: required"},
		{"data_dir blank", func(c *Config) { c.DataDir = "  " }, "data_dir: required"},

		{"client_addr required", func(c *Config) { c.ClientAddr = "" }, "client_addr: required"},
		{"client_addr missing port", func(c *Config) { c.ClientAddr = "127.0.0.1" }, "client_addr: missing port"},
		{"client_addr empty port", func(c *Config) { c.ClientAddr = "127.0.0.1:" }, "client_addr: missing port"},
		{"client_addr bad port", func(c *Config) { c.ClientAddr = "127.0.0.1:x" }, `client_addr: invalid port "x"`},
		{"client_addr port 0", func(c *Config) { c.ClientAddr = "127.0.0.1:0" }, `client_addr: invalid port "0"`},
		{"client_addr port too big", func(c *Config) { c.ClientAddr = "127.0.0.1:65536" }, `client_addr: invalid port "65536"`},
		{"client_addr signed port", func(c *Config) { c.ClientAddr = "127.0.0.1:+80" }, `client_addr: invalid port "+80"`},
		{"client_addr bad host", func(c *Config) { c.ClientAddr = "a b:80" }, `client_addr: invalid host "a b"`},
		{"client_addr empty host ok", func(c *Config) { c.ClientAddr = ":7101"; c.Peers[0].ClientAddr = ":7101"; c.Insecure = true }, ""},
		{"client_addr 0.0.0.0 ok", func(c *Config) {
			c.ClientAddr = "0.0.0.0:7101"
			c.Peers[0].ClientAddr = "0.0.0.0:7101"
			c.Insecure = true
		}, ""},
		{"client_addr 0.0.0.0 without tls", func(c *Config) { c.ClientAddr = "0.0.0.0:7101"; c.Peers[0].ClientAddr = c.ClientAddr },
			"client_addr: 0.0.0.0:7101 is reachable beyond this machine and the client port has no TLS"},
		{"client_addr 0.0.0.0 with tls", func(c *Config) {
			c.ClientAddr = "0.0.0.0:7101"
			c.Peers[0].ClientAddr = c.ClientAddr
			c.TLS.CertFile, c.TLS.KeyFile = "n1.pem", "n1-key.pem"
		}, ""},
		{"peer_addr beyond loopback without tls", func(c *Config) { c.PeerAddr = "198.51.100.1:7201"; c.Peers[0].PeerAddr = c.PeerAddr },
			"peer_addr: 198.51.100.1:7201 is reachable beyond this machine and the peer port has no TLS"},
		{"peer_tls partial", func(c *Config) { c.PeerTLS.CAFile = "ca.pem" }, "peer_tls: ca_file, cert_file and key_file are set together"},
		{"client_auth required needs a CA", func(c *Config) {
			c.TLS.CertFile, c.TLS.KeyFile, c.TLS.ClientAuth = "n1.pem", "n1-key.pem", "required"
		}, "tls.ca_file: required when client_auth is required"},
		{"client_auth bad", func(c *Config) { c.TLS.ClientAuth = "maybe" }, "tls.client_auth"},
		{"anonymous writer refused", func(c *Config) { c.Auth.Anonymous = "writer" }, "auth.anonymous"},
		{"client_addr ipv6 ok", func(c *Config) { c.ClientAddr = "[::1]:7101"; c.Peers[0].ClientAddr = "[::1]:7101" }, ""},
		{"client_addr hostname ok", func(c *Config) {
			c.ClientAddr = "node-1.example.com:7101"
			c.Peers[0].ClientAddr = c.ClientAddr
			c.Insecure = true
		}, ""},
		{"peer_addr empty host", func(c *Config) { c.PeerAddr = ":7201" }, "peer_addr: empty host"},
		{"peer_addr missing port", func(c *Config) { c.PeerAddr = "localhost" }, "peer_addr: missing port"},
		{"peer_addr unspecified", func(c *Config) { c.PeerAddr = "0.0.0.0:7201" }, `peer_addr: host "0.0.0.0" is unspecified`},
		{"peer_addr ipv6 no brackets", func(c *Config) { c.PeerAddr = "::1:7201" }, `peer_addr: invalid address "::1:7201" (write IPv6 hosts in brackets`},
		{"client_addr equals peer_addr", func(c *Config) { c.ClientAddr = c.PeerAddr }, `client_addr: must differ from peer_addr (both are "127.0.0.1:7201")`},

		{"peers empty", func(c *Config) { c.Peers = nil }, "peers: at least one peer required"},
		{"peer id required", func(c *Config) { c.Peers[1].ID = "" }, "peers[1].id: required"},
		{"peer id chars", func(c *Config) { c.Peers[1].ID = "n 2" }, "peers[1].id: must be 1-64 characters of [A-Za-z0-9._-]"},
		{"peer id duplicate", func(c *Config) { c.Peers[2].ID = "n1" }, `peers[2].id: duplicate id "n1" (also peers[0])`},
		{"peer peer_addr missing port", func(c *Config) { c.Peers[2].PeerAddr = "127.0.0.1" }, "peers[2].peer_addr: missing port"},
		{"peer peer_addr empty host", func(c *Config) { c.Peers[2].PeerAddr = ":7203" }, "peers[2].peer_addr: empty host"},
		{"peer client_addr bad port", func(c *Config) { c.Peers[2].ClientAddr = "127.0.0.1:x" }, `peers[2].client_addr: invalid port "x"`},
		{"peer peer_addr duplicate", func(c *Config) { c.Peers[2].PeerAddr = "127.0.0.1:7201" }, `peers[2].peer_addr: duplicate address "127.0.0.1:7201" (also peers[0].peer_addr)`},
		{"peer client_addr duplicate", func(c *Config) { c.Peers[1].ClientAddr = "127.0.0.1:7103" }, `peers[2].client_addr: duplicate address "127.0.0.1:7103" (also peers[1].client_addr)`},
		{"peer client_addr clashes with peer_addr", func(c *Config) { c.Peers[1].ClientAddr = "127.0.0.1:7201" }, `peers[1].client_addr: duplicate address "127.0.0.1:7201" (also peers[0].peer_addr)`},
		{"node not in peers", func(c *Config) { c.NodeID = "n4" }, `peers: node_id "n4" is not in the list`},
		{"self peer_addr mismatch", func(c *Config) { c.PeerAddr = "127.0.0.1:7299" }, `peers[0].peer_addr: this node's entry has "127.0.0.1:7201" but top-level peer_addr is "127.0.0.1:7299"; they must be equal`},
		{"self client_addr mismatch", func(c *Config) { c.NodeID, c.PeerAddr = "n2", "127.0.0.1:7202" }, `peers[1].client_addr: this node's entry has "127.0.0.1:7102" but top-level client_addr is "127.0.0.1:7101"; they must be equal`},
		{"even voters allowed", func(c *Config) { c.Peers = c.Peers[:2] }, ""},
		{"single voter", func(c *Config) { c.Peers = c.Peers[:1] }, ""},

		{"heartbeat zero", func(c *Config) { c.Raft.HeartbeatTimeout = ms(0) }, "raft.heartbeat_timeout: must be positive (got 0s)"},
		{"election negative", func(c *Config) { c.Raft.ElectionTimeout = ms(-1000) }, "raft.election_timeout: must be positive (got -1s)"},
		{"lease zero", func(c *Config) { c.Raft.LeaderLeaseTimeout = ms(0) }, "raft.leader_lease_timeout: must be positive"},
		{"commit zero", func(c *Config) { c.Raft.CommitTimeout = ms(0) }, "raft.commit_timeout: must be positive"},
		{"snapshot_interval zero", func(c *Config) { c.Raft.SnapshotInterval = ms(0) }, "raft.snapshot_interval: must be positive"},
		{"commit below 5ms", func(c *Config) { c.Raft.CommitTimeout = ms(1) }, "raft.commit_timeout: must be at least 5ms (got 1ms)"},
		{"heartbeat below 5ms", func(c *Config) { c.Raft.HeartbeatTimeout = ms(4) }, "raft.heartbeat_timeout: must be at least 5ms (got 4ms)"},
		{"snapshot_interval below 5ms", func(c *Config) { c.Raft.SnapshotInterval = ms(2) }, "raft.snapshot_interval: must be at least 5ms (got 2ms)"},
		{"all at 5ms", func(c *Config) {
			c.Raft = Raft{ms(5), ms(5), ms(5), ms(5), ms(5), 1, 0, 0, false, 1 << 20}
		}, ""},
		{"election below heartbeat", func(c *Config) { c.Raft.HeartbeatTimeout = ms(300) }, "raft.election_timeout: must not be less than raft.heartbeat_timeout (200ms < 300ms)"},
		{"lease above heartbeat", func(c *Config) { c.Raft.HeartbeatTimeout = ms(100) }, "raft.leader_lease_timeout: must not exceed raft.heartbeat_timeout (150ms > 100ms)"},
		{"commit above heartbeat", func(c *Config) { c.Raft.CommitTimeout = ms(300) }, "raft.commit_timeout: must not exceed raft.heartbeat_timeout (300ms > 200ms)"},
		{"snapshot_threshold zero", func(c *Config) { c.Raft.SnapshotThreshold = 0 }, "raft.snapshot_threshold: must be at least 1"},
		{"log_segment_size too small", func(c *Config) { c.Raft.LogSegmentSize = 4096 }, "raft.log_segment_size: must be between 1048576 (1 MiB) and 1073741824 (1 GiB) bytes (got 4096)"},
		{"trailing_logs zero ok", func(c *Config) { c.Raft.TrailingLogs = 0 }, ""},

		{"log level unknown", func(c *Config) { c.Log.Level = "verbose" }, `log.level: must be one of trace, debug, info, warn, error (got "verbose")`},
		{"log level case", func(c *Config) { c.Log.Level = "INFO" }, `log.level: must be one of trace, debug, info, warn, error (got "INFO")`},
		{"log level empty", func(c *Config) { c.Log.Level = "" }, `log.level: must be one of trace, debug, info, warn, error (got "")`},
		{"log format unknown", func(c *Config) { c.Log.Format = "xml" }, `log.format: must be one of json, console, auto (got "xml")`},

		{"brokers ok", func(c *Config) { c.Kafka.Brokers = []string{"k1:9092", "10.0.0.2:9092", "[::1]:9092"} }, ""},
		{"broker missing port", func(c *Config) { c.Kafka.Brokers = []string{"k1:9092", "k2"} }, "kafka.brokers[1]: missing port"},
		{"broker empty host", func(c *Config) { c.Kafka.Brokers = []string{":9092"} }, "kafka.brokers[0]: empty host"},
		{"broker empty", func(c *Config) { c.Kafka.Brokers = []string{""} }, "kafka.brokers[0]: required"},
		{"broker bad port", func(c *Config) { c.Kafka.Brokers = []string{"k1:kafka"} }, `kafka.brokers[0]: invalid port "kafka"`},
		{"topic required", func(c *Config) { c.Kafka.Topic = "" }, "kafka.topic: required"},
		{"topic chars", func(c *Config) { c.Kafka.Topic = "xce events" }, "kafka.topic: must be 1-249 characters of [A-Za-z0-9._-]"},
		{"topic too long", func(c *Config) { c.Kafka.Topic = strings.Repeat("t", 250) }, "kafka.topic: must be 1-249 characters of [A-Za-z0-9._-]"},
		{"topic max length ok", func(c *Config) { c.Kafka.Topic = strings.Repeat("t", 249) }, ""},
		{"topic dotdot", func(c *Config) { c.Kafka.Topic = ".." }, `kafka.topic: must not be "." or ".."`},
		{"tx prefix required", func(c *Config) { c.Kafka.TransactionalIDPrefix = "" }, "kafka.transactional_id_prefix: required"},
		{"tx prefix chars", func(c *Config) { c.Kafka.TransactionalIDPrefix = "x/y" }, "kafka.transactional_id_prefix: must be 1-64 characters of [A-Za-z0-9._-]"},
	}
	checkValidate(t, tests)
}

func TestValidateCollectsAll(t *testing.T) {
	c := mustParse(t, minimal)
	c.DataDir, c.Log.Format, c.Raft.SnapshotThreshold = "", "xml", 0
	var ve *ValidationError
	if err := c.Validate(); !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("got %v, want 3 problems", err)
	}
	if got := ve.Error(); !strings.Contains(got, "data_dir: required; raft.snapshot_threshold") {
		t.Fatalf("Error() = %q", got)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "file is empty"},
		{"comments only", "# nothing here\n\n", "file is empty"},
		{"null document", "~\n", "file has no settings"},
		{"empty document marker", "---\n", "file has no settings"},
		{"list", "- node_id: n1\n", "expected a mapping of settings, got a list at line 1"},
		{"scalar", "hello\n", `expected a mapping of settings, got "hello" at line 1`},
		{"syntax", "node_id: [n1\n", "yaml syntax error: line"},
		{"tabs", "raft:\n\theartbeat_timeout: 1s\n", "yaml syntax error: line 2"},
		{"two documents", minimal + "---\nnode_id: n2\n", "more than one YAML document"},
		{"unknown top-level key", "node_id: n1\ndata_dir: d\nfoo: 1\n", `unknown key "foo" at line 3`},
		{"unknown key suggestion", "nodeid: n1\n", `unknown key "nodeid" at line 1 (did you mean "node_id")`},
		{"unknown nested key", "raft: {heartbeat_timout: 1s}\n", `raft: unknown key "heartbeat_timout" at line 1 (did you mean "heartbeat_timeout")`},
		{"unknown nested block key", minimal + "log:\n  level: info\n  colour: true\n", `log: unknown key "colour" at line 11`},
		{"unknown peer key", minimal + "  - {id: n4, addr: x}\n", `peers[3]: unknown key "addr" at line 9`},
		{"unknown key null value", minimal + "kafka:\n  brokerz:\n", `kafka: unknown key "brokerz" at line 10`},
		{"duplicate key", minimal + "node_id: n2\n", `duplicate key "node_id" at line 9 (first at line 1)`},
		{"duplicate nested key", "raft: {commit_timeout: 10ms, commit_timeout: 20ms}\n", `raft: duplicate key "commit_timeout" at line 1`},
		{"section not a mapping", "raft: 5\n", `raft: expected a mapping, got "5" at line 1`},
		{"peers not a list", "peers: {id: n1}\n", "peers: expected a list, got a mapping at line 1"},
		{"peer not a mapping", "peers: [n1]\n", `peers[0]: expected a mapping, got "n1" at line 1`},
		{"string not a list", "node_id: [n1]\n", "node_id: expected a string, got a list at line 1"},
		{"brokers scalar", "kafka: {brokers: k1:9092}\n", "kafka.brokers: expected a list, got \"k1:9092\" at line 1"},
		{"negative uint", "raft: {snapshot_threshold: -1}\n", `raft.snapshot_threshold: expected a non-negative integer, got "-1" at line 1`},
		{"text bool", "raft: {detect_leader_exit: maybe}\n", `raft.detect_leader_exit: expected bool, got "maybe" at line 1`},
		{"text uint", "raft: {trailing_logs: lots}\n", `raft.trailing_logs: expected a non-negative integer, got "lots" at line 1`},
		{"duration without unit", "raft:\n  heartbeat_timeout: 200\n", `raft.heartbeat_timeout: expected a duration such as "150ms" or "1s", got "200" at line 2`},
		{"duration text", "raft: {commit_timeout: fast}\n", `raft.commit_timeout: expected a duration such as "150ms" or "1s", got "fast" at line 1`},
		{"duration mapping", "raft: {commit_timeout: {ms: 5}}\n", `raft.commit_timeout: expected a duration such as "150ms" or "1s", got a mapping at line 1`},
		{"validation after decode", strings.Replace(minimal, "127.0.0.1:7203,", "127.0.0.1,", 1), "peers[2].peer_addr: missing port"},
		{"lease example", minimal + "raft: {heartbeat_timeout: 100ms}\n", "raft.leader_lease_timeout: must not exceed raft.heartbeat_timeout (150ms > 100ms)"},
		{"bad merge", "raft: {<<: 5}\n", `raft: expected a mapping, got "5" at line 1`},
		{"unknown key in merge", "raft: {<<: {foo: 1}}\n", `raft: unknown key "foo" at line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("no error, want %q; got %+v", tt.want, c)
			}
			if c != nil {
				t.Fatalf("non-nil config with error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q\ndoes not contain %q", err, tt.want)
			}
			if msg := err.Error(); msg != strings.TrimRight(msg, ".!") || strings.ToLower(msg[:1]) != msg[:1] {
				t.Fatalf("error %q should start lowercase and have no trailing punctuation", msg)
			}
		})
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	c := mustParse(t, minimal+`raft:
  <<: {heartbeat_timeout: 300ms, commit_timeout: 20ms}
  election_timeout: 400ms
  commit_timeout: 30ms
kafka:
  brokers: &b [k1:9092, k2:9092]
`)
	if c.Raft.HeartbeatTimeout != ms(300) || c.Raft.ElectionTimeout != ms(400) || c.Raft.CommitTimeout != ms(30) || len(c.Kafka.Brokers) != 2 {
		t.Fatalf("merge/anchor not applied: %+v %+v", c.Raft, c.Kafka)
	}
}

func TestDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"150ms": 150 * time.Millisecond, "1s": time.Second, "1m30s": 90 * time.Second,
		"1.5s": 1500 * time.Millisecond, `"250ms"`: 250 * time.Millisecond, "2h": 2 * time.Hour,
	} {
		c := mustParse(t, minimal+"raft: {snapshot_interval: "+in+"}\n")
		if got := c.Raft.SnapshotInterval; got.D() != want || got.Duration != want {
			t.Errorf("%s: got %v, want %v", in, got, want)
		}
	}
	// Marshals back the same way, in YAML and JSON.
	out, err := yaml.Marshal(Default().Raft)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "heartbeat_timeout: 200ms\n") || !strings.Contains(string(out), "snapshot_interval: 30s\n") {
		t.Fatalf("yaml.Marshal:\n%s", out)
	}
	var back Raft
	if err := yaml.Unmarshal(out, &back); err != nil || back != Default().Raft {
		t.Fatalf("yaml round trip: %+v %v", back, err)
	}
	j, err := json.Marshal(ms(150))
	if err != nil || string(j) != `"150ms"` {
		t.Fatalf("json.Marshal = %s %v", j, err)
	}
	var d Duration
	if err := json.Unmarshal([]byte(`"1s"`), &d); err != nil || d.D() != time.Second {
		t.Fatalf("json.Unmarshal = %v %v", d, err)
	}
	if err := d.UnmarshalText([]byte("200")); err == nil || !strings.Contains(err.Error(), `invalid duration "200"`) {
		t.Fatalf("UnmarshalText(200) = %v", err)
	}
}

func TestValidID(t *testing.T) {
	for s, want := range map[string]bool{
		"n1": true, "node-1.prod_a": true, "A": true, strings.Repeat("x", 64): true,
		"": false, strings.Repeat("x", 65): false, "n 1": false, "n/1": false, "nœud": false, "n:1": false,
	} {
		if got := ValidID(s); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestSelf(t *testing.T) {
	c := mustParse(t, strings.Replace(strings.Replace(minimal, "node_id: n1", "node_id: n2", 1),
		"client_addr: 127.0.0.1:7101\npeer_addr: 127.0.0.1:7201", "client_addr: 127.0.0.1:7102\npeer_addr: 127.0.0.1:7202", 1))
	if s := c.Self(); s != (Peer{"n2", "127.0.0.1:7202", "127.0.0.1:7102"}) {
		t.Fatalf("Self = %+v", s)
	}
	c.NodeID = "n9"
	if s := c.Self(); s != (Peer{"n9", "127.0.0.1:7202", "127.0.0.1:7102"}) {
		t.Fatalf("Self without entry = %+v", s)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", minimal)
	if c, err := Load(good); err != nil || c.NodeID != "n1" {
		t.Fatalf("Load(good) = %+v, %v", c, err)
	}
	bad := write("n1.yaml", strings.Replace(minimal, "127.0.0.1:7203,", "127.0.0.1,", 1))
	if _, err := Load(bad); err == nil || err.Error() != "config "+bad+": peers[2].peer_addr: missing port" {
		t.Fatalf("Load(bad) = %v", err)
	} else if ve := (*ValidationError)(nil); !errors.As(err, &ve) {
		t.Fatalf("Load(bad) does not wrap *ValidationError: %v", err)
	}
	if _, err := Load(write("empty.yaml", "")); err == nil || !strings.HasSuffix(err.Error(), "empty.yaml: file is empty") {
		t.Fatalf("Load(empty) = %v", err)
	}
	if _, err := Load(dir); err == nil || err.Error() != "config "+dir+": is a directory, want a YAML file" {
		t.Fatalf("Load(dir) = %v", err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "config "+missing+": ") {
		t.Fatalf("Load(missing) = %v", err)
	}
}

func TestExampleConfigs(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[string]*Config{}
	for _, f := range files {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		loaded[f] = c
		if !strings.HasPrefix(c.DataDir, "./data/") || len(c.Kafka.Brokers) != 0 || c.Log != (Log{"info", "auto"}) || c.ClusterID != "local" {
			t.Errorf("%s: unexpected settings %+v", f, c)
		}
		if c.Raft != Default().Raft {
			t.Errorf("%s: raft timings %+v differ from the defaults", f, c.Raft)
		}
		if c.Limits != Default().Limits {
			t.Errorf("%s: limits %+v differ from the defaults", f, c.Limits)
		}
	}
	for _, f := range []string{"n1.yaml", "n2.yaml", "n3.yaml", "single.yaml"} {
		if loaded[f] == nil {
			t.Fatalf("example %s missing or invalid", f)
		}
	}
	n1 := loaded["n1.yaml"]
	for i, f := range []string{"n1.yaml", "n2.yaml", "n3.yaml"} {
		c := loaded[f]
		if !reflect.DeepEqual(c.Peers, n1.Peers) || len(c.Peers) != 3 {
			t.Errorf("%s: peers differ from n1.yaml", f)
		}
		if want := (Peer{"n" + string(rune('1'+i)), "127.0.0.1:720" + string(rune('1'+i)), "127.0.0.1:710" + string(rune('1'+i))}); c.Self() != want || c.DataDir != "./data/"+want.ID {
			t.Errorf("%s: self %+v data %s, want %+v", f, c.Self(), c.DataDir, want)
		}
	}
	if s := loaded["single.yaml"]; len(s.Peers) != 1 || s.Self() != (Peer{"n1", "127.0.0.1:7200", "127.0.0.1:7100"}) || s.DataDir != "./data/single" {
		t.Errorf("single.yaml: %+v", s)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		minimal,
		"",
		"~",
		"- a\n",
		"raft: {heartbeat_timout: 1s}\n",
		"raft: &r {<<: *r}\n",
		"a: &a [*a]\n",
		"peers: [&p {id: n1}, *p, {<<: *p, id: n2}]\n",
		"raft: {snapshot_threshold: -1, commit_timeout: 1ms}\nkafka: {brokers: [':1', 'x:0']}\n",
		"node_id: n1\n---\nnode_id: n2\n",
		"{",
	} {
		f.Add([]byte(s))
	}
	if files, _ := filepath.Glob("*.yaml"); len(files) > 0 {
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if (c == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", c, err)
		}
		if c != nil {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed config does not validate: %v", err)
			}
		}
	})
}

func TestKafkaExampleConfigs(t *testing.T) {
	for _, f := range []string{"kafka/n1.yaml", "kafka/n2.yaml"} {
		c, err := Load(f)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if c.HA.Backend != BackendKafka || len(c.Kafka.Brokers) != 1 || c.HA != (HA{BackendKafka, c.HA.Lease, c.HA.Renew, c.HA.Stagger}) ||
			c.HA.Lease.Duration != Default().HA.Lease.Duration || c.HA.Stagger.Duration != Default().HA.Stagger.Duration {
			t.Errorf("%s: unexpected settings %+v", f, c.HA)
		}
	}
}

func TestDetectLeaderExitCanBeTurnedOff(t *testing.T) {
	if !mustParse(t, minimal).Raft.DetectLeaderExit {
		t.Fatal("detect_leader_exit should default to true")
	}
	if mustParse(t, minimal+"raft: {detect_leader_exit: false}\n").Raft.DetectLeaderExit {
		t.Fatal("detect_leader_exit: false was not applied")
	}
}

func TestValidateLimits(t *testing.T) {
	tests := []validateCase{
		{"defaults", func(c *Config) {}, ""},
		{"client max_connections zero", func(c *Config) { c.Limits.Client.MaxConnections = 0 }, "limits.client.max_connections: must be between 1 and 1048576 (got 0)"},
		{"client max_connections one", func(c *Config) { c.Limits.Client.MaxConnections = 1 }, ""},
		{"client max_connections huge", func(c *Config) { c.Limits.Client.MaxConnections = 1<<20 + 1 }, "limits.client.max_connections: must be between 1 and 1048576"},
		{"health_reserve zero ok", func(c *Config) { c.Limits.Client.HealthReserve = 0 }, ""},
		{"health_reserve negative", func(c *Config) { c.Limits.Client.HealthReserve = -1 }, "limits.client.health_reserve: must be between 0 and 1024 (got -1)"},
		{"read_header_timeout too short", func(c *Config) { c.Limits.Client.ReadHeaderTimeout = ms(50) }, "limits.client.read_header_timeout: must be between 100ms and 1h0m0s (got 50ms)"},
		{"read_timeout zero", func(c *Config) { c.Limits.Client.ReadTimeout = ms(0) }, "limits.client.read_timeout: must be between 100ms and 1h0m0s (got 0s)"},
		{"write_timeout too long", func(c *Config) { c.Limits.Client.WriteTimeout = Duration{2 * time.Hour} }, "limits.client.write_timeout: must be between 100ms and 1h0m0s (got 2h0m0s)"},
		{"client idle_timeout too short", func(c *Config) { c.Limits.Client.IdleTimeout = ms(500) }, "limits.client.idle_timeout: must be between 1s and 24h0m0s (got 500ms)"},
		{"max_header_bytes too small", func(c *Config) { c.Limits.Client.MaxHeaderBytes = 1000 }, "limits.client.max_header_bytes: must be between 4096 and 16777216 (got 1000)"},
		{"peer max_connections below 8 per voter", func(c *Config) { c.Limits.Peer.MaxConnections = 15 }, "limits.peer.max_connections: must be at least 16, 8 for each other voter (got 15)"},
		{"peer max_connections single node", func(c *Config) { c.Peers = c.Peers[:1]; c.Limits.Peer.MaxConnections = 8 }, ""},
		{"peer max_connections single node too few", func(c *Config) { c.Peers = c.Peers[:1]; c.Limits.Peer.MaxConnections = 7 }, "limits.peer.max_connections: must be at least 8"},
		{"peer max_message_bytes too small for an assignment", func(c *Config) { c.Limits.Peer.MaxMessageBytes = 16 << 20 },
			"limits.peer.max_message_bytes: must be at least 17825792 (got 16777216): a message carrying the largest entry, an assignment of up to 16 MiB, must fit"},
		{"peer max_message_bytes at the floor", func(c *Config) { c.Limits.Peer.MaxMessageBytes = 17 << 20 }, ""},
		{"peer max_message_bytes too big", func(c *Config) { c.Limits.Peer.MaxMessageBytes = 2 << 30 }, "limits.peer.max_message_bytes: must be between 17825792 and 1073741824"},
		{"first_byte_timeout zero", func(c *Config) { c.Limits.Peer.FirstByteTimeout = ms(0) }, "limits.peer.first_byte_timeout: must be between 100ms and 1h0m0s (got 0s)"},
		{"peer read_timeout too short", func(c *Config) { c.Limits.Peer.ReadTimeout = ms(50) }, "limits.peer.read_timeout: must be between 100ms and 1h0m0s (got 50ms)"},
		{"peer read_timeout below the RPC timeout ok", func(c *Config) { c.Limits.Peer.ReadTimeout = ms(900) }, ""},
		{"peer idle_timeout below a minute", func(c *Config) { c.Limits.Peer.IdleTimeout = Duration{30 * time.Second} },
			"limits.peer.idle_timeout: must be between 1m0s and 24h0m0s (got 30s)"},
		{"long heartbeats keep the defaults valid", func(c *Config) {
			c.Raft.HeartbeatTimeout, c.Raft.ElectionTimeout = Duration{30 * time.Second}, Duration{30 * time.Second}
		}, ""},
	}
	checkValidate(t, tests)
}

// The limits section parses strictly like every other, and a partial one
// keeps the other defaults.
func TestParseLimits(t *testing.T) {
	c := mustParse(t, minimal+`limits:
  client: {max_connections: 64, read_timeout: 2s}
  peer:
    max_message_bytes: 20971520
`)
	want := Default().Limits
	want.Client.MaxConnections, want.Client.ReadTimeout = 64, Duration{2 * time.Second}
	want.Peer.MaxMessageBytes = 20 << 20
	if c.Limits != want {
		t.Fatalf("limits %+v\nwant %+v", c.Limits, want)
	}
	for in, msg := range map[string]string{
		"limits: {client: {max_conections: 5}}\n":     `limits.client: unknown key "max_conections" at line 9 (did you mean "max_connections")`,
		"limits: {client: {max_connections: many}}\n": `limits.client.max_connections: expected an integer, got "many" at line 9`,
		"limits: {peer: {idle_timeout: 600}}\n":       `limits.peer.idle_timeout: expected a duration such as "150ms" or "1s", got "600" at line 9`,
		"limits: {server: {}}\n":                      `limits: unknown key "server" at line 9`,
	} {
		if _, err := Parse([]byte(minimal + in)); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: error %v, want %q", in, err, msg)
		}
	}
}
