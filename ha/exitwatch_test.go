package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/netio"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// trackingListener remembers the connections it accepted so a test can
// close them all, as the kernel does when a process exits.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
	// paused keeps the port bound when raft closes the listener, as for a
	// stopped process: the kernel still completes connections to it.
	paused atomic.Bool
}

func (l *trackingListener) Close() error {
	if l.paused.Load() {
		return nil
	}
	return l.Listener.Close()
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

type watchNode struct {
	id    string
	addr  string
	ln    *trackingListener
	r     *Raft
	store *persist.Store
	dead  bool
}

// startWatchCluster runs three raft nodes in process with long timeouts
// (4 s heartbeat), so that any election within a second or two of a leader's
// loss is the exit watch's doing.
func startWatchCluster(t *testing.T) []*watchNode {
	t.Helper()
	return startWatchClusterWrapped(t, nil)
}

// startWatchClusterWrapped is startWatchCluster with each node's store and
// stream layer handed to wrap, when set, before its raft starts: it may put
// wrappers around the log and stable stores, and returns the stream layer
// raft and the exit watch are to use. wrap is called for one node after
// another on the test's goroutine.
func startWatchClusterWrapped(t *testing.T, wrap func(n *watchNode, store *persist.Store, stream raft.StreamLayer) raft.StreamLayer) []*watchNode {
	t.Helper()
	return startWatchClusterWith(t, wrap, nil)
}

// startWatchClusterWith is startWatchClusterWrapped with each node's
// RaftConfig passed through mutate, when set, before its raft starts.
func startWatchClusterWith(t *testing.T, wrap func(n *watchNode, store *persist.Store, stream raft.StreamLayer) raft.StreamLayer,
	mutate func(*RaftConfig)) []*watchNode {
	t.Helper()
	var nodes []*watchNode
	var peers []Peer
	for i := 0; i < 3; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		n := &watchNode{id: fmt.Sprintf("n%d", i+1), addr: l.Addr().String(), ln: &trackingListener{Listener: l}}
		nodes = append(nodes, n)
		peers = append(peers, Peer{ID: n.id, Addr: n.addr})
	}
	// The nodes' raft and watch logs, printed when the test fails.
	logs := &lockedLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("raft logs, last %d lines:\n%s", logTail, logs.tail(logTail))
		}
	})
	for _, n := range nodes {
		store, err := persist.Open(t.TempDir(), persist.Options{NodeID: n.id, ClusterID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := netio.NewStreamLayer(n.ln, n.addr, "")
		if err != nil {
			t.Fatal(err)
		}
		var stream raft.StreamLayer = ns
		if wrap != nil {
			stream = wrap(n, store, stream)
		}
		cfg := RaftConfig{NodeID: n.id, Peers: peers, HeartbeatTimeout: 4 * time.Second,
			ElectionTimeout: 4 * time.Second, LeaderLeaseTimeout: time.Second,
			CommitTimeout: 10 * time.Millisecond, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30,
			TrailingLogs: 1024, DetectLeaderExit: true}
		if mutate != nil {
			mutate(&cfg)
		}
		logger := hclog.New(&hclog.LoggerOptions{Name: n.id, Output: logs, Level: hclog.Debug})
		r, err := StartRaft(cfg, state.NewFSM("w"), store, stream, logger)
		if err != nil {
			t.Fatal(err)
		}
		n.r, n.store = r, store
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.ln.paused.Store(false)
			_ = n.ln.Close()
			if !n.dead {
				_ = n.r.Shutdown()
				n.ln.closeConns()
			}
			_ = n.store.Close()
		}
	})
	return nodes
}

// startWatchClusterLogs is startWatchCluster with each node's log store
// passed through wrap; it returns the wrapped stores by node id.
func startWatchClusterLogs[L raft.LogStore](t *testing.T, wrap func(raft.LogStore) L) ([]*watchNode, map[string]L) {
	t.Helper()
	wrapped := map[string]L{}
	nodes := startWatchClusterWrapped(t, func(n *watchNode, store *persist.Store, stream raft.StreamLayer) raft.StreamLayer {
		l := wrap(store.Logs)
		wrapped[n.id] = l
		store.Logs = l
		return stream
	})
	return nodes, wrapped
}

const logTail = 300

// lockedLog collects the log lines of a test's nodes.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// tail returns the last n lines.
func (l *lockedLog) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.SplitAfter(l.buf.String(), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

// waitLeader polls until one live node other than except leads and has
// committed in its term.
func waitLeader(t *testing.T, nodes []*watchNode, except string, within time.Duration) *watchNode {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		for _, n := range nodes {
			if n.dead || n.id == except || n.r.View().State != StateLeader {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := n.r.Barrier(ctx)
			cancel()
			if err == nil {
				return n
			}
		}
	}
	return nil
}

// exit stops n the way a process exit looks from outside: its port
// refuses connections and every connection to it is closed.
func exit(n *watchNode) {
	n.dead = true
	_ = n.r.Shutdown()
	n.ln.closeConns()
}

func TestExitWatchElectsAtOnceWhenTheLeaderExits(t *testing.T) {
	nodes := startWatchCluster(t)
	// The first election waits out the 4 s timeout: there is no leader to
	// watch yet.
	old := waitLeader(t, nodes, "", 20*time.Second)
	if old == nil {
		t.Fatal("no first leader")
	}
	term := old.r.View().Term
	// Give the followers time to attach their watch (a few polls).
	waitAttached(t, nodes, old)

	start := time.Now()
	exit(old)
	// Raft alone would not elect before 4 s (the followers' heartbeat
	// timeout); the watch elects within milliseconds.
	nl := waitLeader(t, nodes, old.id, 2*time.Second)
	if nl == nil {
		t.Fatalf("no new leader within 2 s of the leader's exit (raft's own timeout is 4 s)")
	}
	t.Logf("new leader %s %v after the exit", nl.id, time.Since(start))
	// The survivors took turns: one election, no split vote.
	if got := nl.r.View().Term; got != term+1 {
		t.Errorf("term went from %d to %d, want one election", term, got)
	}
}

func TestExitWatchIgnoresALeaderThatStillListens(t *testing.T) {
	nodes := startWatchCluster(t)
	old := watchedLeader(t, nodes)

	// The leader stops and its connections close, but its port stays bound
	// (a paused process, a proxy, a new process that inherited the socket):
	// that is not an exit.
	old.ln.paused.Store(true)
	exit(old)
	if nl := waitLeader(t, nodes, old.id, 1500*time.Millisecond); nl != nil {
		t.Fatalf("%s was elected within 1.5 s although the old leader's port still accepts (heartbeat timeout 4 s)", nl.id)
	}
}

// waitAttached polls until every follower's watch holds a connection to
// leader.
func waitAttached(t *testing.T, nodes []*watchNode, leader *watchNode) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		all := true
		for _, n := range nodes {
			if n != leader && n.r.watch.holding.Load() != leader.id {
				all = false
			}
		}
		if all {
			return
		}
	}
	t.Fatal("the followers' watches did not connect to the leader")
}

// A survivor stands down only for a vote it gave, in the current term, to
// another survivor: not for its vote for the lost leader or for itself, and
// not for a vote in an older term (a candidate it refused never got one).
func TestVotedForOther(t *testing.T) {
	self, lost, other := []byte("127.0.0.1:1"), []byte("127.0.0.1:2"), []byte("127.0.0.1:3")
	for _, c := range []struct {
		name     string
		voteTerm uint64
		cand     []byte
		want     bool
	}{
		{"no vote yet", 0, nil, false},
		{"voted for the lost leader in this term", 7, lost, false},
		{"voted for itself", 7, self, false},
		{"voted for another survivor in this term", 7, other, true},
		{"voted for another survivor in an older term", 6, other, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := raft.NewInmemStore()
			if c.cand != nil {
				if err := st.SetUint64(keyLastVoteTerm, c.voteTerm); err != nil {
					t.Fatal(err)
				}
				if err := st.Set(keyLastVoteCand, c.cand); err != nil {
					t.Fatal(err)
				}
			}
			if got := votedFor(st, 7, self, lost); got != c.want {
				t.Errorf("votedFor = %v, want %v", got, c.want)
			}
		})
	}
}

// stallingLogs holds StoreLogs, once armed, until released: a follower
// whose raft is stuck behind a slow disk.
type stallingLogs struct {
	raft.LogStore
	armed   atomic.Bool
	stalled chan struct{} // closed when a StoreLogs is held
	release chan struct{}
	once    sync.Once
}

func (s *stallingLogs) StoreLogs(logs []*raft.Log) error {
	if s.armed.Load() {
		s.once.Do(func() { close(s.stalled) })
		<-s.release
	}
	return s.LogStore.StoreLogs(logs)
}

// A survivor whose raft is busy when the leader exits leaves the election
// to the other: were it to start one when its raft catches up, it would
// run against the survivor it has just voted for and cost a second
// election (a split vote, then raft's 4 s timeout).
func TestExitWatchBusySurvivorStandsDown(t *testing.T) {
	nodes, stalls := startWatchClusterLogs(t, func(logs raft.LogStore) *stallingLogs {
		return &stallingLogs{LogStore: logs, stalled: make(chan struct{}), release: make(chan struct{})}
	})
	old := watchedLeader(t, nodes)
	term := old.r.View().Term
	// Survivors in id order: the first takes its turn at once, the second
	// a quarter of the heartbeat timeout later.
	first, second := survivors(nodes, old)
	stall := stalls[first.id]
	released := false
	defer func() {
		if !released {
			close(stall.release)
		}
	}()
	stall.armed.Store(true)
	// A write the leader commits with the second survivor while the first
	// is stuck storing it.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, _ = old.r.Apply(ctx, (&state.Command{Type: state.CmdNoop}).Encode())
	}()
	select {
	case <-stall.stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the first survivor's raft never got the write to store")
	}
	exit(old)
	// The second survivor's turn comes and it stands as candidate; it
	// needs the first one's vote, which comes when its raft is free again.
	if err := pollUntil(5*time.Second, func() bool { return second.r.View().State == StateCandidate }); err != nil {
		t.Fatalf("%s did not stand for election after the leader's exit", second.id)
	}
	close(stall.release)
	released = true
	nl := waitLeader(t, nodes, old.id, 3*time.Second)
	if nl != second {
		t.Fatalf("new leader %v, want %s (elected with the busy survivor's vote)", nl, second.id)
	}
	// The busy survivor must not run against it once its raft is free.
	if nl := waitTermChange(nodes, term+1, time.Second); nl != 0 {
		t.Fatalf("term moved from %d to %d: the busy survivor ran against the new leader", term+1, nl)
	}
}

// waitTermChange polls for up to within for a live node whose term is not
// want and returns that term, or 0.
func waitTermChange(nodes []*watchNode, want uint64, within time.Duration) uint64 {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		for _, n := range nodes {
			if n.dead {
				continue
			}
			if got := n.r.View().Term; got != want {
				return got
			}
		}
	}
	return 0
}

// watchedLeader waits for the first leader and for both followers' watches
// to hold a connection to it.
func watchedLeader(t *testing.T, nodes []*watchNode) *watchNode {
	t.Helper()
	old := waitLeader(t, nodes, "", 20*time.Second)
	if old == nil {
		t.Fatal("no first leader")
	}
	waitAttached(t, nodes, old)
	return old
}

// survivors returns the nodes other than old, in id order.
func survivors(nodes []*watchNode, old *watchNode) (first, second *watchNode) {
	for _, n := range nodes {
		if n == old {
			continue
		}
		if first == nil {
			first = n
		} else {
			second = n
		}
	}
	return first, second
}

// slowStable is a stable store on a slow disk: once armed, storing a vote
// takes delay.
type slowStable struct {
	raft.StableStore
	armed atomic.Bool
	delay time.Duration
}

func (s *slowStable) SetUint64(key []byte, v uint64) error {
	if s.armed.Load() && bytes.Equal(key, keyLastVoteTerm) {
		time.Sleep(s.delay) // the slow disk under test, not a wait for a condition
	}
	return s.StableStore.SetUint64(key, v)
}

// heldDial is a stream layer whose dials to one address, once armed, wait
// until the node's term has moved past the term it was armed in: the exit
// watch then finds the leader gone only after another survivor's vote
// request has reached this node's raft.
type heldDial struct {
	raft.StreamLayer
	node  *watchNode
	addr  atomic.Pointer[string]
	term  atomic.Uint64
	moved chan struct{} // closed when a held dial saw the term move
	once  sync.Once
}

func (d *heldDial) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if held := d.addr.Load(); held != nil && *held == string(addr) {
		_ = pollUntil(10*time.Second, func() bool { return d.node.r.View().Term != d.term.Load() })
		d.once.Do(func() { close(d.moved) })
	}
	return d.StreamLayer.Dial(addr, timeout)
}

// A survivor that finds the leader gone only after another survivor's vote
// request has reached it must leave that election to finish. Raft forgets
// the leader, takes the candidate's term and only then stores its vote; a
// watch that paired the leader it saw before with the term it read after
// took the vote request for an election of its own, found no vote stored
// yet, and ran against the candidate it was voting for.
func TestExitWatchLeavesAnElectionThatReachedIt(t *testing.T) {
	dials := map[string]*heldDial{}
	stables := map[string]*slowStable{}
	nodes := startWatchClusterWrapped(t, func(n *watchNode, store *persist.Store, stream raft.StreamLayer) raft.StreamLayer {
		d := &heldDial{StreamLayer: stream, node: n, moved: make(chan struct{})}
		st := &slowStable{StableStore: store.Stable, delay: 100 * time.Millisecond}
		dials[n.id], stables[n.id] = d, st
		store.Stable = st
		return d
	})
	old := watchedLeader(t, nodes)
	term := old.r.View().Term
	first, second := survivors(nodes, old)
	// The first survivor's watch would act at once; hold its dials to the
	// leader until the second survivor's vote request has moved its term.
	// Its vote then takes 100 ms to store, well inside the time its raft
	// may take to answer and still count as free.
	d := dials[first.id]
	d.term.Store(term)
	d.addr.Store(&old.addr)
	stables[first.id].armed.Store(true)
	exit(old)
	select {
	case <-d.moved:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s's term never moved: %s did not stand for election", first.id, second.id)
	}
	nl := waitLeader(t, nodes, old.id, 5*time.Second)
	if nl != second {
		t.Fatalf("new leader %v, want %s", nl, second.id)
	}
	if nl := waitTermChange(nodes, term+1, time.Second); nl != 0 {
		t.Fatalf("term moved from %d to %d: %s ran against the candidate it voted for", term+1, nl, first.id)
	}
}

// failingLogs fails every StoreLogs while armed: a follower whose disk
// refuses writes, so that its log falls behind.
type failingLogs struct {
	raft.LogStore
	armed  atomic.Bool
	failed chan struct{} // closed at the first failed StoreLogs
	once   sync.Once
}

func (f *failingLogs) StoreLogs(logs []*raft.Log) error {
	if f.armed.Load() {
		f.once.Do(func() { close(f.failed) })
		return errors.New("disk refuses writes")
	}
	return f.LogStore.StoreLogs(logs)
}

// When the survivor whose turn comes first has a log behind the other's,
// the other refuses it its vote and must then run itself at its turn,
// rather than leave the cluster leaderless until raft's heartbeat timeout
// (4 to 8 s here).
func TestExitWatchRunsAfterRefusingABehindCandidate(t *testing.T) {
	nodes, fails := startWatchClusterLogs(t, func(logs raft.LogStore) *failingLogs {
		return &failingLogs{LogStore: logs, failed: make(chan struct{})}
	})
	old := watchedLeader(t, nodes)
	first, second := survivors(nodes, old)
	// A write the leader commits with the second survivor only.
	f := fails[first.id]
	f.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, _, err := old.r.Apply(ctx, (&state.Command{Type: state.CmdNoop}).Encode())
	cancel()
	if err != nil {
		t.Fatalf("write with one follower: %v", err)
	}
	select {
	case <-f.failed:
	case <-time.After(5 * time.Second):
		t.Fatal("the first survivor never got the write")
	}
	exit(old)
	f.armed.Store(false)
	start := time.Now()
	// The first survivor runs at once and is refused; the second's turn
	// comes a quarter of the heartbeat timeout (1 s) later.
	nl := waitLeader(t, nodes, old.id, 3500*time.Millisecond)
	if nl != second {
		t.Fatalf("new leader %v after %v, want %s (elected at its turn, well before raft's heartbeat timeout)",
			nl, time.Since(start).Round(time.Millisecond), second.id)
	}
	t.Logf("%s leads %v after the exit", nl.id, time.Since(start).Round(time.Millisecond))
}

// The watch's connection announces itself (raft.WatchMarker): the leader's
// transport holds it past the first-byte timeout that closes a silent
// connection, counts nothing for it, and the watch still elects at once
// when the leader exits.
func TestExitWatchOutlivesTheFirstByteTimeout(t *testing.T) {
	nodes := startWatchClusterWith(t, nil, func(c *RaftConfig) { c.FirstByteTimeout = 100 * time.Millisecond })
	old := watchedLeader(t, nodes)
	// A silent connection, dialled after the watches', is closed for its
	// silence: the watches have then been held past the timeout.
	c, err := net.Dial("tcp", old.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a silent connection")
	}
	if err := pollUntil(5*time.Second, func() bool { return old.r.trans.TransportStats().FirstByte >= 1 }); err != nil {
		t.Fatalf("the silent connection was not counted: %+v", old.r.trans.TransportStats())
	}
	if s := old.r.trans.TransportStats(); s.Total() != 1 || s.FirstByte != 1 {
		t.Errorf("leader's transport stats %+v, want the silent connection's first-byte refusal only", s)
	}
	for _, n := range nodes {
		if n != old && n.r.watch.holding.Load() != old.id {
			t.Errorf("%s's watch no longer holds its connection to %s", n.id, old.id)
		}
	}
	start := time.Now()
	exit(old)
	nl := waitLeader(t, nodes, old.id, 2*time.Second)
	if nl == nil {
		t.Fatal("no new leader within 2 s of the leader's exit (raft's own timeout is 4 s)")
	}
	t.Logf("new leader %s %v after the exit", nl.id, time.Since(start).Round(time.Millisecond))
}

// olderStream accepts connections as a transport that predates
// raft.WatchMarker does: one that begins with it is closed at once.
type olderStream struct {
	raft.StreamLayer
	closed *atomic.Int64 // watch connections closed
}

func (s *olderStream) Accept() (net.Conn, error) {
	c, err := s.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &olderConn{Conn: c, closed: s.closed}, nil
}

type olderConn struct {
	net.Conn
	closed *atomic.Int64
	read   bool // the first byte has been read (by the handler's goroutine only)
}

func (c *olderConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.read && n > 0 {
		c.read = true
		if p[0] == raft.WatchMarker {
			c.closed.Add(1)
			_ = c.Conn.Close()
			return 0, io.EOF
		}
	}
	return n, err
}

// A leader whose transport does not know the watch's marker closes its
// connection at once: the watch backs off between dials rather than spin,
// and still finds the exited leader's port refused well before raft's own
// timeout.
func TestExitWatchBacksOffFromAnOlderLeader(t *testing.T) {
	var closed atomic.Int64
	nodes := startWatchClusterWrapped(t, func(n *watchNode, store *persist.Store, stream raft.StreamLayer) raft.StreamLayer {
		return &olderStream{StreamLayer: stream, closed: &closed}
	})
	old := waitLeader(t, nodes, "", 20*time.Second)
	if old == nil {
		t.Fatal("no first leader")
	}
	if err := pollUntil(5*time.Second, func() bool { return closed.Load() >= 1 }); err != nil {
		t.Fatal("no watch connection reached the leader")
	}
	// Each follower's watch doubles its wait after each drop, from its poll
	// (50 ms) up to a second: ten drops between two followers take
	// several hundred milliseconds; a watch that spun would take a few.
	from, start := closed.Load(), time.Now()
	if err := pollUntil(10*time.Second, func() bool { return closed.Load() >= from+10 }); err != nil {
		t.Fatalf("the watches stopped dialling: %d drops", closed.Load()-from)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("10 dropped watch connections within %v: the watch does not back off", took)
	}
	term := old.r.r.CurrentTerm()
	start = time.Now()
	exit(old)
	// Found through a refused dial: a survivor campaigns well before
	// raft's own timeout. Both may act at once here (each found the exit at
	// its own point of its backoff, so their stagger does not part them);
	// raft then settles the split vote after an election timeout.
	if err := pollUntil(3*time.Second, func() bool {
		for _, n := range nodes {
			if n != old && n.r.r.CurrentTerm() > term {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no survivor campaigned within 3 s of the leader's exit (raft's own timeout is 4 s)")
	}
	nl := waitLeader(t, nodes, old.id, 20*time.Second)
	if nl == nil {
		t.Fatal("no new leader within 20 s of the leader's exit")
	}
	t.Logf("new leader %s %v after the exit", nl.id, time.Since(start).Round(time.Millisecond))
}
