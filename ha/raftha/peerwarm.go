package raftha

import (
	"errors"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/stopper"
)

// peerWarm keeps pooled connections open from this node to every other
// voter (raft.NetworkTransport.Warm), so that an election's RequestVote
// and a new leader's first AppendEntries find a connection made. Followers
// do not otherwise talk to each other: without it, the two RPCs between a
// leader's exit and its successor's first commit would each wait for a
// dial, and over peer TLS for a handshake on a node that is busy taking
// over. docs/design.md ("The exit watch") says more.
type peerWarm struct {
	r     *raft.Raft
	warm  func(id raft.ServerID, addr raft.ServerAddress) error
	self  raft.ServerID
	log   hclog.Logger
	every time.Duration

	peers map[raft.ServerID]peerWarmState // run's goroutine only

	stopper *stopper.Stopper // owns run
}

const (
	// peerWarmEvery is how often each voter's connections are warmed:
	// well within the peer port's IdleTimeout (at least a minute), and
	// soon after a voter restarts.
	peerWarmEvery = 2 * time.Second
	// peerWarmConns is how many connections are kept to each voter: one
	// for a RequestVote, and then a new leader's heartbeat and its first
	// AppendEntries at once.
	peerWarmConns = 2
	// peerWarmMaxBackoff bounds the wait after a voter that answered the
	// warming with an error (one running a version that does not know it
	// refuses it, and logs the refusal).
	peerWarmMaxBackoff = 5 * time.Minute
)

// peerWarmState is when a voter is next warmed, and how many times in a
// row it refused.
type peerWarmState struct {
	next    time.Time
	refused int
}

// warmOutcome is what one warming of a voter found.
type warmOutcome int

const (
	warmOK          warmOutcome = iota
	warmUnreachable             // no connection: the voter is down or cut off
	warmRefused                 // connected, but the ping failed
)

// afterWarm is a voter's state after a warming at now: the next in every,
// or, after refusals in a row, in every doubled for each, at most
// peerWarmMaxBackoff. A voter that could not be reached is tried again in
// every, so that one that restarts is warm soon.
func afterWarm(s peerWarmState, now time.Time, o warmOutcome, every time.Duration) peerWarmState {
	if o != warmRefused {
		return peerWarmState{next: now.Add(every)}
	}
	s.refused++
	wait := every
	for i := 1; i < s.refused && wait < peerWarmMaxBackoff; i++ {
		wait *= 2
	}
	s.next = now.Add(min(wait, peerWarmMaxBackoff))
	return s
}

// outcomeOf classifies a Warm error: a failed dial (or handshake) is
// unreachable, anything after a connection is refused.
func outcomeOf(err error) warmOutcome {
	var op *net.OpError
	switch {
	case err == nil:
		return warmOK
	case errors.As(err, &op) && op.Op == "dial":
		return warmUnreachable
	default:
		return warmRefused
	}
}

func newPeerWarm(r *raft.Raft, trans *raft.NetworkTransport, self raft.ServerID, log hclog.Logger) *peerWarm {
	return &peerWarm{
		r: r, self: self, log: log, every: peerWarmEvery,
		warm: func(id raft.ServerID, addr raft.ServerAddress) error {
			return trans.Warm(id, addr, peerWarmConns)
		},
		peers:   make(map[raft.ServerID]peerWarmState),
		stopper: stopper.New(),
	}
}

func (w *peerWarm) start() { w.stopper.Go(w.run) }

// close stops the loop and waits for it; a warming under way ends within
// the transport's timeout.
func (w *peerWarm) close() { w.stopper.Stop() }

func (w *peerWarm) run() {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-w.stopper.Stopping():
			return
		case <-tick.C:
		}
		w.round(time.Now())
	}
}

// round warms every other voter that is due.
func (w *peerWarm) round(now time.Time) {
	f := w.r.GetConfiguration()
	if f.Error() != nil {
		return
	}
	voters := make(map[raft.ServerID]bool)
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter || s.ID == w.self {
			continue
		}
		voters[s.ID] = true
		st := w.peers[s.ID]
		if now.Before(st.next) {
			continue
		}
		select {
		case <-w.stopper.Stopping():
			return
		default:
		}
		err := w.warm(s.ID, s.Address)
		o := outcomeOf(err)
		if o == warmRefused && st.refused == 0 {
			w.log.Info("could not warm the connections to a voter; trying again later", "voter", string(s.ID), "addr", string(s.Address), "error", err)
		}
		w.peers[s.ID] = afterWarm(st, time.Now(), o, w.every)
	}
	for id := range w.peers {
		if !voters[id] {
			delete(w.peers, id)
		}
	}
}
