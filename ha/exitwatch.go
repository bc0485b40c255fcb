package ha

import (
	"bytes"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// exitWatch lets a follower start an election as soon as the leader's
// process has exited, instead of waiting out the heartbeat timeout.
//
// While this node follows a leader it holds one idle TCP connection to the
// leader's peer address. Its first and only byte is raft.WatchMarker, which
// makes it a watcher for the leader's transport: held open with no
// first-byte or idle deadline and never counted as a refusal (a leader
// whose transport predates the marker closes it at once, which the watch
// takes for a dropped connection, below). When the leader's process exits,
// for whatever reason (SIGKILL included), its kernel closes that
// connection; if the peer port then refuses a new one, nothing listens
// there any more and the leader is certainly gone. The follower then does what a leadership transfer does:
// it becomes a candidate at once, skipping the pre-vote, and the other voters
// grant their vote although they still have a leader. The voters that
// noticed wait their rank among the surviving voters (sorted by id) times a
// stagger before acting, and act only if no new leader has appeared
// meanwhile and their own raft is not busy with a backlog, so two followers
// do not split the vote and a late candidacy does not unseat a new leader.
//
// Only a refused connection counts. A partitioned, paused or overloaded
// leader never refuses (its port either answers or times out), and an
// upgrade in place hands the listening socket to the new process, so none of
// those start an early election: they keep raft's own timeouts. Raft's
// safety does not depend on when an election starts; this only shortens the
// time nobody leads.
type exitWatch struct {
	r        *raft.Raft
	trans    *raft.NetworkTransport
	self     raft.ServerID
	selfAddr raft.ServerAddress
	stable   raft.StableStore // raft's, to read its last vote
	dial     func(addr string, timeout time.Duration) (net.Conn, error)
	poll     time.Duration // how often the current leader is looked at
	stagger  time.Duration // per rank among the surviving voters
	busy     time.Duration // raft taking longer than this to answer is busy
	log      hclog.Logger

	// holding is the id of the leader the watch holds a connection to
	// ("" when none); for tests.
	holding atomic.Value
	// announced is the last leader logged as watched (run's goroutine only).
	announced raft.ServerID
	// handled is the lost leader and term gone has acted on, or stood down
	// for (run's goroutine only): it acts once per exit.
	handled exitKey

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

const (
	exitWatchDialTimeout = time.Second
	// exitWatchMaxBackoff bounds how long the watch waits before dialling
	// again after a connection that did not stay open, e.g. to a proxy
	// that accepts and closes when the node behind it is down, or to a
	// leader whose transport does not know raft.WatchMarker. Each such
	// dial still finds an exited leader's port refused.
	exitWatchMaxBackoff = time.Second
)

func newExitWatch(r *raft.Raft, trans *raft.NetworkTransport, stable raft.StableStore, self raft.ServerID,
	stream raft.StreamLayer, heartbeat time.Duration, log hclog.Logger) *exitWatch {
	poll := min(heartbeat/4, 50*time.Millisecond)
	return &exitWatch{
		r: r, trans: trans, stable: stable, self: self, selfAddr: trans.LocalAddr(),
		dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			return stream.Dial(raft.ServerAddress(addr), timeout)
		},
		poll:    max(poll, 5*time.Millisecond),
		stagger: max(heartbeat/4, 10*time.Millisecond),
		busy:    max(heartbeat/16, 10*time.Millisecond),
		log:     log,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// start runs the watch until close.
func (w *exitWatch) start() { go w.run() }

// close stops the watch and waits for its goroutines. It is safe twice.
func (w *exitWatch) close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// leader returns the leader this node follows and the term it follows it
// in, or "" when it is not a follower or knows no leader other than itself.
//
// The term is read first. Raft forgets the leader before it takes a newer
// term (a vote request does both), so a leader read after a term means the
// node still followed it in that term; read the other way round, a stale
// leader could be paired with the term of an election already under way.
func (w *exitWatch) leader() (string, raft.ServerID, uint64) {
	term := w.r.CurrentTerm()
	if w.r.State() != raft.Follower {
		return "", "", 0
	}
	addr, id := w.r.LeaderWithID()
	if id == "" || id == w.self || addr == "" {
		return "", "", 0
	}
	return string(addr), id, term
}

func (w *exitWatch) run() {
	defer close(w.done)
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		addr, id, term := w.leader()
		if id == "" {
			continue
		}
		c, err := w.dial(addr, exitWatchDialTimeout)
		if err != nil {
			if refused(err) {
				w.gone(addr, id, term)
			}
			continue
		}
		held := time.Now()
		if !w.hold(c, addr, id, term) || time.Since(held) > exitWatchMaxBackoff {
			backoff = 0
			continue
		}
		// The connection was closed at once although the port still
		// accepts: something accepts and drops it. Back off.
		backoff = min(max(2*backoff, w.poll), exitWatchMaxBackoff)
		if !w.sleep(backoff) {
			return
		}
	}
}

func (w *exitWatch) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stop:
		return false
	case <-t.C:
		return true
	}
}

// hold keeps c open until the leader's end closes it, the leader changes
// or the watch stops. A close followed by a refused dial means the leader
// has exited. It reports whether the connection was dropped while the
// port still accepts.
func (w *exitWatch) hold(c net.Conn, addr string, id raft.ServerID, term uint64) (dropped bool) {
	// Say what the connection is for, or the leader's transport closes it
	// for its silence. A failed write leaves the connection closed: the
	// reader below returns at once and the port is probed as for a drop.
	_ = c.SetWriteDeadline(time.Now().Add(exitWatchDialTimeout))
	if _, err := c.Write([]byte{raft.WatchMarker}); err != nil {
		_ = c.Close()
	}
	_ = c.SetWriteDeadline(time.Time{})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		var b [64]byte
		for {
			// Nothing is ever sent on this connection; a read returns
			// only when it is closed.
			if _, err := c.Read(b[:]); err != nil {
				return
			}
		}
	}()
	w.holding.Store(string(id))
	if w.announced != id {
		w.announced = id
		w.log.Info("watching the leader's peer port for its exit", "leader", string(id), "addr", addr)
	}
	defer func() {
		w.holding.Store("")
		_ = c.Close()
		<-closed
	}()
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return false
		case <-tick.C:
			if _, cur, _ := w.leader(); cur != id {
				return false
			}
		case <-closed:
			probe, err := w.dial(addr, exitWatchDialTimeout)
			if err == nil {
				_ = probe.Close()
				return true
			}
			if refused(err) {
				w.gone(addr, id, term)
			}
			return false
		}
	}
}

type exitKey struct {
	leader raft.ServerID
	term   uint64
}

// rank is this node's place among the voters other than the lost leader,
// sorted by id, or -1 when it is not one of them.
func (w *exitWatch) rank(lost raft.ServerID) int {
	f := w.r.GetConfiguration()
	if f.Error() != nil {
		return -1
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != lost {
			ids = append(ids, string(s.ID))
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, string(w.self))
}

// gone starts an election after this node's turn, unless meanwhile a
// leader other than the lost one has appeared, this node has voted for
// another survivor, or its raft is busy. It acts once per lost leader and
// the term it followed that leader in: the watch keeps finding the port
// refused until raft learns of a new leader, and a survivor that stood
// down because its raft was busy would otherwise, once raft is free, run
// against the survivor it has just voted for.
func (w *exitWatch) gone(addr string, id raft.ServerID, term uint64) {
	key := exitKey{id, term}
	if w.handled == key {
		return
	}
	w.handled = key
	rank := w.rank(id)
	if rank < 0 {
		return
	}
	if rank > 0 && !w.sleep(time.Duration(rank)*w.stagger) {
		return
	}
	if !w.stillLost(id, addr) {
		return
	}
	// Pooled connections may lead to processes that are gone (a voter
	// restarted since this node last used them): a vote request on one
	// fails at once and the election would wait out its timeout.
	w.trans.CloseStreams()
	hdr := raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(w.self),
		Addr:            w.trans.EncodePeer(w.self, w.selfAddr),
	}
	// Raft handles requests one at a time. A node still working through a
	// backlog (catching up after a restart) would start its election late,
	// possibly after another survivor has won, and without a pre-vote its
	// candidacy would unseat that new leader. So first time a request
	// that raft answers at once and changes nothing (an AppendEntries of
	// term 0): if it waits, leave the election to the others.
	start := time.Now()
	var aresp raft.AppendEntriesResponse
	if err := w.trans.AppendEntries(w.self, w.selfAddr, &raft.AppendEntriesRequest{RPCHeader: hdr}, &aresp); err != nil {
		w.log.Warn("could not reach this node's raft; leaving the election to raft's heartbeat timeout", "error", err)
		return
	}
	if wait := time.Since(start); wait > w.busy {
		w.log.Info("the leader's process has exited, but this node's raft is busy; leaving the election to the other voters",
			"leader", string(id), "raft_wait", wait.Round(time.Millisecond))
		return
	}
	// Raft answered the probe after whatever request it had in hand when
	// this node looked above. Had that been another survivor's vote
	// request, raft had taken the candidate's term but not yet stored its
	// vote; it has now: look again, or this node would run against the
	// survivor it has just voted for.
	if !w.stillLost(id, addr) {
		w.log.Debug("an election began while this node looked; leaving it to finish", "leader", string(id))
		return
	}
	w.log.Warn("the leader's peer port refuses connections: its process has exited; starting an election now",
		"leader", string(id), "addr", addr, "rank", rank)
	var resp raft.TimeoutNowResponse
	if err := w.trans.TimeoutNow(w.self, w.selfAddr, &raft.TimeoutNowRequest{RPCHeader: hdr}, &resp); err != nil {
		w.log.Warn("could not start the election; raft's heartbeat timeout will", "error", err)
	}
}

// stillLost reports whether this node may still start an election for the
// lost leader: it follows, no other leader has appeared, and it has not
// voted for another survivor in its current term. That term may be past
// the one it followed the lost leader in: another survivor's election has
// reached it. If it voted there, that election can win: let it finish. If
// it refused (its log is ahead of the candidate's), it runs itself, or the
// cluster would wait for raft's heartbeat timeout.
func (w *exitWatch) stillLost(id raft.ServerID, addr string) bool {
	if w.r.State() != raft.Follower {
		return false
	}
	if _, cur := w.r.LeaderWithID(); cur != "" && cur != id {
		return false
	}
	return !w.votedForOther(w.r.CurrentTerm(), id, addr)
}

// raft's own stable-store keys for its vote (hashicorp/raft persists them
// before it answers a vote request).
var (
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// votedForOther reports whether this node has voted, in term, for a
// candidate other than itself and the lost leader (which it may have
// elected in this very term).
func (w *exitWatch) votedForOther(term uint64, lost raft.ServerID, lostAddr string) bool {
	return votedFor(w.stable, term,
		w.trans.EncodePeer(w.self, w.selfAddr), w.trans.EncodePeer(lost, raft.ServerAddress(lostAddr)))
}

// votedFor reports whether raft's stable store holds a vote in term for a
// candidate that is neither self nor lost.
func votedFor(stable raft.StableStore, term uint64, self, lost []byte) bool {
	t, err := stable.GetUint64(keyLastVoteTerm)
	if err != nil || t != term {
		return false
	}
	cand, err := stable.Get(keyLastVoteCand)
	return err == nil && len(cand) > 0 && !bytes.Equal(cand, self) && !bytes.Equal(cand, lost)
}

func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
