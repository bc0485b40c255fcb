package raftha

import (
	"errors"
	"net"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/stopper"
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
// A survivor that refuses a candidate its vote (its log is ahead) moves up
// a rank at once: of three voters, that candidacy cannot win without it.
//
// Only a refused connection counts. A partitioned, paused or overloaded
// leader never refuses (its port either answers or times out), and an
// upgrade in place hands the listening socket to the new process, so none of
// those start an early election: they keep raft's own timeouts. Raft's
// safety does not depend on when an election starts; this only shortens the
// time nobody leads.
//
// The decisions are exitMachine's (step, below: a pure function of what the
// I/O saw); exitWatch only carries out its actions and reports what they
// found. docs/design.md ("The exit watch") gives the decision table.
type exitWatch struct {
	r        *raft.Raft
	trans    *raft.NetworkTransport
	selfAddr raft.ServerAddress
	stable   raft.StableStore // raft's, to read its last vote
	dial     func(addr string, timeout time.Duration) (net.Conn, error)
	now      func() time.Time
	poll     time.Duration // how often the current leader is looked at
	log      hclog.Logger
	m        exitMachine // run's goroutine only

	// holding is the id of the leader the watch holds a connection to
	// ("" when none); for tests.
	holding atomic.Value

	// stopper owns run and the reader of the held connection.
	stopper *stopper.Stopper
}

const (
	exitWatchDialTimeout = time.Second
	// exitWatchReprobes is how many times more the watch probes a port
	// that accepted its first probe after the held connection closed, or
	// dropped it, reprobe apart (a fifth of the poll), before it believes
	// the port still listens: an exiting process's kernel closes its
	// connections before its listening socket, and a probe in between is
	// accepted, or reset.
	exitWatchReprobes = 4
	// exitWatchMaxBackoff bounds how long the watch waits before dialling
	// again after a connection that did not stay open, e.g. to a proxy
	// that accepts and closes when the node behind it is down, or to a
	// leader whose transport does not know raft.WatchMarker. Each such
	// dial still finds an exited leader's port refused. A connection held
	// longer than this was not dropped at once: no backoff follows it.
	exitWatchMaxBackoff = time.Second
)

// exitPace is the exit watch's pace: a quarter of raft's heartbeat
// timeout. The watch looks at the leader about that often and each
// survivor waits about that long per rank, so the election after a
// leader's exit starts within it (Config.ElectingHint).
func exitPace(heartbeat time.Duration) time.Duration { return heartbeat / 4 }

// exitTimings derives the watch's timings from raft's heartbeat timeout:
// how often it looks at the leader, the wait per rank among the survivors,
// and how long raft may take to answer and still count as free.
func exitTimings(heartbeat time.Duration) (poll, stagger, busy time.Duration) {
	pace := exitPace(heartbeat)
	poll = max(min(pace, 50*time.Millisecond), 5*time.Millisecond)
	stagger = max(pace, 10*time.Millisecond)
	busy = max(heartbeat/16, 10*time.Millisecond)
	return poll, stagger, busy
}

func newExitWatch(r *raft.Raft, trans *raft.NetworkTransport, stable raft.StableStore, self raft.ServerID,
	stream raft.StreamLayer, heartbeat time.Duration, log hclog.Logger) *exitWatch {
	poll, stagger, busy := exitTimings(heartbeat)
	return &exitWatch{
		r: r, trans: trans, stable: stable, selfAddr: trans.LocalAddr(),
		dial: func(addr string, timeout time.Duration) (net.Conn, error) {
			return stream.Dial(raft.ServerAddress(addr), timeout)
		},
		now:     time.Now,
		poll:    poll,
		m:       newExitMachine(self, string(trans.LocalAddr()), poll, stagger, busy),
		log:     log,
		stopper: stopper.New(),
	}
}

// start runs the watch until close.
func (w *exitWatch) start() { w.stopper.Go(w.run) }

// close stops the watch and waits for its goroutines. It is safe twice.
func (w *exitWatch) close() { w.stopper.Stop() }

// The decision: exitMachine.

// exitObsKind is what an observation reports.
type exitObsKind int

const (
	// obsLeader: a poll's look at whom raft follows (follower, leader,
	// addr, term).
	obsLeader exitObsKind = iota
	// obsDialed: the dial to the leader's port (dial); an accepted
	// connection is held.
	obsDialed
	// obsClosed: the held connection was closed at the leader's end.
	obsClosed
	// obsProbed: the dial that follows a close (dial); its connection is
	// closed at once.
	obsProbed
	// obsVoters: raft's voters (voters; nil when raft could not say).
	obsVoters
	// obsLooked: raft's state before acting (follower, leader, term) and
	// its last vote (voteTerm, voteFor).
	obsLooked
	// obsAnswered: how long raft took to answer a request that changes
	// nothing (wait), or why it did not (err).
	obsAnswered
	// obsDone: a campaign or a stand-down was carried out.
	obsDone
)

// dialResult is what a dial to the leader's peer port found.
type dialResult int

const (
	dialAccepted dialResult = iota
	// dialRefused: nothing listens on the port: the process has exited.
	dialRefused
	// dialFailed: an error other than a timeout (a reset, or a TLS
	// handshake cut short): the leader may be overloaded, or exiting.
	dialFailed
	// dialTimedOut: no answer in time: the leader may be partitioned,
	// paused or overloaded, not known to be gone.
	dialTimedOut
)

// exitObs is what the watch's I/O saw, with the time it saw it.
type exitObs struct {
	kind exitObsKind
	now  time.Time

	// obsLeader, obsLooked. The term is read first: raft forgets the
	// leader before it takes a newer term (a vote request does both), so
	// a leader read after a term was still followed in that term; read
	// the other way round, a stale leader could be paired with the term
	// of an election already under way.
	follower bool
	leader   raft.ServerID
	addr     string
	term     uint64

	// obsLooked: raft's last vote, by term and candidate address.
	voteTerm uint64
	voteFor  string

	dial   dialResult      // obsDialed, obsProbed
	voters []raft.ServerID // obsVoters
	wait   time.Duration   // obsAnswered
	err    error           // obsAnswered
}

// exitActKind is what the watch is to do next.
type exitActKind int

const (
	// actPoll: wait for the next poll, then look at the leader (obsLeader).
	actPoll exitActKind = iota
	// actDial: dial addr and hold the connection if accepted (obsDialed).
	actDial
	// actHold: keep holding the connection to leader (announce: log it as
	// watched) until it closes (obsClosed) or the next poll (obsLeader).
	actHold
	// actProbe: wait delay, then dial addr again and close at once
	// (obsProbed).
	actProbe
	// actBackoff: wait delay, then poll (obsLeader).
	actBackoff
	// actVoters: read raft's voters (obsVoters).
	actVoters
	// actLook: wait delay, then look at raft's state and vote (obsLooked);
	// with termPast, look as soon as raft's term passes it (a vote request
	// reached this node), even before delay is out.
	actLook
	// actTimeRaft: time a request raft answers
	// at once and that changes nothing (obsAnswered).
	actTimeRaft
	// actCampaign: become a candidate at once, skipping the pre-vote
	// (obsDone).
	actCampaign
	// actStandDown: leave the election to others, for reason (obsDone).
	actStandDown
)

// standReason says why a survivor leaves the election to others.
type standReason int

const (
	// standNotLost: before acting, another leader had appeared, raft no
	// longer followed, or this node had voted for another survivor.
	standNotLost standReason = iota
	// standUnreachable: this node's raft did not answer the probe.
	standUnreachable
	// standBusy: this node's raft took longer than busy to answer.
	standBusy
	// standElectionBegan: looking again after the probe, this node had
	// voted for another survivor (or found a leader, or did not follow).
	standElectionBegan
)

type exitAction struct {
	kind     exitActKind
	leader   raft.ServerID
	addr     string
	delay    time.Duration // actBackoff, actLook, actProbe
	termPast uint64        // actLook: look early once raft's term passes this (0: wait delay out)
	announce bool          // actHold
	rank     int           // actCampaign
	reason   standReason   // actStandDown
	wait     time.Duration // actStandDown for standBusy
	err      error         // actStandDown for standUnreachable
}

type exitPhase int

const (
	phaseIdle    exitPhase = iota // polling the leader
	phaseDialing                  // dialled the leader's port
	phaseHolding                  // holding a connection to the leader
	phaseProbing                  // the held connection closed: probing the port
	phaseRank                     // the leader is gone: reading the voters
	phaseTurn                     // waited this node's turn: looking
	phaseRaft                     // timing raft
	phaseAgain                    // looking again after raft answered
	phaseActing                   // campaigning or standing down
)

// exitKey is a lost leader and the term this node followed it in.
type exitKey struct {
	leader raft.ServerID
	term   uint64
}

// exitMachine holds the exit watch's state and makes all its decisions:
// step is pure, its only inputs are the observations it is given.
type exitMachine struct {
	self     raft.ServerID
	selfAddr string
	stagger  time.Duration // per rank among the surviving voters
	busy     time.Duration // raft taking longer than this to answer is busy
	reprobe  time.Duration // between probes of a port that accepted one

	phase   exitPhase
	watched exitKey // the leader dialled or held
	addr    string  // its peer address
	heldAt  time.Time
	probes  int // probes after the first, since the held connection closed
	// retry spaces dials after connections dropped by a port that still
	// accepts.
	retry backoff.Backoff
	// announced is the last leader logged as watched.
	announced raft.ServerID
	// handled is the lost leader and term the watch has acted on, or
	// stood down for: it acts once per exit.
	handled exitKey
	rank    int
	turnAt  time.Time // when this node's turn comes
}

func newExitMachine(self raft.ServerID, selfAddr string, poll, stagger, busy time.Duration) exitMachine {
	return exitMachine{self: self, selfAddr: selfAddr, stagger: stagger, busy: busy,
		reprobe: max(poll/5, time.Millisecond),
		retry:   backoff.Backoff{Min: poll, Max: exitWatchMaxBackoff}}
}

// expects reports whether the machine's phase awaits observations of kind.
func (m *exitMachine) expects(kind exitObsKind) bool {
	switch m.phase {
	case phaseIdle:
		return kind == obsLeader
	case phaseDialing:
		return kind == obsDialed
	case phaseHolding:
		return kind == obsLeader || kind == obsClosed
	case phaseProbing:
		return kind == obsProbed
	case phaseRank:
		return kind == obsVoters
	case phaseTurn, phaseAgain:
		return kind == obsLooked
	case phaseRaft:
		return kind == obsAnswered
	case phaseActing:
		return kind == obsDone
	}
	return false
}

// followed returns the leader o shows this node following, or "" when it
// does not follow or knows no leader other than itself.
func (m *exitMachine) followed(o exitObs) raft.ServerID {
	if !o.follower || o.leader == m.self || o.addr == "" {
		return ""
	}
	return o.leader
}

func (m *exitMachine) poll() exitAction {
	m.phase = phaseIdle
	return exitAction{kind: actPoll}
}

// step takes what the I/O saw and returns what it is to do next. An
// observation the phase does not await (the I/O never sends one) starts
// over with a poll.
func (m *exitMachine) step(o exitObs) exitAction {
	if !m.expects(o.kind) {
		return m.poll()
	}
	switch m.phase {
	case phaseIdle:
		return m.polled(o)
	case phaseDialing:
		return m.dialed(o)
	case phaseHolding:
		return m.held(o)
	case phaseProbing:
		return m.probed(o)
	case phaseRank:
		return m.ranked(o)
	case phaseTurn:
		return m.turnLooked(o)
	case phaseRaft:
		return m.raftTimed(o)
	case phaseAgain:
		return m.lookedAgain(o)
	}
	// phaseActing: the campaign or the stand-down is done.
	return m.poll()
}

// polled dials the leader o shows this node following, if any.
func (m *exitMachine) polled(o exitObs) exitAction {
	id := m.followed(o)
	if id == "" {
		return m.poll()
	}
	m.phase, m.watched, m.addr = phaseDialing, exitKey{id, o.term}, o.addr
	return exitAction{kind: actDial, leader: id, addr: o.addr}
}

// dialed holds an accepted connection; a refused port means the leader
// is gone.
func (m *exitMachine) dialed(o exitObs) exitAction {
	switch o.dial {
	case dialAccepted:
		m.phase, m.heldAt = phaseHolding, o.now
		announce := m.announced != m.watched.leader
		m.announced = m.watched.leader
		return exitAction{kind: actHold, leader: m.watched.leader, addr: m.addr, announce: announce}
	case dialRefused:
		return m.gone()
	}
	return m.poll()
}

// held probes the port once the held connection closed, and keeps holding
// while the leader stays the same.
func (m *exitMachine) held(o exitObs) exitAction {
	if o.kind == obsClosed {
		m.phase, m.probes = phaseProbing, 0
		return exitAction{kind: actProbe, leader: m.watched.leader, addr: m.addr}
	}
	if m.followed(o) == m.watched.leader {
		return exitAction{kind: actHold, leader: m.watched.leader, addr: m.addr}
	}
	// The leader changed: watch the new one at the next poll.
	m.retry.Reset()
	return m.poll()
}

// probed decides from a probe of the port after the held connection
// closed: probe again, back off, or take the leader for gone.
func (m *exitMachine) probed(o exitObs) exitAction {
	if (o.dial == dialAccepted || o.dial == dialFailed) && m.probes < exitWatchReprobes {
		// The process may be exiting: its kernel closes the
		// listening socket after the connections, and a connection
		// it accepted in between is reset (over TLS, the handshake
		// fails). Look again.
		m.probes++
		return exitAction{kind: actProbe, leader: m.watched.leader, addr: m.addr, delay: m.reprobe}
	}
	switch o.dial {
	case dialAccepted:
		if o.now.Sub(m.heldAt) > exitWatchMaxBackoff {
			m.retry.Reset()
			return m.poll()
		}
		// Closed at once although the port still accepts:
		// something accepts and drops it. Back off.
		m.phase = phaseIdle
		return exitAction{kind: actBackoff, delay: m.retry.Next()}
	case dialRefused:
		m.retry.Reset()
		return m.gone()
	}
	m.retry.Reset()
	return m.poll()
}

// ranked places this node among the surviving voters and waits its turn.
func (m *exitMachine) ranked(o exitObs) exitAction {
	m.rank = m.rankAmong(o.voters)
	if m.rank < 0 {
		return m.poll()
	}
	m.phase = phaseTurn
	m.turnAt = o.now.Add(time.Duration(m.rank) * m.stagger)
	return m.awaitTurn(o.now, m.watched.term)
}

// turnLooked decides from the look at raft when this node's turn came, or
// earlier when a vote request reached it.
func (m *exitMachine) turnLooked(o exitObs) exitAction {
	if !m.stillLost(o) {
		return m.standDown(exitAction{reason: standNotLost})
	}
	if o.now.Before(m.turnAt) {
		// Looked early: a vote request reached this node. Having not
		// voted for it (its log is ahead of the candidate's), it
		// moves up a rank: of three voters, that candidacy cannot
		// win without this one, and waiting out the turn would only
		// lengthen the failover.
		if o.term > m.watched.term && o.voteTerm != o.term {
			next := o.now.Add(time.Duration(max(m.rank-1, 0)) * m.stagger)
			if next.Before(m.turnAt) {
				m.turnAt = next
			}
		}
		if o.now.Before(m.turnAt) {
			return m.awaitTurn(o.now, o.term)
		}
	}
	m.phase = phaseRaft
	return exitAction{kind: actTimeRaft, leader: m.watched.leader}
}

// raftTimed stands down when this node's raft is unreachable or busy, and
// otherwise looks again.
func (m *exitMachine) raftTimed(o exitObs) exitAction {
	if o.err != nil {
		return m.standDown(exitAction{reason: standUnreachable, err: o.err})
	}
	if o.wait > m.busy {
		return m.standDown(exitAction{reason: standBusy, wait: o.wait})
	}
	// Raft answered after whatever request it had in hand at the
	// last look. Had that been another survivor's vote request, raft
	// had taken the candidate's term but not yet stored its vote; it
	// has now: look again.
	m.phase = phaseAgain
	return exitAction{kind: actLook, leader: m.watched.leader}
}

// lookedAgain campaigns unless an election began meanwhile.
func (m *exitMachine) lookedAgain(o exitObs) exitAction {
	if !m.stillLost(o) {
		return m.standDown(exitAction{reason: standElectionBegan})
	}
	m.phase = phaseActing
	return exitAction{kind: actCampaign, leader: m.watched.leader, addr: m.addr, rank: m.rank}
}

// awaitTurn looks at raft's state when this node's turn comes, or before
// if raft's term passes term.
func (m *exitMachine) awaitTurn(now time.Time, term uint64) exitAction {
	a := exitAction{kind: actLook, leader: m.watched.leader, delay: m.turnAt.Sub(now)}
	if a.delay > 0 {
		a.termPast = term
	}
	return a
}

// gone handles the watched leader's refused port: once per leader and the
// term it was followed in. The watch keeps finding the port refused until
// raft learns of a new leader, and a survivor that stood down because its
// raft was busy would otherwise, once raft is free, run against the
// survivor it has just voted for.
func (m *exitMachine) gone() exitAction {
	if m.handled == m.watched {
		return m.poll()
	}
	m.handled = m.watched
	m.phase = phaseRank
	return exitAction{kind: actVoters, leader: m.watched.leader}
}

func (m *exitMachine) standDown(a exitAction) exitAction {
	m.phase = phaseActing
	a.kind, a.leader = actStandDown, m.watched.leader
	return a
}

// rankAmong is this node's place among the voters other than the lost
// leader, sorted by id, or -1 when it is not one of them.
func (m *exitMachine) rankAmong(voters []raft.ServerID) int {
	var ids []raft.ServerID
	for _, id := range voters {
		if id != m.watched.leader {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Index(ids, m.self)
}

// stillLost reports whether this node may still start an election for the
// lost leader: it follows, no other leader has appeared, and it has not
// voted for another survivor in its current term. That term may be past
// the one it followed the lost leader in: another survivor's election has
// reached it. If it voted there, that election can win: let it finish. If
// it refused (its log is ahead of the candidate's), it runs itself, or the
// cluster would wait for raft's heartbeat timeout.
func (m *exitMachine) stillLost(o exitObs) bool {
	if !o.follower {
		return false
	}
	if o.leader != "" && o.leader != m.watched.leader {
		return false
	}
	votedOther := o.voteTerm == o.term && o.voteFor != "" && o.voteFor != m.selfAddr && o.voteFor != m.addr
	return !votedOther
}

// The I/O: exitWatch.run carries out the machine's actions.

func (w *exitWatch) run() {
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	var held *heldConn
	defer func() { held.release() }()
	act := w.m.poll()
	for {
		// A connection is held only while the machine says hold.
		if act.kind != actHold && held != nil {
			held.release()
			held = nil
			w.holding.Store("")
		}
		obs, ok := w.do(act, tick.C, &held)
		if !ok {
			return
		}
		act = w.m.step(obs)
	}
}

// do carries out a and reports what it found; false when the watch stops.
func (w *exitWatch) do(a exitAction, tick <-chan time.Time, held **heldConn) (exitObs, bool) {
	switch a.kind {
	case actPoll:
		if !w.next(tick) {
			return exitObs{}, false
		}
		return w.lookLeader(), true
	case actBackoff:
		if !w.sleep(a.delay) || !w.next(tick) {
			return exitObs{}, false
		}
		return w.lookLeader(), true
	case actDial:
		c, err := w.dial(a.addr, exitWatchDialTimeout)
		if err != nil {
			return exitObs{kind: obsDialed, now: w.now(), dial: dialOutcome(err)}, true
		}
		*held = w.hold(c)
		return exitObs{kind: obsDialed, now: w.now(), dial: dialAccepted}, true
	case actHold:
		w.holding.Store(string(a.leader))
		if a.announce {
			w.log.Info("watching the leader's peer port for its exit", "leader", string(a.leader), "addr", a.addr)
		}
		select {
		case <-w.stopper.Stopping():
			return exitObs{}, false
		case <-tick:
			return w.lookLeader(), true
		case <-(*held).closed:
			return exitObs{kind: obsClosed, now: w.now()}, true
		}
	case actProbe:
		if a.delay > 0 && !w.sleep(a.delay) {
			return exitObs{}, false
		}
		c, err := w.dial(a.addr, exitWatchDialTimeout)
		if err != nil {
			return exitObs{kind: obsProbed, now: w.now(), dial: dialOutcome(err)}, true
		}
		_ = c.Close()
		return exitObs{kind: obsProbed, now: w.now(), dial: dialAccepted}, true
	case actVoters:
		o := exitObs{kind: obsVoters, now: w.now()}
		if f := w.r.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if s.Suffrage == raft.Voter {
					o.voters = append(o.voters, s.ID)
				}
			}
		}
		return o, true
	case actLook:
		if a.delay > 0 && !w.awaitTerm(a.delay, a.termPast) {
			return exitObs{}, false
		}
		return w.look(), true
	case actTimeRaft:
		return w.timeRaft(), true
	case actCampaign:
		w.log.Warn("the leader's peer port refuses connections: its process has exited; starting an election now",
			"leader", string(a.leader), "addr", a.addr, "rank", a.rank)
		var resp raft.TimeoutNowResponse
		if err := w.trans.TimeoutNow(w.selfID(), w.selfAddr, &raft.TimeoutNowRequest{RPCHeader: w.header()}, &resp); err != nil {
			w.log.Warn("could not start the election; raft's heartbeat timeout will", "error", err)
		}
		return exitObs{kind: obsDone, now: w.now()}, true
	case actStandDown:
		switch a.reason {
		case standUnreachable:
			w.log.Warn("could not reach this node's raft; leaving the election to raft's heartbeat timeout", "error", a.err)
		case standBusy:
			w.log.Info("the leader's process has exited, but this node's raft is busy; leaving the election to the other voters",
				"leader", string(a.leader), "raft_wait", a.wait.Round(time.Millisecond))
		case standElectionBegan:
			w.log.Debug("an election began while this node looked; leaving it to finish", "leader", string(a.leader))
		}
		return exitObs{kind: obsDone, now: w.now()}, true
	}
	return exitObs{}, false
}

func (w *exitWatch) selfID() raft.ServerID { return w.m.self }

func (w *exitWatch) header() raft.RPCHeader {
	return raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(w.m.self),
		Addr:            w.trans.EncodePeer(w.m.self, w.selfAddr),
	}
}

// next waits for the next poll; false when the watch stops.
func (w *exitWatch) next(tick <-chan time.Time) bool {
	select {
	case <-w.stopper.Stopping():
		return false
	case <-tick:
		return true
	}
}

func (w *exitWatch) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stopper.Stopping():
		return false
	case <-t.C:
		return true
	}
}

// awaitTerm waits d, or less if raft's term passes term (looked at every
// fifth of a poll); false when the watch stops.
func (w *exitWatch) awaitTerm(d time.Duration, term uint64) bool {
	if term == 0 {
		return w.sleep(d)
	}
	end := w.now().Add(d)
	for {
		left := end.Sub(w.now())
		if left <= 0 || w.r.CurrentTerm() > term {
			return true
		}
		if !w.sleep(min(left, max(w.poll/5, time.Millisecond))) {
			return false
		}
	}
}

// lookLeader reads whom raft follows, the term first (see exitObs).
func (w *exitWatch) lookLeader() exitObs {
	o := exitObs{kind: obsLeader, term: w.r.CurrentTerm()}
	o.follower = w.r.State() == raft.Follower
	addr, id := w.r.LeaderWithID()
	o.leader, o.addr, o.now = id, string(addr), w.now()
	return o
}

// look reads raft's state and its last vote, as stored before raft
// answers a vote request.
func (w *exitWatch) look() exitObs {
	o := exitObs{kind: obsLooked, follower: w.r.State() == raft.Follower}
	addr, id := w.r.LeaderWithID()
	o.leader, o.addr = id, string(addr)
	o.term = w.r.CurrentTerm()
	if t, err := w.stable.GetUint64(keyLastVoteTerm); err == nil {
		if cand, err := w.stable.Get(keyLastVoteCand); err == nil && len(cand) > 0 {
			o.voteTerm, o.voteFor = t, string(w.trans.DecodePeer(cand))
		}
	}
	o.now = w.now()
	return o
}

// timeRaft times a request raft answers at once and that changes nothing
// (an AppendEntries of term 0). Raft handles requests one at a time: a
// node still working through a backlog would start its election late,
// possibly after another survivor has won, and without a pre-vote unseat
// it. Pooled connections are kept: they are the warm ones (peerWarm) the
// election's vote requests go on, and one to a process that is gone (a
// voter restarted since) fails before its request is read, which the
// transport sends again on a new connection.
func (w *exitWatch) timeRaft() exitObs {
	start := w.now()
	var resp raft.AppendEntriesResponse
	err := w.trans.AppendEntries(w.selfID(), w.selfAddr, &raft.AppendEntriesRequest{RPCHeader: w.header()}, &resp)
	now := w.now()
	return exitObs{kind: obsAnswered, now: now, wait: now.Sub(start), err: err}
}

// raft's own stable-store keys for its vote (hashicorp/raft persists them
// before it answers a vote request).
var (
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

func dialOutcome(err error) dialResult {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return dialRefused
	case errors.As(err, &ne) && ne.Timeout():
		return dialTimedOut
	}
	return dialFailed
}

// heldConn is the watch's connection to the leader: it announces itself
// with raft.WatchMarker and is read until it closes.
type heldConn struct {
	c      net.Conn
	closed chan struct{}
}

// hold says what c is for, or the leader's transport closes it for its
// silence, and reads it until it closes. A failed write leaves it closed:
// the reader returns at once and the port is probed as for a drop. Once
// the watch stops, c is closed and no reader starts.
func (w *exitWatch) hold(c net.Conn) *heldConn {
	_ = c.SetWriteDeadline(time.Now().Add(exitWatchDialTimeout))
	if _, err := c.Write([]byte{raft.WatchMarker}); err != nil {
		_ = c.Close()
	}
	_ = c.SetWriteDeadline(time.Time{})
	h := &heldConn{c: c, closed: make(chan struct{})}
	read := func() {
		defer close(h.closed)
		var b [64]byte
		for {
			// Nothing is ever sent on this connection; a read returns
			// only when it is closed.
			if _, err := c.Read(b[:]); err != nil {
				return
			}
		}
	}
	if !w.stopper.Go(read) {
		_ = c.Close()
		close(h.closed)
	}
	return h
}

// release closes the connection and waits for its reader.
func (h *heldConn) release() {
	if h == nil {
		return
	}
	_ = h.c.Close()
	<-h.closed
}
