package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/client/transport"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/placement"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/state"
)

// assign writes an assignment generation through the node's log.
func writeGeneration(t *testing.T, n interface {
	Apply(context.Context, []byte) (state.Result, error)
}, base uint64, set ...state.Placement) {
	t.Helper()
	c := state.Command{Type: state.CmdSetAssignment, Assign: state.AssignmentDelta{Base: base, Generation: base + 1, Set: set}}
	if r, err := n.Apply(context.Background(), c.Encode()); err != nil || r.Code != state.CodeOK {
		t.Fatalf("assignment %d: %v %v", base+1, r, err)
	}
}

type watchClient struct {
	t  *testing.T
	cl xcev1connect.ControllerServiceClient
}

func (w watchClient) open(from uint64, c xcev1.Consistency) *connect.ServerStreamForClient[xcev1.WatchAssignmentResponse] {
	w.t.Helper()
	s, err := w.cl.WatchAssignment(ctxT(w.t), connect.NewRequest(&xcev1.WatchAssignmentRequest{FromGeneration: from, Consistency: c}))
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { s.Close() })
	return s
}

// next receives one message and renders it as "gen full|delta task:active@epoch… -removed…".
func next(t *testing.T, s *connect.ServerStreamForClient[xcev1.WatchAssignmentResponse]) string {
	t.Helper()
	if !s.Receive() {
		t.Fatalf("stream ended: %v", s.Err())
	}
	m := s.Msg()
	kind := "delta"
	if m.Full {
		kind = "full"
	}
	out := fmt.Sprintf("%d %s", m.Generation, kind)
	for _, p := range m.Tasks {
		out += fmt.Sprintf(" %s:%s@%d", p.TaskId, p.Active, p.Epoch)
	}
	for _, id := range m.Removed {
		out += " -" + id
	}
	return out
}

// TestWatchAssignment: a new watcher gets a full copy and then each
// generation; one resuming from a kept generation gets exactly the later
// ones; one ahead of the node gets nothing meanwhile; a STANDBY serves it
// with STALE and refuses it without. Each generation (not a full copy)
// carries the time this node applied it.
func TestWatchAssignment(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	tr := transport.New()
	defer tr.CloseIdleConnections()
	w := watchClient{t, xcev1connect.NewControllerServiceClient(&http.Client{Transport: tr}, "http://"+ts.addr)}
	for _, id := range []string{"a", "b", "c"} {
		if _, err := w.cl.SubmitTask(ctxT(t), connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: id})); err != nil {
			t.Fatal(err)
		}
	}
	writeGeneration(t, node, 0, state.Placement{Task: "a", Active: "w1"}, state.Placement{Task: "b", Active: "w2"})

	s := w.open(0, xcev1.Consistency_CONSISTENCY_UNSPECIFIED)
	if got := next(t, s); got != "1 full a:w1@1 b:w2@1" {
		t.Fatalf("first message %q", got)
	}
	if at := s.Msg().AppliedAtUnixNano; at != 0 {
		t.Fatalf("a full copy carries an apply time: %d", at)
	}
	before := time.Now()
	writeGeneration(t, node, 1, state.Placement{Task: "a", Active: "w2"}, state.Placement{Task: "c", Active: "w1"})
	if got := next(t, s); got != "2 delta a:w2@2 c:w1@1" {
		t.Fatalf("generation 2: %q", got)
	}
	// A generation carries the time this node applied it.
	if at := time.Unix(0, s.Msg().AppliedAtUnixNano); at.Before(before) || at.After(time.Now()) {
		t.Fatalf("generation 2 applied at %v, want after %v and by now", at, before)
	}
	if _, err := w.cl.DeleteTask(ctxT(t), connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "b"})); err != nil {
		t.Fatal(err)
	}
	writeGeneration(t, node, 2)
	if got := next(t, s); got != "3 delta -b" {
		t.Fatalf("generation 3 (a deletion): %q", got)
	}

	r := w.open(1, xcev1.Consistency_CONSISTENCY_UNSPECIFIED)
	var got []string
	for range 2 {
		got = append(got, next(t, r))
	}
	if want := []string{"2 delta a:w2@2 c:w1@1", "3 delta -b"}; !slices.Equal(got, want) {
		t.Fatalf("resumed from 1: %q, want %q", got, want)
	}
	// A watcher ahead of this node gets nothing until the node has caught
	// up: never an older copy.
	ahead, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	s9, err := w.cl.WatchAssignment(ahead, connect.NewRequest(&xcev1.WatchAssignmentRequest{FromGeneration: 9}))
	// Either the call or its first Receive waits out the deadline (the
	// server ends the stream cleanly when the caller goes, or the client
	// reports the deadline): no message either way.
	if err == nil {
		if s9.Receive() {
			t.Fatalf("a watcher ahead of the node got %v", s9.Msg())
		}
		s9.Close()
	} else if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Fatalf("a watcher ahead of the node: %v, want nothing until its deadline", err)
	}

	node.setView(ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"})
	if got := next(t, w.open(0, xcev1.Consistency_CONSISTENCY_STALE)); got != "3 full a:w2@2 c:w1@1" {
		t.Fatalf("from a STANDBY, stale: %q", got)
	}
	lin, err := w.cl.WatchAssignment(ctxT(t), connect.NewRequest(&xcev1.WatchAssignmentRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer lin.Close()
	if lin.Receive() || connect.CodeOf(lin.Err()) != connect.CodeUnavailable {
		t.Fatalf("from a STANDBY, linearizable: %v, want NOT_READY", lin.Err())
	}
}

// TestWatchTasks: creations and deletions in commit order from the index
// a listing was read at, resumable from any index kept; from 0, only what
// comes after the call; an index no longer kept is OUT_OF_RANGE.
func TestWatchTasks(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	tr := transport.New()
	defer tr.CloseIdleConnections()
	cl := xcev1connect.NewControllerServiceClient(&http.Client{Transport: tr}, "http://"+ts.addr)
	submit := func(id string) {
		if _, err := cl.SubmitTask(ctxT(t), connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: id})); err != nil {
			t.Fatal(err)
		}
	}
	submit("a")
	l, err := cl.ListTasks(ctxT(t), connect.NewRequest(&xcev1.ListTasksRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	open := func(from uint64) *connect.ServerStreamForClient[xcev1.WatchTasksResponse] {
		s, err := cl.WatchTasks(ctxT(t), connect.NewRequest(&xcev1.WatchTasksRequest{FromIndex: from}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	recv := func(s *connect.ServerStreamForClient[xcev1.WatchTasksResponse]) string {
		t.Helper()
		if !s.Receive() {
			t.Fatalf("stream ended: %v", s.Err())
		}
		out := fmt.Sprintf("@%d", s.Msg().AppliedIndex)
		for _, e := range s.Msg().Events {
			kind := "+"
			if e.Deleted {
				kind = "-"
			}
			out += fmt.Sprintf(" %d%s%s", e.Index, kind, e.Task.TaskId)
		}
		return out
	}
	s := open(l.Msg.AppliedIndex)
	if got := recv(s); got != "@1" {
		t.Fatalf("first message %q", got)
	}
	submit("b")
	if _, err := cl.DeleteTask(ctxT(t), connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "a"})); err != nil {
		t.Fatal(err)
	}
	got := recv(s)
	if got == "@2 2+b" {
		got += " |" + recv(s)
	}
	if got != "@3 2+b 3-a" && got != "@2 2+b |@3 3-a" {
		t.Fatalf("events %q", got)
	}
	if got := recv(open(1)); got != "@3 2+b 3-a" {
		t.Fatalf("resumed from 1: %q", got)
	}
	if got := recv(open(0)); got != "@3" {
		t.Fatalf("from now on: %q", got)
	}
	var snap bytes.Buffer
	sn := node.fsm.Snapshot()
	if err := sn.Write(&snap); err != nil {
		t.Fatal(err)
	}
	sn.Release()
	if err := node.fsm.Restore(&snap); err != nil {
		t.Fatal(err)
	}
	r, err := cl.WatchTasks(ctxT(t), connect.NewRequest(&xcev1.WatchTasksRequest{FromIndex: 1}))
	if err == nil {
		if r.Receive() {
			t.Fatalf("from a compacted index: %v", r.Msg())
		}
		err = r.Err()
		r.Close()
	}
	if connect.CodeOf(err) != connect.CodeOutOfRange {
		t.Fatalf("from a compacted index: %v, want OUT_OF_RANGE", err)
	}
}

// TestWatchAssignmentSharedEncoding: every watcher of a node receives a
// generation built and encoded once, followed by its own fields (role,
// indexes); a JSON watcher receives the two merged.
func TestWatchAssignmentSharedEncoding(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	tr := transport.New()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	if _, err := xcev1connect.NewControllerServiceClient(hc, "http://"+ts.addr).SubmitTask(ctxT(t),
		connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "a"})); err != nil {
		t.Fatal(err)
	}
	writeGeneration(t, node, 0, state.Placement{Task: "a", Active: "w1"})
	watchers := map[string]watchClient{
		"proto": {t, xcev1connect.NewControllerServiceClient(hc, "http://"+ts.addr)},
		"json":  {t, xcev1connect.NewControllerServiceClient(hc, "http://"+ts.addr, connect.WithProtoJSON())},
	}
	streams := map[string]*connect.ServerStreamForClient[xcev1.WatchAssignmentResponse]{}
	for name, w := range watchers {
		streams[name] = w.open(0, xcev1.Consistency_CONSISTENCY_UNSPECIFIED)
	}
	writeGeneration(t, node, 1, state.Placement{Task: "a", Active: "w2"})
	for name, s := range streams {
		for _, want := range []string{"1 full a:w1@1", "2 delta a:w2@2"} {
			if got := next(t, s); got != want {
				t.Fatalf("%s watcher: %q, want %q", name, got, want)
			}
			if m := s.Msg(); m.Role != xcev1.Role_ROLE_PRIMARY || m.AppliedIndex == 0 || m.CommitIndex < m.AppliedIndex {
				t.Fatalf("%s watcher: role %v, applied %d, commit %d", name, m.Role, m.AppliedIndex, m.CommitIndex)
			}
		}
		if s.Msg().AppliedAtUnixNano == 0 {
			t.Fatalf("%s watcher: generation 2 without its apply time", name)
		}
	}
}

// writeAddr writes a worker's address through the node's log.
func writeAddr(t *testing.T, n *fakeNode, id, addr string) {
	t.Helper()
	b, err := state.EncodeWorkerAddr(id, addr)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := n.Apply(context.Background(), b); err != nil || r.Code != state.CodeOK {
		t.Fatalf("address of %s: %v %v", id, r, err)
	}
}

// TestWatchAssignmentWorkerAddrsFromStandby: a STANDBY, which has no
// worker sessions, sends the worker addresses its log holds on a STALE
// watch: all of them with a full copy, then those that changed.
func TestWatchAssignmentWorkerAddrsFromStandby(t *testing.T) {
	node := newFakeNode("n1", primary)
	ts := startServer(t, node, netio.DefaultLimits())
	tr := transport.New()
	defer tr.CloseIdleConnections()
	w := watchClient{t, xcev1connect.NewControllerServiceClient(&http.Client{Transport: tr}, "http://"+ts.addr)}
	for _, id := range []string{"a", "b"} {
		if _, err := w.cl.SubmitTask(ctxT(t), connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: id})); err != nil {
			t.Fatal(err)
		}
	}
	writeGeneration(t, node, 0, state.Placement{Task: "a", Active: "w1"})
	writeAddr(t, node, "w1", "w1.workers.test:7000")
	writeAddr(t, node, "w2", "w2.workers.test:7000")
	node.setView(ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: "127.0.0.1:7102"})

	s := w.open(0, xcev1.Consistency_CONSISTENCY_STALE)
	if got := next(t, s); got != "1 full a:w1@1" {
		t.Fatalf("first message %q", got)
	}
	want := map[string]string{"w1": "w1.workers.test:7000", "w2": "w2.workers.test:7000"}
	if got := s.Msg().WorkerAddrs; !maps.Equal(got, want) || s.Msg().Role != xcev1.Role_ROLE_STANDBY {
		t.Fatalf("full copy from a %v: addresses %v, want %v", s.Msg().Role, got, want)
	}
	writeAddr(t, node, "w2", "w2.workers.test:7001")
	writeAddr(t, node, "w3", "w3.workers.test:7000")
	writeGeneration(t, node, 1, state.Placement{Task: "b", Active: "w3"})
	if got := next(t, s); got != "2 delta b:w3@1" {
		t.Fatalf("generation 2: %q", got)
	}
	want = map[string]string{"w2": "w2.workers.test:7001", "w3": "w3.workers.test:7000"}
	if got := s.Msg().WorkerAddrs; !maps.Equal(got, want) {
		t.Fatalf("delta: addresses %v, want the changed ones %v", got, want)
	}
}

// TestWatchAssignmentWorkerAddrsGateClosed: a PRIMARY that may not write
// worker addresses yet (an older voter) adds its sessions' addresses to
// the log's; once it may, the log's are the ones sent.
func TestWatchAssignmentWorkerAddrsGateClosed(t *testing.T) {
	node := newFakeNode("n1", primary)
	node.cluster.addrsClosed = errors.New("a voter is on log format 5")
	writeAddr(t, node, "w1", "w1.workers.test:7000")
	svc, err := placement.New(node.Config().AssignorConfig(), node.FSM(), node.Apply, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The term ends at once: its loop never runs.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := svc.Run(ctx, 1); err != nil {
			t.Error(err)
		}
	})
	if _, err := svc.Register("w2", 1, "w2.workers.test:7000"); err != nil {
		t.Fatal(err)
	}
	path, h := dispatch.New(node, prometheus.NewRegistry(), svc)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	addr := serve(t, mux)
	tr := transport.New()
	defer tr.CloseIdleConnections()
	w := watchClient{t, xcev1connect.NewControllerServiceClient(&http.Client{Transport: tr}, "http://"+addr)}

	s := w.open(0, xcev1.Consistency_CONSISTENCY_STALE)
	next(t, s)
	want := map[string]string{"w1": "w1.workers.test:7000", "w2": "w2.workers.test:7000"}
	if got := s.Msg().WorkerAddrs; !maps.Equal(got, want) {
		t.Fatalf("gate closed: addresses %v, want %v", got, want)
	}
	node.cluster.mu.Lock()
	node.cluster.addrsClosed = nil
	node.cluster.mu.Unlock()
	s = w.open(0, xcev1.Consistency_CONSISTENCY_STALE)
	next(t, s)
	want = map[string]string{"w1": "w1.workers.test:7000"}
	if got := s.Msg().WorkerAddrs; !maps.Equal(got, want) {
		t.Fatalf("gate open: addresses %v, want the log's %v", got, want)
	}
}
