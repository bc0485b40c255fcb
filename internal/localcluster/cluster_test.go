package localcluster

import (
	"reflect"
	"testing"
	"time"

	"github.com/xce/xce/configs"
)

// The configs New writes load back as the values Config returns, with
// every node's identity, the layout and the caller's changes.
func TestNewWritesLoadableConfigs(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{Exe: "xce", Dir: dir, N: 3, ClusterID: "lc", BasePort: 7300, PidFiles: true,
		Configure: func(cfg *configs.Config) {
			cfg.Raft.ElectionTimeout = configs.Duration{Duration: 400 * time.Millisecond}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes {
		got, err := configs.Load(n.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if want := c.Config(i); !reflect.DeepEqual(*got, want) {
			t.Errorf("%s: loaded %+v, want %+v", n.ID, *got, want)
		}
		if got.NodeID != n.ID || got.ClientAddr != "127.0.0.1:730"+string(rune('1'+i)) || got.PeerAddr != "127.0.0.1:740"+string(rune('1'+i)) ||
			len(got.Peers) != 3 || got.Raft.ElectionTimeout.D() != 400*time.Millisecond || got.Log.Format != "json" {
			t.Errorf("%s: %+v", n.ID, got)
		}
		if n.PidFile == "" || n.LogPath == "" || n.DataDir == "" {
			t.Errorf("%s: layout %+v", n.ID, n)
		}
	}
}
