package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func singleConfig(t *testing.T, dir string) *configs.Config {
	t.Helper()
	ca, pa := freeAddr(t), freeAddr(t)
	cfg := configs.Default()
	cfg.NodeID, cfg.ClusterID, cfg.DataDir = "n1", "t", filepath.Join(dir, "n1")
	cfg.ClientAddr, cfg.PeerAddr = ca, pa
	cfg.Peers = []configs.Peer{{ID: "n1", PeerAddr: pa, ClientAddr: ca}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return &cfg
}

// withRaft gives o a state machine and the Raft backend, started as server
// starts it (without peer TLS) on a listener at o.Config's peer address.
func withRaft(t *testing.T, o Options) Options {
	t.Helper()
	if o.FSM == nil {
		o.FSM = state.NewFSM(o.Config.ClusterID)
	}
	rc := o.Config.RaftConfig()
	addr, _ := rc.PeerListen()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() }) // raft closes it first once started
	fsm, log := o.FSM, logging.NewHCLog(o.Logger, "raft")
	o.Election = Election{Name: configs.BackendRaft, ElectingHint: rc.ElectingHint(), Start: func(store *persist.Store) (ha.Backend, error) {
		return raftha.StartOn(rc, fsm, store, ln, nil, log)
	}}
	return o
}

// noElection is the backend of a node whose tests never run it.
var noElection = Election{Name: configs.BackendRaft, Start: func(*persist.Store) (ha.Backend, error) {
	return nil, errors.New("this test starts no election backend")
}}

// recorder is a leader service that records its terms: the role the node
// showed when Start ran, the term Run began, and Run's return.
type recorder struct {
	node                 *Node
	started              chan ha.Role
	established, revoked chan uint64
}

func newRecorder() *recorder {
	return &recorder{started: make(chan ha.Role, 4), established: make(chan uint64, 4), revoked: make(chan uint64, 4)}
}

func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Start(uint64) error {
	r.started <- r.node.View().Role
	return nil
}
func (r *recorder) Run(ctx context.Context, term uint64) error {
	r.established <- term
	<-ctx.Done()
	r.revoked <- term
	return nil
}

// failing is a leader service whose Run fails after a while in each term.
type failing struct{ after time.Duration }

func (failing) Name() string { return "failing" }
func (f failing) Run(ctx context.Context, _ uint64) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(f.after):
		return errors.New("lost its resource")
	}
}

// TestSingleNodeLifecycle runs a one-node cluster in process: it answers
// from INIT, elects itself, starts leader services once, applies a write,
// revokes on stop and leaves no goroutine behind.
func TestSingleNodeLifecycle(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	cfg := singleConfig(t, dir)
	rec := newRecorder()
	phase2 := make(chan ha.Role, 4)
	n, err := New(withRaft(t, Options{Config: cfg, Logger: zerolog.Nop(), Services: []LeaderService{rec},
		Phase2: []func(ha.Role){func(r ha.Role) { phase2 <- r }}}))
	if err != nil {
		t.Fatal(err)
	}
	rec.node = n
	if r := n.View().Role; r != ha.RoleInit {
		t.Fatalf("before Run: %s", r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, nil) }()

	testutil.Eventually(t, 5*time.Second, "PRIMARY", func() bool { return n.View().Serving() })
	if r := <-rec.started; r == ha.RolePrimary {
		t.Fatal("Start ran after the node served as PRIMARY")
	}
	if term := <-rec.established; term == 0 {
		t.Fatal("established in term 0")
	}
	if r := <-phase2; r != ha.RolePrimary {
		t.Fatalf("phase 2 ran with %s", r)
	}
	cmd := state.Command{Type: state.CmdSubmitTask, ClientID: "c", RequestID: "r", Task: state.Task{ID: "a"}}
	res, err := n.Apply(context.Background(), cmd.Encode())
	if err != nil || res.Code != state.CodeOK {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if err := n.ReadBarrier(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.FSM().Task("a"); !ok {
		t.Fatal("task missing after a linearizable read barrier")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-rec.revoked:
	default:
		t.Fatal("leader service not revoked on stop")
	}
	if len(phase2) != 0 {
		t.Fatal("phase 2 ran more than once")
	}
	testutil.Eventually(t, 5*time.Second, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before+1 })
}

// TestRestartDoesNotBootstrapAgain restarts a node on its data: it keeps its
// state and its term grows.
func TestRestartKeepsStateAndTermGrows(t *testing.T) {
	dir := t.TempDir()
	cfg := singleConfig(t, dir)
	run := func() (uint64, int) {
		n, err := New(withRaft(t, Options{Config: cfg, Logger: zerolog.Nop()}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx, nil) }()
		testutil.Eventually(t, 5*time.Second, "PRIMARY", func() bool { return n.View().Serving() })
		cmd := state.Command{Type: state.CmdSubmitTask, ClientID: "c", RequestID: fmt.Sprint(time.Now().UnixNano()), Task: state.Task{ID: fmt.Sprint("t", time.Now().UnixNano())}}
		if _, err := n.Apply(context.Background(), cmd.Encode()); err != nil {
			t.Fatal(err)
		}
		term, tasks := n.View().Term, n.FSM().NumTasks()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return term, tasks
	}
	t1, n1 := run()
	t2, n2 := run()
	if t2 <= t1 {
		t.Fatalf("term %d after restart, was %d", t2, t1)
	}
	if n2 != n1+1 {
		t.Fatalf("tasks %d after restart, want %d", n2, n1+1)
	}
}

func TestLockedDataDirFailsFast(t *testing.T) {
	dir := t.TempDir()
	cfg := singleConfig(t, dir)
	s, err := persist.Open(cfg.DataDir, persist.Options{NodeID: "n1", ClusterID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, err := New(withRaft(t, Options{Config: cfg, Logger: zerolog.Nop()}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = n.Run(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), cfg.DataDir) {
		t.Fatalf("Run on a locked dir: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("took %v to fail", d)
	}
	if _, statErr := os.Stat(cfg.DataDir); statErr != nil {
		t.Fatal(statErr)
	}
}

// TestFenceLeavesPrimaryForTheTerm: a fencing report makes the node leave
// PRIMARY and not come back in that term, even when no peer can take over.
func TestFenceLeavesPrimaryForTheTerm(t *testing.T) {
	dir := t.TempDir()
	cfg := singleConfig(t, dir)
	n, err := New(withRaft(t, Options{Config: cfg, Logger: zerolog.Nop()}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testutil.Eventually(t, 5*time.Second, "PRIMARY", func() bool { return n.View().Serving() })
	term := n.View().Term
	n.Fence(term, "a newer producer owns the epoch")
	n.Fence(term, "reported twice") // never blocks
	testutil.Eventually(t, 2*time.Second, "leaving PRIMARY", func() bool { return n.View().Role != ha.RolePrimary })
	if v := n.View(); v.Term == term && !strings.Contains(v.Reason, "fenced") {
		t.Errorf("reason %q after the fence", v.Reason)
	}
	// A lone node keeps raft leadership (no peer to hand it to) but must
	// not serve as PRIMARY again in the fenced term.
	// Every role change replaces the view, so watching the views published
	// over 1.5 s sees any return to PRIMARY.
	window := time.After(1500 * time.Millisecond)
	for v := n.View(); ; v = n.View() {
		if v.Role == ha.RolePrimary && v.Term == term {
			t.Fatalf("PRIMARY again in fenced term %d", term)
		}
		select {
		case <-v.Changed():
		case <-window:
			return
		}
	}
}

// TestFailedServiceHandsLeadershipOn: a service whose Run fails while the
// node is PRIMARY ends the term's services and makes the node leave PRIMARY
// for the rest of the term, as a fencing does.
func TestFailedServiceHandsLeadershipOn(t *testing.T) {
	dir := t.TempDir()
	cfg := singleConfig(t, dir)
	rec := newRecorder()
	logs := &testutil.SyncBuffer{}
	n, err := New(withRaft(t, Options{Config: cfg, Logger: zerolog.New(logs), Services: []LeaderService{rec, failing{after: 100 * time.Millisecond}}}))
	if err != nil {
		t.Fatal(err)
	}
	rec.node = n
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testutil.Eventually(t, 5*time.Second, "PRIMARY", func() bool { return n.View().Serving() })
	term := <-rec.established
	select {
	case got := <-rec.revoked:
		if got != term {
			t.Fatalf("revoked term %d, ran %d", got, term)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the other services of the term still run after one failed")
	}
	testutil.Eventually(t, 2*time.Second, "leaving PRIMARY", func() bool { return n.View().Role != ha.RolePrimary })
	if v := n.View(); v.Term == term && !strings.Contains(v.Reason, "failing: lost its resource") {
		t.Errorf("reason %q after the failure", v.Reason)
	}
	if !strings.Contains(logs.String(), "a leader service failed to start; handing leadership on") {
		t.Errorf("no log line for the failure:\n%s", logs.String())
	}
}
