package configs

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/ha/autopilot"
)

const joiner = `node_id: n4
data_dir: ./data/n4
client_addr: 127.0.0.1:7104
peer_addr: 127.0.0.1:7204
`

// A joining node lists members' client addresses, and its peers list is
// empty or names only itself; raft then starts without bootstrapping.
func TestJoin(t *testing.T) {
	for _, yaml := range []string{
		joiner + "join: [127.0.0.1:7101, 'node-2.example.com:7102']\n",
		joiner + "join: [127.0.0.1:7101]\npeers: [{id: n4, peer_addr: 127.0.0.1:7204, client_addr: 127.0.0.1:7104}]\n",
	} {
		c := mustParse(t, yaml)
		if len(c.Join) == 0 || !c.RaftConfig().Join {
			t.Errorf("join %v, raft Join %v", c.Join, c.RaftConfig().Join)
		}
		if s := c.Self(); s.ID != "n4" || s.PeerAddr != "127.0.0.1:7204" || s.ClientAddr != "127.0.0.1:7104" {
			t.Errorf("Self() = %+v", s)
		}
	}
	if c := mustParse(t, minimal); c.RaftConfig().Join || c.Join != nil {
		t.Errorf("a node without join: %v, %v", c.Join, c.RaftConfig().Join)
	}
}

func TestJoinValidation(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"no peers, no join", joiner, []string{"peers: at least one peer required"}},
		{"bad address", joiner + "join: [nohost, '0.0.0.0:7101', '127.0.0.1:0']\n", []string{
			"join[0]: missing port", `join[1]: host "0.0.0.0" is unspecified`, `join[2]: invalid port "0"`}},
		{"duplicate", joiner + "join: [127.0.0.1:7101, 127.0.0.1:7101]\n", []string{`join[1]: duplicate address "127.0.0.1:7101" (also join[0])`}},
		{"itself", joiner + "join: [127.0.0.1:7104]\n", []string{`join[0]: "127.0.0.1:7104" is this node's own client_addr`}},
		{"other peers", joiner + "join: [127.0.0.1:7101]\npeers: [{id: n4, peer_addr: 127.0.0.1:7204, client_addr: 127.0.0.1:7104}, {id: n1, peer_addr: 127.0.0.1:7201, client_addr: 127.0.0.1:7101}]\n",
			[]string{"peers: with join, list only this node or nothing: a joining node learns the members from the cluster (got 2 peers)"}},
		{"kafka", joiner + "join: [127.0.0.1:7101]\nha: {backend: kafka}\nkafka: {brokers: [127.0.0.1:9092]}\n", []string{"join: needs ha.backend raft"}},
		{"not a list", joiner + "join: 127.0.0.1:7101\n", []string{"join: expected a list"}},
	} {
		_, err := Parse([]byte(tc.yaml))
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			found := false
			for _, p := range ve.Problems {
				found = found || strings.Contains(p, w)
			}
			if !found {
				t.Errorf("%s: problems %q lack %q", tc.name, ve.Problems, w)
			}
		}
	}
}

// The autopilot section reaches autopilot.Config, and its rules are
// autopilot's, named by their keys.
func TestAutopilotSection(t *testing.T) {
	c := mustParse(t, minimal+`autopilot: {stabilization_time: 30s, max_lag: 100, last_contact_threshold: 500ms,
  cleanup_dead_servers: true, dead_server_timeout: 5m}
`)
	want := autopilot.Config{StabilizationTime: 30 * time.Second, MaxLag: 100, LastContactThreshold: 500 * time.Millisecond,
		CleanupDeadServers: true, DeadServerTimeout: 5 * time.Minute}
	if got := c.AutopilotConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("AutopilotConfig %+v, want %+v", got, want)
	}
	_, err := Parse([]byte(minimal + "autopilot: {max_lag: 0, last_contact_threshold: 10s, dead_server_timeout: 5s, stabilization_time: -1s}\n"))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("bad autopilot section: %v", err)
	}
	wantProblems := []string{
		"autopilot.stabilization_time: must be between 0s and 24h0m0s (got -1s)",
		"autopilot.max_lag: must be between 1 and 1099511627776 (got 0)",
		"autopilot.dead_server_timeout: must not be less than autopilot.last_contact_threshold (5s < 10s)",
	}
	if !reflect.DeepEqual(ve.Problems, wantProblems) {
		t.Errorf("problems\n%q\nwant\n%q", ve.Problems, wantProblems)
	}
}
