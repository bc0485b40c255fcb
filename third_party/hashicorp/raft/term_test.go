package raft

import (
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// failingStable is a stable store whose writes fail while fail is set.
type failingStable struct {
	StableStore
	fail   atomic.Bool
	writes atomic.Int64 // failed writes
}

var errInjectedStable = errors.New("injected stable store failure")

func (s *failingStable) Set(k, v []byte) error {
	if s.fail.Load() {
		s.writes.Add(1)
		return errInjectedStable
	}
	return s.StableStore.Set(k, v)
}

func (s *failingStable) SetUint64(k []byte, v uint64) error {
	if s.fail.Load() {
		s.writes.Add(1)
		return errInjectedStable
	}
	return s.StableStore.SetUint64(k, v)
}

// startSingle bootstraps and starts a one-node raft on in-memory stores;
// wrap, if set, wraps its stable store after the bootstrap.
func startSingle(t *testing.T, conf *Config, wrap func(StableStore) StableStore) *Raft {
	t.Helper()
	conf.LocalID = "s1"
	store := NewInmemStore()
	addr, trans := NewInmemTransport("")
	snaps := NewInmemSnapshotStore()
	if err := BootstrapCluster(conf, store, store, snaps, trans, Configuration{Servers: []Server{{ID: conf.LocalID, Address: addr}}}); err != nil {
		t.Fatal(err)
	}
	var stable StableStore = store
	if wrap != nil {
		stable = wrap(store)
	}
	r, err := NewRaft(conf, &MockFSM{}, store, stable, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Shutdown().Error() })
	return r
}

// pollFor polls cond every few milliseconds until it holds or d passes.
func pollFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCheckTerms(t *testing.T) {
	ok := []interface{}{
		&AppendEntriesRequest{Term: MaxTerm - 1, PrevLogTerm: 3, Entries: []*Log{{Term: 3}}},
		&RequestVoteRequest{Term: 5, LastLogTerm: 5},
		&TimeoutNowRequest{},
		&AppendEntriesResponse{Term: 7},
	}
	for _, m := range ok {
		if err := checkTerms(m); err != nil {
			t.Errorf("%T: %v", m, err)
		}
	}
	bad := []interface{}{
		&AppendEntriesRequest{Term: MaxTerm},
		&AppendEntriesRequest{Term: 2, PrevLogTerm: math.MaxUint64},
		&AppendEntriesRequest{Term: 2, Entries: []*Log{{Index: 4, Term: 2}, {Index: 5, Term: math.MaxUint64}}},
		&RequestVoteRequest{Term: math.MaxUint64},
		&RequestVoteRequest{Term: 2, LastLogTerm: MaxTerm},
		&RequestPreVoteRequest{Term: math.MaxUint64},
		&RequestPreVoteRequest{Term: 2, LastLogTerm: MaxTerm + 1},
		&InstallSnapshotRequest{Term: math.MaxUint64},
		&InstallSnapshotRequest{Term: 2, LastLogTerm: math.MaxUint64},
		&AppendEntriesResponse{Term: math.MaxUint64},
		&RequestVoteResponse{Term: MaxTerm},
		&RequestPreVoteResponse{Term: MaxTerm},
		&InstallSnapshotResponse{Term: MaxTerm},
	}
	for _, m := range bad {
		err := checkTerms(m)
		if err == nil || !strings.Contains(err.Error(), "term") {
			t.Errorf("%T %+v: got %v, want an error naming the term", m, m, err)
		}
	}
}

// NewRaft refuses a stored current term, or a last log term, no node may
// hold, with an error and without a panic.
func TestNewRaft_RefusesStoredHugeTerm(t *testing.T) {
	for _, term := range []uint64{math.MaxUint64, MaxTerm} {
		conf := inmemConfig(t)
		conf.LocalID = "s1"
		store := NewInmemStore()
		_, trans := NewInmemTransport("s1")
		snaps := NewInmemSnapshotStore()
		if err := BootstrapCluster(conf, store, store, snaps, trans, Configuration{Servers: []Server{{ID: "s1", Address: trans.LocalAddr()}}}); err != nil {
			t.Fatal(err)
		}
		if err := store.SetUint64(keyCurrentTerm, term); err != nil {
			t.Fatal(err)
		}
		r, err := NewRaft(conf, &MockFSM{}, store, store, snaps, trans)
		if err == nil {
			_ = r.Shutdown().Error()
			t.Fatalf("NewRaft started on term %d", term)
		}
		if !strings.Contains(err.Error(), "term") {
			t.Errorf("error does not name the term: %v", err)
		}
	}

	// A last log entry of such a term.
	conf := inmemConfig(t)
	conf.LocalID = "s1"
	store := NewInmemStore()
	_, trans := NewInmemTransport("s1")
	if err := store.SetUint64(keyCurrentTerm, 5); err != nil {
		t.Fatal(err)
	}
	if err := store.StoreLog(&Log{Index: 1, Term: math.MaxUint64, Type: LogNoop}); err != nil {
		t.Fatal(err)
	}
	if r, err := NewRaft(conf, &MockFSM{}, store, store, NewInmemSnapshotStore(), trans); err == nil {
		_ = r.Shutdown().Error()
		t.Fatal("NewRaft started with a last log term of 2^64-1")
	}
}

// setCurrentTerm never lowers the term, refuses one that is not TermOK,
// and returns a store failure instead of panicking; in each case the term
// stays.
func TestSetCurrentTerm_Refusals(t *testing.T) {
	stable := &failingStable{StableStore: NewInmemStore()}
	r := &Raft{stable: stable}
	if err := r.setCurrentTerm(5); err != nil {
		t.Fatal(err)
	}
	if err := r.setCurrentTerm(4); err == nil {
		t.Error("lowered the term")
	}
	if err := r.setCurrentTerm(MaxTerm); err == nil {
		t.Error("took MaxTerm")
	}
	stable.fail.Store(true)
	if err := r.setCurrentTerm(6); !errors.Is(err, errInjectedStable) {
		t.Errorf("store failure: got %v", err)
	}
	if got := r.getCurrentTerm(); got != 5 {
		t.Errorf("term %d after the refusals, want 5", got)
	}
	if v, _ := stable.StableStore.GetUint64(keyCurrentTerm); v != 5 {
		t.Errorf("stored term %d, want 5", v)
	}
	// The current term needs no write.
	if err := r.setCurrentTerm(5); err != nil {
		t.Errorf("setting the current term again: %v", err)
	}
}

// A single node whose stable store fails cannot store a new term: each
// election it tries ends at once, without a panic, it stays a follower and
// its term does not move. Once the store works it elects itself.
func TestRaft_TermStoreFailure_SingleNodeGivesUp(t *testing.T) {
	var stable *failingStable
	r := startSingle(t, inmemConfig(t), func(s StableStore) StableStore {
		stable = &failingStable{StableStore: s}
		stable.fail.Store(true)
		return stable
	})
	term := r.getCurrentTerm()
	// Several elections have been tried and failed.
	pollFor(t, 10*time.Second, "failed elections", func() bool {
		if r.getCurrentTerm() != term {
			t.Fatalf("term moved from %d to %d while the store failed", term, r.getCurrentTerm())
		}
		if s := r.State(); s == Leader {
			t.Fatalf("became leader while its stable store failed")
		}
		return stable.writes.Load() >= 5
	})
	stable.fail.Store(false)
	pollFor(t, 10*time.Second, "a leader once the store works", func() bool { return r.State() == Leader })
	if r.getCurrentTerm() <= term {
		t.Errorf("term %d after the election, was %d", r.getCurrentTerm(), term)
	}
}

// A follower that cannot store a newer term refuses the RPC that carries
// it (a vote request here) and changes nothing: its term, its state, its
// leader.
func TestRaft_RPCWithNewerTermRefusedWhenTermCannotBeStored(t *testing.T) {
	var stables []*failingStable
	c := MakeClusterCustom(t, &MakeClusterOpts{
		Peers: 3, Bootstrap: true, Conf: inmemConfig(t),
		WrapStableStore: func(_ int, s StableStore) StableStore {
			f := &failingStable{StableStore: s}
			stables = append(stables, f)
			return f
		},
	})
	defer c.Close()
	leader := c.Leader()
	var follower *Raft
	for _, r := range c.rafts {
		if r != leader {
			follower = r
			break
		}
	}
	fi := c.IndexOf(follower)
	term := follower.getCurrentTerm()
	_, leaderID := follower.LeaderWithID()
	stables[fi].fail.Store(true)
	defer stables[fi].fail.Store(false)

	trans := c.trans[c.IndexOf(leader)]
	req := &RequestVoteRequest{
		RPCHeader:          leader.getRPCHeader(),
		Term:               term + 10,
		LastLogIndex:       math.MaxUint32,
		LastLogTerm:        term + 10,
		LeadershipTransfer: true, // past the "we have a leader" check
	}
	var resp RequestVoteResponse
	err := trans.RequestVote(follower.localID, follower.localAddr, req, &resp)
	if err == nil || !strings.Contains(err.Error(), "term") {
		t.Fatalf("vote request at a term the follower cannot store: err %v, resp %+v", err, resp)
	}
	if resp.Granted {
		t.Error("vote granted")
	}
	if got := follower.getCurrentTerm(); got != term {
		t.Errorf("follower term %d, want %d", got, term)
	}
	if s := follower.State(); s != Follower {
		t.Errorf("follower state %v", s)
	}
	if _, id := follower.LeaderWithID(); id != leaderID {
		t.Errorf("follower forgot its leader: %q, was %q", id, leaderID)
	}

	// An AppendEntries at a newer term is refused the same way.
	var aresp AppendEntriesResponse
	areq := &AppendEntriesRequest{RPCHeader: leader.getRPCHeader(), Term: term + 10}
	if err := trans.AppendEntries(follower.localID, follower.localAddr, areq, &aresp); err == nil {
		t.Errorf("appendEntries at a term the follower cannot store succeeded: %+v", aresp)
	}
	if got := follower.getCurrentTerm(); got != term {
		t.Errorf("follower term %d after appendEntries, want %d", got, term)
	}
}

// A candidate that cannot store its term or vote gives up and stays a
// follower; once its store works again the cluster converges on one term.
func TestRaft_CandidateGivesUpWhenVoteCannotBeStored(t *testing.T) {
	var mu sync.Mutex
	var stables []*failingStable
	conf := inmemConfig(t)
	// Without a pre-vote, the cut-off follower goes straight to storing a
	// new term and its vote.
	conf.PreVoteDisabled = true
	c := MakeClusterCustom(t, &MakeClusterOpts{
		Peers: 3, Bootstrap: true, Conf: conf,
		WrapStableStore: func(_ int, s StableStore) StableStore {
			f := &failingStable{StableStore: s}
			mu.Lock()
			stables = append(stables, f)
			mu.Unlock()
			return f
		},
	})
	defer c.Close()
	leader := c.Leader()
	var follower *Raft
	for _, r := range c.rafts {
		if r != leader {
			follower = r
			break
		}
	}
	fi := c.IndexOf(follower)
	term := follower.getCurrentTerm()
	stables[fi].fail.Store(true)
	// Cut the follower off: its heartbeat times out and it tries to run.
	c.Disconnect(follower.localAddr)
	pollFor(t, 10*time.Second, "failed elections on the cut-off follower", func() bool {
		if got := follower.getCurrentTerm(); got != term {
			t.Fatalf("term moved from %d to %d", term, got)
		}
		return stables[fi].writes.Load() >= 3
	})
	if s := follower.State(); s == Leader {
		t.Fatalf("state %v", s)
	}
	stables[fi].fail.Store(false)
	c.FullyConnect()
	pollFor(t, 10*time.Second, "one leader and one term", func() bool {
		leaders := 0
		for _, r := range c.rafts {
			if r.State() == Leader {
				leaders++
			}
		}
		t0 := c.rafts[0].getCurrentTerm()
		return leaders == 1 && c.rafts[1].getCurrentTerm() == t0 && c.rafts[2].getCurrentTerm() == t0
	})
}
