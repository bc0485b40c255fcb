package raftha

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// startCluster runs n raft nodes in process over loopback TCP, with real
// bolt stores (fsync on), and returns the leader.
func startCluster(tb testing.TB, n int) (*Raft, func()) {
	tb.Helper()
	return startClusterFSM(tb, n, func() raft.FSM { return NewFSM(state.NewFSM("b")) })
}

// startClusterFSM is startCluster with the FSM of each node from newFSM.
func startClusterFSM(tb testing.TB, n int, newFSM func() raft.FSM) (*Raft, func()) {
	tb.Helper()
	var ls []net.Listener
	var peers []Peer
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, l)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: l.Addr().String()})
	}
	var nodes []*Raft
	var stores []*persist.Store
	for i := 0; i < n; i++ {
		store, err := persist.Open(tb.TempDir(), persist.Options{NodeID: peers[i].ID, ClusterID: "b"})
		if err != nil {
			tb.Fatal(err)
		}
		stream, err := peernet.NewStreamLayer(ls[i], peers[i].Addr, "")
		if err != nil {
			tb.Fatal(err)
		}
		// Timeouts with room for a loaded machine under the race detector:
		// these clusters test what a leader does, and an election in the
		// middle (a 150 ms lease lost to a GC pause) only makes them flaky.
		cfg := Config{NodeID: peers[i].ID, Peers: peers, HeartbeatTimeout: 500 * time.Millisecond,
			ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 400 * time.Millisecond,
			CommitTimeout: 10 * time.Millisecond, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30, TrailingLogs: 10240}
		r, err := startWith(cfg, newFSM(), store, stream, hclog.NewNullLogger())
		if err != nil {
			tb.Fatal(err)
		}
		nodes, stores = append(nodes, r), append(stores, store)
	}
	stop := func() {
		for i, r := range nodes {
			r.Shutdown()
			stores[i].Close()
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		for _, r := range nodes {
			if r.View().State == ha.StateLeader {
				if err := r.Barrier(context.Background()); err == nil {
					return r, stop
				}
			}
		}
	}
	stop()
	tb.Fatal("no leader")
	return nil, nil
}

// BenchmarkRaftApply is the ceiling the API layer eats into: submits
// applied inside the leader process, 3 voters, fsync on. "batches" is the
// backend's Apply with batch entries, "waves" without them, "direct" calls
// raft.Apply from every writer, as without waves.
func BenchmarkRaftApply(b *testing.B) {
	for _, writers := range []int{1, 16, 64} {
		for _, mode := range []string{"batches", "waves", "direct"} {
			b.Run(fmt.Sprintf("writers=%d/%s", writers, mode), func(b *testing.B) {
				leader, stop := startCluster(b, 3)
				defer stop()
				leader.SetBatches(mode == "batches")
				var seq atomic.Uint64
				next := func() []byte {
					id := fmt.Sprint("t", seq.Add(1))
					return (&state.Command{Type: state.CmdSubmitTask, ClientID: "b", RequestID: id, Task: state.Task{ID: id}}).Encode()
				}
				apply := func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					_, _, err := leader.Apply(ctx, next())
					return err
				}
				if mode == "direct" {
					apply = func() error { return leader.r.Apply(next(), 5*time.Second).Error() }
				}
				b.ResetTimer()
				var wg sync.WaitGroup
				per := b.N/writers + 1
				for w := 0; w < writers; w++ {
					wg.Go(func() {
						for i := 0; i < per; i++ {
							if err := apply(); err != nil {
								b.Error(err)
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}
