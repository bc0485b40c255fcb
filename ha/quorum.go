package ha

import "time"

// Quorum tracks whether a primary still has a write quorum: itself plus every
// voter that answered an append or heartbeat within the window (docs/design.md,
// "Write quorum").
// It learns from the backend's failed/resumed heartbeat observations. It is
// owned by the controller's event loop and takes now as an argument.
type Quorum struct {
	window time.Duration
	voters int
	peers  map[string]*contact
}

type contact struct {
	failing bool
	lastOK  time.Time
}

// NewQuorum tracks the voters other than self.
func NewQuorum(self string, voters []string, window time.Duration) *Quorum {
	q := &Quorum{window: window, voters: len(voters), peers: make(map[string]*contact)}
	for _, v := range voters {
		if v != self {
			q.peers[v] = &contact{}
		}
	}
	return q
}

// Reset marks every peer as reachable as of now; a new leader starts here.
func (q *Quorum) Reset(now time.Time) {
	for _, c := range q.peers {
		c.failing, c.lastOK = false, now
	}
}

// Failed records a failed heartbeat to peer, last heard from at lastContact.
func (q *Quorum) Failed(peer string, lastContact time.Time) {
	if c, ok := q.peers[peer]; ok {
		if !c.failing || lastContact.After(c.lastOK) {
			c.lastOK = lastContact
		}
		c.failing = true
	}
}

// Resumed records that peer answers again.
func (q *Quorum) Resumed(peer string, now time.Time) {
	if c, ok := q.peers[peer]; ok {
		c.failing, c.lastOK = false, now
	}
}

// Has reports whether a majority of voters is in contact at now, and the
// next instant at which the answer can change without a new observation
// (zero when none).
func (q *Quorum) Has(now time.Time) (bool, time.Time) {
	n := 1
	var next time.Time
	for _, c := range q.peers {
		if !c.failing {
			n++
			continue
		}
		expiry := c.lastOK.Add(q.window)
		if now.Before(expiry) {
			n++
			if next.IsZero() || expiry.Before(next) {
				next = expiry
			}
		}
	}
	return n > q.voters/2, next
}
