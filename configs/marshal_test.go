package configs

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A config written by Marshal loads back equal, and carries only what
// differs from the defaults.
func TestMarshalRoundTrip(t *testing.T) {
	dir := t.TempDir()
	base := func() Config {
		c := Default()
		c.NodeID, c.ClusterID, c.DataDir = "n1", "rt", filepath.Join(dir, "data")
		c.ClientAddr, c.PeerAddr = "127.0.0.1:7101", "127.0.0.1:7201"
		c.Peers = []Peer{{"n1", "127.0.0.1:7201", "127.0.0.1:7101"}, {"n2", "127.0.0.1:7202", "127.0.0.1:7102"}, {"n3", "127.0.0.1:7203", "127.0.0.1:7103"}}
		return c
	}
	cases := map[string]func(*Config){
		"defaults": func(*Config) {},
		"raft timings": func(c *Config) {
			c.Raft.HeartbeatTimeout = Duration{400 * time.Millisecond}
			c.Raft.ElectionTimeout = Duration{1500 * time.Millisecond}
			c.Raft.DetectLeaderExit = false
			c.Raft.LogSegmentSize = 1 << 20
		},
		"kafka backend": func(c *Config) {
			c.HA = HA{Backend: BackendKafka, Lease: Duration{2 * time.Second}, Renew: Duration{600 * time.Millisecond}, Stagger: Duration{time.Second}}
			c.Kafka.Brokers = []string{"127.0.0.1:9092", "127.0.0.1:9093"}
		},
		"limits and log": func(c *Config) {
			c.Limits.Client.ReadTimeout = Duration{2 * time.Second}
			c.Limits.Peer.MaxMessageBytes = 64 << 20
			c.Log = Log{Level: "debug", Format: "json"}
			c.PeerListenAddr = "127.0.0.2:7201"
			c.Assignor.NumStandbyReplicas = 1
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			want := base()
			change(&want)
			b, err := Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := WriteFile(path, &want); err != nil {
				t.Fatal(err)
			}
			got, err := Load(path)
			if err != nil {
				t.Fatalf("load: %v\n%s", err, b)
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("round trip differs:\n got %+v\nwant %+v\n%s", *got, want, b)
			}
		})
	}
	c := base()
	b, err := Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"raft", "limits", "assignor", "ha", "brokers", "log"} {
		if strings.Contains(string(b), absent+":") {
			t.Errorf("default section %q written:\n%s", absent, b)
		}
	}
}
