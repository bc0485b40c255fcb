package raftlog_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/persist/raftlog"
)

// sumFSM adds up the uint64s it is given. Each entry is a sequence number
// and a value; an entry whose sequence number was already applied is a
// retry of a write whose outcome the writer could not know (raft's
// ErrLeadershipLost), and is ignored, as xce's idempotent writes are.
type sumFSM struct {
	mu          sync.Mutex
	sum, n, seq uint64
	restored    int
}

func (f *sumFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := binary.BigEndian.Uint64(l.Data[:8])
	if seq <= f.seq {
		return nil
	}
	f.seq = seq
	f.sum += binary.BigEndian.Uint64(l.Data[8:])
	f.n++
	return nil
}

func (f *sumFSM) state() (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sum, f.n
}

func (f *sumFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sumSnap{f.sum, f.n, f.seq}, nil
}

func (f *sumFSM) Restore(r io.ReadCloser) error {
	defer r.Close()
	var b [24]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sum, f.n = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:16])
	f.seq = binary.BigEndian.Uint64(b[16:])
	f.restored++
	return nil
}

type sumSnap struct{ sum, n, seq uint64 }

func (s sumSnap) Persist(sink raft.SnapshotSink) error {
	var b [24]byte
	binary.BigEndian.PutUint64(b[:8], s.sum)
	binary.BigEndian.PutUint64(b[8:16], s.n)
	binary.BigEndian.PutUint64(b[16:], s.seq)
	if _, err := sink.Write(b[:]); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (sumSnap) Release() {}

type node struct {
	id    raft.ServerID
	dir   string
	trans *raft.InmemTransport
	addr  raft.ServerAddress
	logs  *raftlog.Store
	fsm   *sumFSM
	r     *raft.Raft
}

// TestRaftCompactsAndInstallsSnapshots runs three raft nodes on segment
// logs (behind raft's LogCache, as a node runs them) through the paths that
// delete entries: compaction after snapshots (prefix deletes across
// segments), a lagging follower that gets a snapshot and clears its log
// (delete everything, then a log that starts past a gap), and a restart of
// that follower from its files.
func TestRaftCompactsAndInstallsSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a raft cluster")
	}
	conf := func(id raft.ServerID) *raft.Config {
		c := raft.DefaultConfig()
		c.LocalID = id
		c.HeartbeatTimeout = 100 * time.Millisecond
		c.ElectionTimeout = 100 * time.Millisecond
		c.LeaderLeaseTimeout = 100 * time.Millisecond
		c.CommitTimeout = 5 * time.Millisecond
		c.SnapshotInterval = 20 * time.Millisecond
		c.SnapshotThreshold = 40
		c.TrailingLogs = 10
		c.Logger = hclog.NewNullLogger()
		c.ParallelLeaderWrites = true // as xce runs raft
		return c
	}
	snaps := map[raft.ServerID]*raft.InmemSnapshotStore{}
	stables := map[raft.ServerID]*raft.InmemStore{}
	start := func(t *testing.T, n *node, bootstrap []raft.Server) {
		t.Helper()
		logs, _, err := raftlog.Open(n.dir, raftlog.Options{SegmentSize: 2048})
		if err != nil {
			t.Fatal(err)
		}
		cache, err := raft.NewLogCache(16, logs)
		if err != nil {
			t.Fatal(err)
		}
		if snaps[n.id] == nil {
			snaps[n.id], stables[n.id] = raft.NewInmemSnapshotStore(), raft.NewInmemStore()
		}
		if bootstrap != nil {
			if err := raft.BootstrapCluster(conf(n.id), cache, stables[n.id], snaps[n.id], n.trans, raft.Configuration{Servers: bootstrap}); err != nil {
				t.Fatal(err)
			}
		}
		n.fsm = &sumFSM{}
		r, err := raft.NewRaft(conf(n.id), n.fsm, cache, stables[n.id], snaps[n.id], n.trans)
		if err != nil {
			t.Fatal(err)
		}
		n.logs, n.r = logs, r
	}
	stop := func(n *node) {
		if n.r != nil {
			n.r.Shutdown().Error()
			n.logs.Close()
			n.r = nil
		}
	}

	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		id := raft.ServerID(fmt.Sprint("n", i+1))
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		nodes[i] = &node{id: id, dir: t.TempDir(), trans: trans, addr: addr}
		servers = append(servers, raft.Server{ID: id, Address: addr})
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
	for _, n := range nodes {
		start(t, n, servers)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			stop(n)
		}
	})

	leader := func(except *node) *node {
		t.Helper()
		var l *node
		testutil.Eventually(t, 10*time.Second, "a leader", func() bool {
			for _, n := range nodes {
				if n != except && n.r != nil && n.r.State() == raft.Leader {
					l = n
					return true
				}
			}
			return false
		})
		return l
	}
	var want, count uint64
	write := func(k int, except *node) {
		t.Helper()
		for i := 0; i < k; i++ {
			var b [16]byte
			v := uint64(i%7 + 1)
			binary.BigEndian.PutUint64(b[:8], count+1)
			binary.BigEndian.PutUint64(b[8:], v)
			for {
				err := leader(except).r.Apply(b[:], 5*time.Second).Error()
				if err == nil {
					break
				}
				// Not leader: not written. Leadership lost: perhaps
				// written; the FSM ignores a second copy.
				if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
					t.Fatalf("apply: %v", err)
				}
			}
			want += v
			count++
		}
	}
	converged := func(ns ...*node) {
		t.Helper()
		var last []string
		defer func() {
			if t.Failed() {
				t.Log(strings.Join(last, "; "))
			}
		}()
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("FSMs reach sum %d of %d entries", want, count), func() bool {
			last = last[:0]
			for _, n := range ns {
				s, c := n.fsm.state()
				last = append(last, fmt.Sprintf("%s: sum %d of %d entries", n.id, s, c))
			}
			for _, n := range ns {
				if s, c := n.fsm.state(); s != want || c != count {
					return false
				}
			}
			return true
		})
	}

	write(50, nil)
	converged(nodes...)

	// n3 falls behind while the others snapshot and compact past it.
	lag := nodes[2]
	for _, n := range nodes[:2] {
		n.trans.Disconnect(lag.addr)
		lag.trans.Disconnect(n.addr)
	}
	write(300, lag)
	converged(nodes[0], nodes[1])
	var first, lagLast uint64
	testutil.Eventually(t, 10*time.Second, "the leader compacts its log past the follower's end", func() bool {
		first, _ = leader(lag).logs.FirstIndex()
		lagLast, _ = lag.logs.LastIndex()
		return first > lagLast+1
	})

	// Back: it can only catch up from a snapshot.
	for _, n := range nodes[:2] {
		n.trans.Connect(lag.addr, lag.trans)
		lag.trans.Connect(n.addr, n.trans)
	}
	write(20, nil)
	converged(nodes...)
	lag.fsm.mu.Lock()
	restored := lag.fsm.restored
	lag.fsm.mu.Unlock()
	if restored == 0 {
		t.Fatal("the lagging follower caught up without a snapshot")
	}

	// Restart it from its files: its log opens cleanly and it rejoins.
	stop(lag)
	logs, rec, err := raftlog.Open(lag.dir, raftlog.Options{SegmentSize: 2048})
	if err != nil {
		t.Fatalf("reopen the follower's log: %v", err)
	}
	if rec.TornBytes != 0 {
		t.Fatalf("a clean shutdown left %d torn bytes", rec.TornBytes)
	}
	first, _ = logs.FirstIndex()
	last, _ := logs.LastIndex()
	for i := first; i <= last && first != 0; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			t.Fatalf("entry %d of %d..%d: %v", i, first, last, err)
		}
	}
	logs.Close()
	start(t, lag, nil)
	write(20, nil)
	converged(nodes...)
}
