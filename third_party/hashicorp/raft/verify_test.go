package raft

import (
	"sync"
	"testing"
	"time"
)

// heldHeartbeats holds the heartbeats a Raft sends while a gate is set.
type heldHeartbeats struct {
	Transport
	mu   sync.Mutex
	gate chan struct{} // nil: heartbeats pass
	held int           // heartbeats waiting at the gate
}

func (h *heldHeartbeats) AppendEntries(id ServerID, target ServerAddress, args *AppendEntriesRequest, resp *AppendEntriesResponse) error {
	// A heartbeat carries neither entries nor the leader's log position.
	if len(args.Entries) == 0 && args.PrevLogEntry == 0 && args.LeaderCommitIndex == 0 {
		h.mu.Lock()
		gate := h.gate
		if gate != nil {
			h.held++
		}
		h.mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	return h.Transport.AppendEntries(id, target, args, resp)
}

// hold sets a new gate and returns the previous one, for the caller to
// open.
func (h *heldHeartbeats) hold() (previous chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	previous, h.gate, h.held = h.gate, make(chan struct{}), 0
	return previous
}

func (h *heldHeartbeats) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// A VerifyLeader counts only answers to heartbeats sent after it began:
// an answer to one already under way when it began proves nothing about
// the leadership since.
func TestVerifyLeader_NotByAHeartbeatSentBefore(t *testing.T) {
	conf := inmemConfig(t)
	var trans []*heldHeartbeats
	c := MakeClusterCustom(t, &MakeClusterOpts{Peers: 3, Bootstrap: true, Conf: conf,
		WrapTransport: func(_ int, tr Transport) Transport {
			h := &heldHeartbeats{Transport: tr}
			trans = append(trans, h)
			return h
		}})
	t.Cleanup(c.Close)
	leader := c.Leader()
	var h *heldHeartbeats
	for i, r := range c.rafts {
		if r == leader {
			h = trans[i]
		}
	}
	t.Cleanup(func() { // before the cluster's Close, which needs heartbeats
		h.mu.Lock()
		gate := h.gate
		h.gate = nil
		h.mu.Unlock()
		if gate != nil {
			close(gate)
		}
	})

	// Both followers' heartbeats are under way, held.
	first := make(chan struct{})
	h.mu.Lock()
	h.gate = first
	h.mu.Unlock()
	waitUntil(t, func() bool { return h.waiting() == 2 }, "a heartbeat to each follower")

	// A VerifyLeader begins while they are.
	done := make(chan error, 1)
	go func() { done <- leader.VerifyLeader().Error() }()
	waitUntil(t, func() bool { return registeredVerifies(leader) == 2 }, "the verify registered with both replicators")

	// The held heartbeats are answered; the next ones are held.
	close(h.hold())
	waitUntil(t, func() bool { return h.waiting() == 2 }, "the heartbeats that follow")
	select {
	case err := <-done:
		t.Fatalf("VerifyLeader returned %v on answers to heartbeats sent before it began", err)
	case <-time.After(100 * time.Millisecond):
	}

	// Heartbeats sent after it began confirm it.
	h.mu.Lock()
	gate := h.gate
	h.gate = nil
	h.mu.Unlock()
	close(gate)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("VerifyLeader: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("VerifyLeader did not return after later heartbeats")
	}
}

// registeredVerifies counts the replicators with a verify future waiting.
func registeredVerifies(r *Raft) int {
	n := 0
	for _, repl := range r.leaderState.replState {
		repl.notifyLock.Lock()
		if len(repl.notify) > 0 {
			n++
		}
		repl.notifyLock.Unlock()
	}
	return n
}
