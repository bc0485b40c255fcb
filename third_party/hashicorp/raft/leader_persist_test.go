// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// gateStore holds StoreLogs at a gate, or fails it, on demand.
type gateStore struct {
	LogStore
	mu      sync.Mutex
	gate    chan struct{} // StoreLogs waits for it to close
	failN   int           // fail this many of the next StoreLogs calls
	waiting chan struct{} // gets a value when a StoreLogs call waits at the gate
}

func newGateStore(s LogStore) *gateStore {
	return &gateStore{LogStore: s, waiting: make(chan struct{}, 1)}
}

func (s *gateStore) StoreLogs(logs []*Log) error {
	s.mu.Lock()
	gate := s.gate
	fail := s.failN > 0
	if fail {
		s.failN--
	}
	s.mu.Unlock()
	if fail {
		return errors.New("injected log store failure")
	}
	if gate != nil {
		select {
		case s.waiting <- struct{}{}:
		default:
		}
		<-gate
	}
	return s.LogStore.StoreLogs(logs)
}

func (s *gateStore) StoreLog(l *Log) error { return s.StoreLogs([]*Log{l}) }

// hold makes StoreLogs wait until the returned func is called.
func (s *gateStore) hold() (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.gate = gate
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.gate = nil
			s.mu.Unlock()
			close(gate)
		})
	}
}

func (s *gateStore) failNext(n int) {
	s.mu.Lock()
	s.failN = n
	s.mu.Unlock()
}

func makeGatedCluster(t *testing.T) (*cluster, []*gateStore) {
	t.Helper()
	conf := inmemConfig(t)
	conf.ParallelLeaderWrites = true
	var stores []*gateStore
	c := MakeClusterCustom(t, &MakeClusterOpts{
		Peers: 3, Bootstrap: true, Conf: conf,
		WrapLogStore: func(_ int, s LogStore) LogStore {
			g := newGateStore(s)
			stores = append(stores, g)
			return g
		},
	})
	t.Cleanup(c.Close)
	return c, stores
}

// applyDone applies cmd on r and returns a channel that gets the outcome.
func applyDone(r *Raft, cmd string) (ApplyFuture, <-chan error) {
	f := r.Apply([]byte(cmd), time.Second)
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	return f, done
}

func storeHas(t *testing.T, s LogStore, index uint64) bool {
	t.Helper()
	last, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	return last >= index
}

// The leader replicates an entry while its own write is held, and the two
// followers commit it without the leader's disk.
func TestParallelLeaderWrites_CommitWhileLeaderWrites(t *testing.T) {
	c, stores := makeGatedCluster(t)
	leader := c.Leader()
	ls := stores[c.IndexOf(leader)]
	release := ls.hold()
	defer release()

	f, done := applyDone(leader, "x")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("apply did not commit while the leader's write was held: replication waited for the leader's disk")
	}
	if storeHas(t, ls.LogStore, f.Index()) {
		t.Fatalf("the leader's store already holds index %d although its write is held", f.Index())
	}
	release()
	waitUntil(t, func() bool { return storeHas(t, ls.LogStore, f.Index()) }, "the leader's store to hold the entry")
	c.WaitForReplication(1)
	c.EnsureSame(t)
}

// The leader counts itself toward commitment only once its write returned:
// with its write and one follower's held, one stored copy is not a quorum.
func TestParallelLeaderWrites_LeaderCountsOnceStored(t *testing.T) {
	c, stores := makeGatedCluster(t)
	leader := c.Leader()
	releaseLeader := stores[c.IndexOf(leader)].hold()
	defer releaseLeader()
	slow := c.Followers()[0]
	releaseFollower := stores[c.IndexOf(slow)].hold()
	defer releaseFollower()

	_, done := applyDone(leader, "x")
	// Wait until the held follower has the entry in hand, then give a
	// wrong commit time to show.
	select {
	case <-stores[c.IndexOf(slow)].waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the held follower never got the entry")
	}
	select {
	case err := <-done:
		t.Fatalf("committed with one stored copy of three (err=%v): the leader counted itself before its write returned", err)
	case <-time.After(200 * time.Millisecond):
	}
	releaseLeader()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("apply: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("apply did not commit once the leader's write returned")
	}
	releaseFollower()
	c.WaitForReplication(1)
	c.EnsureSame(t)
}

// A failed write makes the leader step down with lastLog put back to what its
// store holds; the cluster goes on and every node ends with the same log and
// state.
func TestParallelLeaderWrites_FailedWriteStepsDown(t *testing.T) {
	c, stores := makeGatedCluster(t)
	leader := c.Leader()
	ls := stores[c.IndexOf(leader)]
	ls.failNext(1)

	_, done := applyDone(leader, "lost-or-kept")
	select {
	case <-done: // committed by the followers or failed: both are allowed
	case <-time.After(5 * time.Second):
		t.Fatal("apply neither committed nor failed after the leader's write failed")
	}
	waitUntil(t, func() bool { return leader.State() != Leader }, "the leader to step down after its write failed")

	// The cluster elects a leader and takes writes again.
	var n int
	waitUntil(t, func() bool {
		l := c.Leader()
		if err := l.Apply([]byte(fmt.Sprintf("after-%d", n)), time.Second).Error(); err != nil {
			return false
		}
		n++
		return n == 5
	}, "five writes after the failure")

	// Every node's state is the same, and the old leader's view of its
	// log agrees with its store.
	waitUntil(t, func() bool {
		last, err := ls.LastIndex()
		return err == nil && last == leader.LastIndex() && last == c.Leader().LastIndex()
	}, "the old leader's store to match its lastLog and the leader's")
	c.EnsureSame(t)
}

// A leader that loses leadership while its write is held finishes the write
// before it acts as a follower, and then catches up.
func TestParallelLeaderWrites_StepDownDrains(t *testing.T) {
	c, stores := makeGatedCluster(t)
	leader := c.Leader()
	ls := stores[c.IndexOf(leader)]
	release := ls.hold()
	defer release()

	f, done := applyDone(leader, "x")
	if err := <-done; err != nil {
		t.Fatalf("apply: %v", err)
	}
	// Cut the leader off: it steps down for want of a quorum and waits
	// for its held write on the way.
	c.Disconnect(leader.localAddr)
	select {
	case <-ls.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader's write never reached the store")
	}
	var other *Raft
	waitUntil(t, func() bool {
		for _, r := range c.GetInState(Leader) {
			if r != leader {
				other = r
				return true
			}
		}
		return false
	}, "a new leader among the other two")
	if err := other.Apply([]byte("y"), time.Second).Error(); err != nil {
		t.Fatalf("apply on the new leader: %v", err)
	}
	release()
	c.FullyConnect()
	waitUntil(t, func() bool { return storeHas(t, ls.LogStore, f.Index()+1) }, "the old leader to catch up")
	c.WaitForReplication(2)
	c.EnsureSame(t)
}

// A heartbeat is answered on the transport's goroutine (the fast path), not
// the main one: it must not wait for the leader's write, which is the main
// goroutine's to drain (waiting there raced its staging of the next write).
// An old leader's late heartbeat reaches a new leader whose write is held.
func TestParallelLeaderWrites_HeartbeatDoesNotWaitForWrite(t *testing.T) {
	c, stores := makeGatedCluster(t)
	leader := c.Leader()
	ls := stores[c.IndexOf(leader)]
	release := ls.hold()
	defer release()

	_, done := applyDone(leader, "x")
	select {
	case <-ls.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader's write never reached the store")
	}
	old := c.Followers()[0]
	respCh := make(chan RPCResponse, 1)
	go leader.processHeartbeat(RPC{
		Command: &AppendEntriesRequest{
			RPCHeader: RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte(old.localID), Addr: []byte(old.localAddr)},
			Term:      leader.getCurrentTerm() - 1,
		},
		RespChan: respCh,
	})
	select {
	case resp := <-respCh:
		if ae, ok := resp.Response.(*AppendEntriesResponse); !ok || ae.Success {
			t.Fatalf("a heartbeat of an older term got %#v, want a refusal", resp.Response)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the heartbeat waited for the leader's held write")
	}
	if leader.State() != Leader {
		t.Fatalf("the leader is %v after an older term's heartbeat", leader.State())
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("apply: %v", err)
	}
	c.WaitForReplication(1)
	c.EnsureSame(t)
}

// Old-term heartbeats answered while the leader stages writes: under the
// race detector, a heartbeat that drained the leader's writes raced the
// main goroutine staging them.
func TestParallelLeaderWrites_HeartbeatsWhileStaging(t *testing.T) {
	c, _ := makeGatedCluster(t)
	leader := c.Leader()
	old := c.Followers()[0]
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			respCh := make(chan RPCResponse, 1)
			leader.processHeartbeat(RPC{
				Command: &AppendEntriesRequest{
					RPCHeader: RPCHeader{ProtocolVersion: ProtocolVersionMax, ID: []byte(old.localID), Addr: []byte(old.localAddr)},
					Term:      leader.getCurrentTerm() - 1,
				},
				RespChan: respCh,
			})
			<-respCh
		}
	}()
	for i := 0; i < 200; i++ {
		if err := leader.Apply([]byte(fmt.Sprintf("w%d", i)), time.Second).Error(); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	close(stop)
	<-done
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
