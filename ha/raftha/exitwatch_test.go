package raftha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/internal/testutil/script"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// The exit watch's decisions are tested by the scripts in
// testdata/exitwatch (TestExitWatchScripts); the test here runs it for
// real: three raft nodes, the leader's process exits, the others elect.

// trackingListener remembers the connections it accepted so a test can
// close them all, as the kernel does when a process exits.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
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
// (4 s heartbeat), so that any election within a second or two of a
// leader's loss is the exit watch's doing. mutate, when set, changes each
// node's Config before its raft starts.
func startWatchCluster(t *testing.T, mutate func(*Config)) []*watchNode {
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
	logs := &testutil.SyncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.SplitAfter(logs.String(), "\n")
			t.Logf("raft logs, last %d lines:\n%s", logTail, strings.Join(lines[max(0, len(lines)-logTail):], ""))
		}
	})
	for _, n := range nodes {
		store, err := persist.Open(t.TempDir(), persist.Options{NodeID: n.id, ClusterID: "w"})
		if err != nil {
			t.Fatal(err)
		}
		stream, err := peernet.NewStreamLayer(n.ln, n.addr, "")
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{NodeID: n.id, Peers: peers, HeartbeatTimeout: 4 * time.Second,
			ElectionTimeout: 4 * time.Second, LeaderLeaseTimeout: time.Second,
			CommitTimeout: 10 * time.Millisecond, SnapshotInterval: time.Hour, SnapshotThreshold: 1 << 30,
			TrailingLogs: 1024, DetectLeaderExit: true}
		if mutate != nil {
			mutate(&cfg)
		}
		logger := hclog.New(&hclog.LoggerOptions{Name: n.id, Output: logs, Level: hclog.Debug})
		r, err := Start(cfg, state.NewFSM("w"), store, stream, logger)
		if err != nil {
			t.Fatal(err)
		}
		n.r, n.store = r, store
	}
	t.Cleanup(func() {
		for _, n := range nodes {
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

const logTail = 300

// waitLeader waits until one live node other than except leads and has
// committed in its term.
func waitLeader(t *testing.T, nodes []*watchNode, except string, within time.Duration) *watchNode {
	t.Helper()
	var leader *watchNode
	testutil.Eventually(t, within, "a leader other than "+except, func() bool {
		for _, n := range nodes {
			if n.dead || n.id == except || n.r.View().State != ha.StateLeader {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := n.r.Barrier(ctx)
			cancel()
			if err == nil {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

// exit stops n the way a process exit looks from outside: its port
// refuses connections and every connection to it is closed.
func exit(n *watchNode) {
	n.dead = true
	_ = n.r.Shutdown()
	n.ln.closeConns()
}

// The followers hold their watch connections to the leader past the
// transport's first-byte timeout (they announce themselves with
// raft.WatchMarker), and when the leader's process exits they elect within
// milliseconds rather than after raft's 4 s heartbeat timeout, in one
// election. What the scripts cannot show: the real dial, hold, probe and
// vote through raft and its transport.
func TestExitWatchElectsAtOnceWhenTheLeaderExits(t *testing.T) {
	nodes := startWatchCluster(t, func(c *Config) { c.FirstByteTimeout = 100 * time.Millisecond })
	// The first election waits out the 4 s timeout: there is no leader to
	// watch yet.
	old := waitLeader(t, nodes, "", 20*time.Second)
	term := old.r.View().Term
	testutil.Eventually(t, 5*time.Second, "the followers' watches hold a connection to the leader", func() bool {
		for _, n := range nodes {
			if n != old && n.r.watch.holding.Load() != old.id {
				return false
			}
		}
		return true
	})
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
	testutil.Eventually(t, 5*time.Second, "the silent connection counted as a first-byte refusal", func() bool {
		return old.r.trans.TransportStats().FirstByte >= 1
	})
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
	// Raft alone would not elect before 4 s (the followers' heartbeat
	// timeout); the watch elects within milliseconds.
	nl := waitLeader(t, nodes, old.id, 2*time.Second)
	t.Logf("new leader %s %v after the exit", nl.id, time.Since(start).Round(time.Millisecond))
	// The survivors took turns: one election, no split vote.
	if got := nl.r.View().Term; got != term+1 {
		t.Errorf("term went from %d to %d, want one election", term, got)
	}
}

// TestExitWatchScripts runs the exit watch's scenarios in
// testdata/exitwatch/*.txt against exitMachine. Each command is an
// observation (what the watch's I/O saw) and its output the action the
// machine chose:
//
//	init self=n2 addr=n2:7200 heartbeat=200ms   a fresh machine; prints its timings
//	leader n1 addr=n1:7200 term=2 [state=candidate] [at=ms]   a poll's look ("leader none")
//	dial accepted|refused|failed [at=ms]
//	closed [at=ms]                      the held connection closed at the leader's end
//	probe accepted|refused|failed [at=ms]
//	voters n1 n2 n3                     ("voters" alone: raft could not say)
//	look term=3 [leader=n3] [state=candidate] [vote=n3:7200 vote-term=3]
//	raft wait=5ms | raft error="…"      the timed request to this node's raft
//	done                                the campaign or stand-down was carried out
//
// at= is the injected clock, in milliseconds from the start; it keeps its
// last value when not given.
func TestExitWatchScripts(t *testing.T) {
	script.RunDir(t, "testdata/exitwatch/*.txt", func(t *testing.T) script.Handler {
		s := &watchScript{}
		return s.run
	})
}

type watchScript struct {
	m     *exitMachine
	clock time.Time
}

var watchPhases = map[exitPhase]string{phaseIdle: "idle", phaseDialing: "dialing", phaseHolding: "holding",
	phaseProbing: "probing", phaseRank: "rank", phaseTurn: "turn", phaseRaft: "raft", phaseAgain: "again", phaseActing: "acting"}

func (s *watchScript) run(cmd string, a script.Args) (string, error) {
	if cmd == "init" {
		hb, err := time.ParseDuration(a.KV["heartbeat"])
		if err != nil {
			return "", fmt.Errorf("heartbeat: %v", err)
		}
		poll, stagger, busy := exitTimings(hb)
		m := newExitMachine(raft.ServerID(a.KV["self"]), a.KV["addr"], poll, stagger, busy)
		s.m, s.clock = &m, time.Unix(0, 0)
		return fmt.Sprintf("poll=%v stagger=%v busy=%v\n%s", poll, stagger, busy, showAction(s.m.poll())), nil
	}
	if s.m == nil {
		return "", errors.New("init first")
	}
	if at, err := a.Int("at", -1); err != nil {
		return "", err
	} else if at >= 0 {
		s.clock = time.Unix(0, 0).Add(time.Duration(at) * time.Millisecond)
	}
	o := exitObs{now: s.clock}
	var err error
	switch cmd {
	case "leader":
		o.kind = obsLeader
		err = s.raftState(&o, a)
	case "dial", "probe":
		o.kind = obsDialed
		if cmd == "probe" {
			o.kind = obsProbed
		}
		var w string
		if w, err = a.Word("result"); err == nil {
			o.dial, err = parseDial(w)
		}
	case "closed":
		o.kind = obsClosed
	case "voters":
		o.kind = obsVoters
		for _, id := range a.Words {
			o.voters = append(o.voters, raft.ServerID(id))
		}
	case "look":
		o.kind = obsLooked
		err = s.raftState(&o, a)
		o.voteFor = a.KV["vote"]
		if err == nil {
			var vt int64
			vt, err = a.Int("vote-term", 0)
			o.voteTerm = uint64(vt)
		}
	case "raft":
		o.kind = obsAnswered
		if e, ok := a.KV["error"]; ok {
			o.err = errors.New(e)
		} else {
			o.wait, err = time.ParseDuration(a.KV["wait"])
		}
	case "done":
		o.kind = obsDone
	default:
		return "", fmt.Errorf("unknown command %q", cmd)
	}
	if err != nil {
		return "", err
	}
	if !s.m.expects(o.kind) {
		return "", fmt.Errorf("phase %s does not await %s", watchPhases[s.m.phase], cmd)
	}
	return showAction(s.m.step(o)), nil
}

// raftState fills what raft says: "leader n1 addr=… term=…", "leader none
// term=…", "look leader=n1 term=…", with state= (default follower).
func (s *watchScript) raftState(o *exitObs, a script.Args) error {
	term, err := a.Int("term", 0)
	if err != nil {
		return err
	}
	o.term = uint64(term)
	state := a.KV["state"]
	o.follower = state == "" || state == "follower"
	leader := a.KV["leader"]
	if len(a.Words) == 1 {
		leader = a.Words[0]
	}
	if leader != "" && leader != "none" {
		o.leader = raft.ServerID(leader)
		o.addr = a.KV["addr"]
		if o.addr == "" {
			o.addr = leader + ":7200"
		}
	}
	return nil
}

func parseDial(w string) (dialResult, error) {
	switch w {
	case "accepted":
		return dialAccepted, nil
	case "refused":
		return dialRefused, nil
	case "failed":
		return dialFailed, nil
	case "timedout":
		return dialTimedOut, nil
	}
	return 0, fmt.Errorf("dial result %q: want accepted, refused, failed or timedout", w)
}

func showAction(a exitAction) string {
	switch a.kind {
	case actPoll:
		return "poll"
	case actDial:
		return fmt.Sprintf("dial %s at %s", a.leader, a.addr)
	case actHold:
		if a.announce {
			return fmt.Sprintf("hold %s (log: watching)", a.leader)
		}
		return fmt.Sprintf("hold %s", a.leader)
	case actProbe:
		if a.delay > 0 {
			return fmt.Sprintf("probe %s after %v", a.addr, a.delay)
		}
		return fmt.Sprintf("probe %s", a.addr)
	case actBackoff:
		return fmt.Sprintf("back off %v, then poll", a.delay)
	case actVoters:
		return fmt.Sprintf("%s is gone: read the voters", a.leader)
	case actLook:
		if a.delay > 0 && a.termPast > 0 {
			return fmt.Sprintf("look after %v, or once the term passes %d", a.delay, a.termPast)
		}
		if a.delay > 0 {
			return fmt.Sprintf("look after %v", a.delay)
		}
		return "look"
	case actTimeRaft:
		return "time raft"
	case actCampaign:
		return fmt.Sprintf("campaign (rank %d)", a.rank)
	case actStandDown:
		switch a.reason {
		case standUnreachable:
			return "stand down: raft unreachable: " + a.err.Error()
		case standBusy:
			return fmt.Sprintf("stand down: raft busy for %v", a.wait)
		case standElectionBegan:
			return "stand down: an election began"
		}
		return "stand down: not lost any more"
	}
	return fmt.Sprintf("action %d", a.kind)
}
