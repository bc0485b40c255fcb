package raftha

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// testNode is one real raft node on loopback with its own data dir.
type testNode struct {
	id, addr string
	r        *Raft
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startNode starts node id on l with peers as its bootstrap list (or none
// with join).
func startNode(t *testing.T, id string, l net.Listener, peers []Peer, join bool) *testNode {
	t.Helper()
	addr := l.Addr().String()
	store, err := persist.Open(t.TempDir(), persist.Options{NodeID: id, ClusterID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := peernet.NewStreamLayer(l, addr, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeID: id, Peers: peers, Join: join, HeartbeatTimeout: 100 * time.Millisecond,
		ElectionTimeout: 100 * time.Millisecond, LeaderLeaseTimeout: 100 * time.Millisecond,
		CommitTimeout: 10 * time.Millisecond, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30, TrailingLogs: 1024,
		MaxInboundConns: 64}
	r, err := Start(cfg, state.NewFSM("t"), store, stream, hclog.NewNullLogger())
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Shutdown()
		store.Close()
	})
	return &testNode{id: id, addr: addr, r: r}
}

// startNodes starts n bootstrapped voters n1..nn and waits for a leader.
func startNodes(t *testing.T, n int) []*testNode {
	t.Helper()
	var ls []net.Listener
	var peers []Peer
	for i := range n {
		l := listen(t)
		ls = append(ls, l)
		peers = append(peers, Peer{ID: "n" + string(rune('1'+i)), Addr: l.Addr().String()})
	}
	var nodes []*testNode
	for i, l := range ls {
		nodes = append(nodes, startNode(t, peers[i].ID, l, peers, false))
	}
	leaderOf(t, nodes)
	return nodes
}

// leaderOf waits until one of nodes leads and returns it.
func leaderOf(t *testing.T, nodes []*testNode) *testNode {
	t.Helper()
	var leader *testNode
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool {
		for _, n := range nodes {
			if n.r.View().State == ha.StateLeader {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// membersOf returns id → voter of the leader's latest configuration,
// waiting until it is committed.
func membersOf(t *testing.T, n *testNode) map[string]ha.Member {
	t.Helper()
	var ms []ha.Member
	testutil.Eventually(t, 10*time.Second, "a committed configuration", func() bool {
		var pending bool
		var err error
		ms, _, pending, err = n.r.Members()
		if err != nil {
			t.Fatal(err)
		}
		return !pending
	})
	out := map[string]ha.Member{}
	for _, m := range ms {
		out[m.ID] = m
	}
	return out
}

func apply(t *testing.T, n *testNode, k int) {
	t.Helper()
	for i := range k {
		cmd := (&state.Command{Type: state.CmdSubmitTask, ClientID: "c", RequestID: "r" + string(rune('a'+i%26)),
			Task: state.Task{ID: "t" + string(rune('a'+i%26))}}).Encode()
		if _, _, err := n.r.Apply(ctxT(t), cmd); err != nil {
			t.Fatal(err)
		}
	}
}

// A node started with Join waits with no configuration; added as a
// non-voter it catches up, promoted it votes, and a voter removed leaves
// the configuration. Members reflects each step.
func TestMembershipJoinPromoteRemove(t *testing.T) {
	nodes := startNodes(t, 3)
	leader := leaderOf(t, nodes)
	apply(t, leader, 20)

	joiner := startNode(t, "n4", listen(t), nil, true)
	if ms, idx, _, err := joiner.r.Members(); err != nil || len(ms) != 0 || idx != 0 {
		t.Fatalf("joiner before being added: members %v index %d err %v", ms, idx, err)
	}
	if v := joiner.r.View(); v.State == ha.StateLeader {
		t.Fatalf("a joining node elected itself: %+v", v)
	}

	ctx := ctxT(t)
	if err := leader.r.AddNonvoter(ctx, "n4", joiner.addr); err != nil {
		t.Fatal(err)
	}
	ms := membersOf(t, leader)
	if m, ok := ms["n4"]; !ok || m.Voter || m.PeerAddr != joiner.addr || len(ms) != 4 {
		t.Fatalf("after AddNonvoter: %+v", ms)
	}
	testutil.Eventually(t, 10*time.Second, "the non-voter catches up", func() bool {
		return joiner.r.AppliedIndex() >= leader.r.AppliedIndex()
	})
	testutil.Eventually(t, 10*time.Second, "the leader sees the non-voter's match index", func() bool {
		ms, _, _, _ := leader.r.Members()
		for _, m := range ms {
			if m.ID == "n4" {
				return m.MatchIndex == leader.r.LastIndex() && m.LastContact >= 0
			}
		}
		return false
	})
	// Adding it again at the same address changes nothing.
	_, before, _, _ := leader.r.Members()
	if err := leader.r.AddNonvoter(ctx, "n4", joiner.addr); err != nil {
		t.Fatal(err)
	}
	if _, after, _, _ := leader.r.Members(); after != before {
		t.Fatalf("a repeated AddNonvoter wrote a configuration (%d → %d)", before, after)
	}

	if err := leader.r.Promote(ctx, "n4"); err != nil {
		t.Fatal(err)
	}
	if ms := membersOf(t, leader); !ms["n4"].Voter {
		t.Fatalf("after Promote: %+v", ms)
	}
	var victim *testNode
	for _, n := range nodes {
		if n != leader {
			victim = n
			break
		}
	}
	if err := leader.r.Remove(ctx, victim.id); err != nil {
		t.Fatal(err)
	}
	ms = membersOf(t, leader)
	if _, ok := ms[victim.id]; ok || len(ms) != 3 {
		t.Fatalf("after Remove(%s): %+v", victim.id, ms)
	}
	// The joined node's own view of the configuration follows.
	testutil.Eventually(t, 10*time.Second, "the new voter sees the configuration", func() bool {
		ms, _, _, _ := joiner.r.Members()
		return len(ms) == 3
	})
	// The cluster still commits.
	apply(t, leader, 1)
}

// Bad changes are refused and write nothing; a follower refuses them all.
func TestMembershipRefusals(t *testing.T) {
	nodes := startNodes(t, 3)
	leader := leaderOf(t, nodes)
	ctx := ctxT(t)
	var follower *testNode
	for _, n := range nodes {
		if n != leader {
			follower = n
		}
	}
	_, before, _, _ := leader.r.Members()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"add a voter's id", leader.r.AddNonvoter(ctx, follower.id, "127.0.0.1:1"), ha.ErrMemberRefused},
		{"add at a used address", leader.r.AddNonvoter(ctx, "n9", follower.addr), ha.ErrMemberRefused},
		{"add with an empty id", leader.r.AddNonvoter(ctx, "", "127.0.0.1:1"), ha.ErrMemberRefused},
		{"add at a bad address", leader.r.AddNonvoter(ctx, "n9", "nowhere"), ha.ErrMemberRefused},
		{"promote unknown", leader.r.Promote(ctx, "n9"), ha.ErrMemberRefused},
		{"remove unknown", leader.r.Remove(ctx, "n9"), ha.ErrMemberRefused},
		{"transfer to unknown", leader.r.TransferTo(ctx, "n9"), ha.ErrMemberRefused},
		{"promote a voter", leader.r.Promote(ctx, follower.id), nil},
		{"transfer to itself", leader.r.TransferTo(ctx, leader.id), nil},
		{"follower adds", follower.r.AddNonvoter(ctx, "n9", "127.0.0.1:1"), ha.ErrNotLeader},
		{"follower removes", follower.r.Remove(ctx, leader.id), ha.ErrNotLeader},
		{"follower transfers", follower.r.TransferTo(ctx, ""), ha.ErrNotLeader},
	} {
		if !errors.Is(tc.err, tc.want) || (tc.want == nil && tc.err != nil) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if ms, after, _, _ := leader.r.Members(); after != before || len(ms) != 3 {
		t.Fatalf("refused changes wrote a configuration: index %d → %d, members %+v", before, after, ms)
	}
	// A non-voter cannot receive leadership.
	if err := leader.r.AddNonvoter(ctx, "n9", "127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if err := leader.r.TransferTo(ctx, "n9"); !errors.Is(err, ha.ErrMemberRefused) {
		t.Errorf("transfer to a non-voter: %v", err)
	}
	if err := leader.r.Remove(ctx, "n9"); err != nil {
		t.Fatal(err)
	}
	if ms := membersOf(t, leader); len(ms) != 3 {
		t.Fatalf("members after adding and removing n9: %+v", ms)
	}
}

// TransferTo a named voter moves leadership there.
func TestMembershipTransferTo(t *testing.T) {
	nodes := startNodes(t, 3)
	leader := leaderOf(t, nodes)
	var target *testNode
	for _, n := range nodes {
		if n != leader {
			target = n
		}
	}
	if err := leader.r.TransferTo(ctxT(t), target.id); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the target leads", func() bool {
		return target.r.View().State == ha.StateLeader
	})
	ms := membersOf(t, target)
	if len(ms) != 3 || !ms[leader.id].Voter {
		t.Fatalf("members after the transfer: %+v", ms)
	}
}

// A node with Join and raft state ignores Join: it restarts with its
// configuration and leads again.
func TestJoinIgnoredWithState(t *testing.T) {
	dir := t.TempDir()
	var store *persist.Store
	run := func(join bool, addr string) (*Raft, string) {
		var r *Raft
		r, store, addr = startInDir(t, dir, addr, persist.Options{}, state.NewFSM("t"), func(c *Config) { c.Join = join })
		return r, addr
	}
	r, addr := run(false, "")
	if err := r.Shutdown(); err != nil {
		t.Fatal(err)
	}
	store.Close()
	r, _ = run(true, addr)
	defer func() {
		r.Shutdown()
		store.Close()
	}()
	ms, _, _, err := r.Members()
	if err != nil || len(ms) != 1 || !ms[0].Voter || ms[0].LastContact != 0 || ms[0].MatchIndex != r.LastIndex() {
		t.Fatalf("restarted node's members %+v, %v", ms, err)
	}
}

// A leadership transfer that timed out leaves the leader in place: the
// caller is told to try again (ha.ErrTimeout), not that the change was
// refused.
func TestTransferTimeoutIsTransient(t *testing.T) {
	err := mapErr(raft.ErrLeadershipTransferTimeout)
	if !errors.Is(err, ha.ErrTimeout) || !strings.Contains(err.Error(), "leadership transfer timeout") {
		t.Fatalf("mapErr(transfer timeout) = %v", err)
	}
}
