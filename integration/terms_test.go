package integration

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/xce/xce/client"
)

// TestTermOverflowFromTheWireIsRefused has a hostile peer send RequestVote,
// RequestPreVote and AppendEntries with the largest term to every node of a
// running cluster: each is refused, no node's term moves, and the cluster
// keeps serving writes with the same primary.
func TestTermOverflowFromTheWireIsRefused(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(10 * time.Second))
	before, err := c.Status(p)
	if err != nil {
		t.Fatal(err)
	}
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(trans.LocalAddr())}
	const huge = math.MaxUint64
	for i := range c.N() {
		n := c.Node(i)
		id, addr := raft.ServerID(n.ID), raft.ServerAddress(n.PeerAddr)
		var vr raft.RequestVoteResponse
		if err := trans.RequestVote(id, addr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: huge, LastLogIndex: huge, LastLogTerm: huge}, &vr); err == nil {
			t.Errorf("%s: RequestVote at term 2^64-1 was answered: %+v", n.ID, vr)
		} else if !strings.Contains(err.Error(), "term") {
			t.Errorf("%s: RequestVote refused with %q, want an error naming the term", n.ID, err)
		}
		var pr raft.RequestPreVoteResponse
		if err := trans.RequestPreVote(id, addr, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: huge, LastLogIndex: huge, LastLogTerm: huge}, &pr); err == nil {
			t.Errorf("%s: RequestPreVote at term 2^64-1 was answered: %+v", n.ID, pr)
		}
		var ar raft.AppendEntriesResponse
		if err := trans.AppendEntries(id, addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: huge, PrevLogEntry: 1, PrevLogTerm: 1}, &ar); err == nil {
			t.Errorf("%s: AppendEntries at term 2^64-1 was answered: %+v", n.ID, ar)
		}
	}
	after := c.WaitRoles(10 * time.Second)
	if after != p {
		t.Errorf("primary moved from %s to %s", c.Node(p).ID, c.Node(after).ID)
	}
	for i := range c.N() {
		st, err := c.Status(i)
		if err != nil {
			t.Fatal(err)
		}
		if st.Term != before.Term {
			t.Errorf("%s: term %d, was %d", c.Node(i).ID, st.Term, before.Term)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Client().Submit(ctx, client.Task{ID: "after-the-intruder"}); err != nil {
		t.Fatalf("submit after the hostile RPCs: %v", err)
	}
	if v, err := c.Metric(p, "xce_peer_refused_total"); err != nil || v < 1 {
		t.Errorf("xce_peer_refused_total on %s = %v (%v), want the refusals counted", c.Node(p).ID, v, err)
	}
}

// TestTermOverflowOnDiskIsRefused stores the largest term in a stopped
// node's raft.db: the node refuses to start with one line naming the file,
// and the rest of the cluster serves on.
func TestTermOverflowOnDiskIsRefused(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(10 * time.Second))
	victim := (p + 1) % c.N()
	c.Stop(victim)
	path := filepath.Join(c.Node(victim).DataDir, "raft.db")
	db, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.SetUint64([]byte("CurrentTerm"), math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	c.Start(victim)
	code := c.Wait(victim)
	if code == 0 {
		t.Fatalf("%s started on a term of 2^64-1", c.Node(victim).ID)
	}
	log := c.RunLog(victim)
	if !strings.Contains(log, "raft.db") || !strings.Contains(log, "term") {
		t.Errorf("%s exited %d without naming raft.db and the term:\n%s", c.Node(victim).ID, code, lastBytes(log, 2000))
	}
	var live []int
	for i := range c.N() {
		if i != victim {
			live = append(live, i)
		}
	}
	if _, _, err := c.waitRolesAmong(10*time.Second, live); err != nil {
		t.Fatalf("the others stopped serving: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ClientOf(c.Node(live[0]).ClientAddr, c.Node(live[1]).ClientAddr).Submit(ctx, client.Task{ID: "after-the-refusal"}); err != nil {
		t.Fatalf("submit: %v", err)
	}
}
