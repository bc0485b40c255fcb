package backup_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/xce/xce/backup"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// writeBackup writes a backup of f at index, term to a file.
func writeBackup(t *testing.T, f *state.FSM, term uint64) string {
	t.Helper()
	file, err := backup.Marshal("old", f.AppliedIndex(), term, snapshotBytes(t, f))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "b.xce")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// node is one member of a restored cluster, run in process over real
// storage and a real transport.
type node struct {
	cfg   *configs.Config
	ln    net.Listener
	fsm   *state.FSM
	store *persist.Store
	r     *raftha.Raft
}

// threeConfigs returns the configs of a new 3-node cluster "new" with data
// dirs under a temp dir, and their peer listeners.
func threeConfigs(t *testing.T) ([]*configs.Config, []net.Listener) {
	dir := t.TempDir()
	var lns []net.Listener
	var peers []configs.Peer
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns = append(lns, ln)
		peers = append(peers, configs.Peer{ID: "n" + string(rune('1'+i)), PeerAddr: ln.Addr().String(), ClientAddr: "127.0.0.1:1"})
	}
	var cfgs []*configs.Config
	for i := range 3 {
		c := configs.Default()
		c.NodeID, c.ClusterID, c.Peers = peers[i].ID, "new", peers
		c.PeerAddr = peers[i].PeerAddr
		c.DataDir = filepath.Join(dir, c.NodeID)
		c.Raft.HeartbeatTimeout = configs.Duration{Duration: 100 * time.Millisecond}
		c.Raft.ElectionTimeout = configs.Duration{Duration: 100 * time.Millisecond}
		c.Raft.LeaderLeaseTimeout = configs.Duration{Duration: 100 * time.Millisecond}
		cfgs = append(cfgs, &c)
	}
	return cfgs, lns
}

func start(t *testing.T, cfg *configs.Config, ln net.Listener) *node {
	t.Helper()
	store, err := persist.Open(cfg.DataDir, persist.Options{NodeID: cfg.NodeID, ClusterID: cfg.ClusterID})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := peernet.NewStreamLayer(ln, cfg.PeerAddr, "")
	if err != nil {
		t.Fatal(err)
	}
	n := &node{cfg: cfg, ln: ln, fsm: state.NewFSM(cfg.ClusterID), store: store}
	n.r, err = raftha.Start(cfg.RaftConfig(), n.fsm, store, stream, hclog.NewNullLogger())
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.r.Shutdown()
		store.Close()
	})
	return n
}

// A backup restored into three empty data dirs starts as a new cluster:
// it elects, holds every task of the backup at the installed index, and
// writes after it. With a floor above the backup's index (the topic's last
// event), the snapshot and the state's applied index are at the floor.
func TestRestoreStartsACluster(t *testing.T) {
	for _, floor := range []uint64{0, 500} {
		t.Run(fmt.Sprintf("floor %d", floor), func(t *testing.T) {
			old := fsmWith(t, "old", 40)
			path := writeBackup(t, old, 7)
			f, err := backup.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cfgs, lns := threeConfigs(t)
			want := max(uint64(40), floor)
			for _, cfg := range cfgs {
				r, err := backup.Restore(f, cfg, floor, nil)
				if err != nil {
					t.Fatal(err)
				}
				if r.Index != want || r.Term != 7 || r.Tasks != 40 || r.ClusterID != "new" || len(r.Voters) != 3 {
					t.Errorf("restored %+v", r)
				}
			}
			var nodes []*node
			for i, cfg := range cfgs {
				nodes = append(nodes, start(t, cfg, lns[i]))
			}
			var leader *node
			testutil.Eventually(t, 20*time.Second, "a leader", func() bool {
				for _, n := range nodes {
					if n.r.View().State == ha.StateLeader {
						leader = n
						return true
					}
				}
				return false
			})
			for _, n := range nodes {
				if got := n.fsm.NumTasks(); got != 40 {
					t.Errorf("%s: %d tasks, want 40", n.cfg.NodeID, got)
				}
				// A node the election did not need learns the new term
				// from the leader's first heartbeat.
				testutil.Eventually(t, 10*time.Second, n.cfg.NodeID+" in a term above the backup's 7", func() bool {
					return n.r.View().Term > 7
				})
			}
			c := state.Command{Type: state.CmdSubmitTask, Task: state.Task{ID: "after"}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, _, err := leader.r.Apply(ctx, c.Encode())
			if err != nil {
				t.Fatal(err)
			}
			r := res.(state.Result)
			if r.Code != state.CodeOK || r.Index <= want {
				t.Errorf("write after the restore: %+v, want an index above %d", r, want)
			}
			for _, n := range nodes {
				testutil.Eventually(t, 10*time.Second, n.cfg.NodeID+" applies the write", func() bool {
					_, ok := n.fsm.Task("after")
					return ok && n.fsm.AppliedIndex() >= r.Index
				})
				if evs := n.fsm.EventsAfter(want, 10); len(evs) != 1 || evs[0].Index != r.Index {
					t.Errorf("%s: events above %d: %+v", n.cfg.NodeID, want, evs)
				}
			}
		})
	}
}

// Restore refuses a data dir that is not empty, and a damaged file is
// refused before anything is written.
func TestRestoreRefuses(t *testing.T) {
	old := fsmWith(t, "old", 3)
	path := writeBackup(t, old, 2)
	cfgs, _ := threeConfigs(t)
	cfg := cfgs[0]
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := backup.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := backup.Restore(f, cfg, 0, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore into a used dir: %v", err)
	}
	if ents, _ := os.ReadDir(cfg.DataDir); len(ents) != 1 {
		t.Errorf("used dir now holds %v", ents)
	}

	b, _ := os.ReadFile(path)
	b[len(b)-2] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := backup.Open(path); !errors.Is(err, backup.ErrChecksum) {
		t.Errorf("open a damaged file: %v", err)
	}
	if _, err := os.Stat(cfgs[1].DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a data dir appeared: %v", err)
	}
}
