package ha

import "time"

// Quorum tracks whether a primary still has a write quorum: itself plus every
// voter that answered an append or heartbeat within the window (docs/design.md,
// "Write quorum").
// It learns from the backend's failed/resumed heartbeat observations. It is
// owned by the controller's event loop and takes now as an argument.
type Quorum struct {
	window time.Duration
	self   string
	voters int
	// selfVoter: self is among the voters and counts for itself.
	selfVoter bool
	peers     map[string]*contact
}

type contact struct {
	failing bool
	lastOK  time.Time
}

// NewQuorum tracks the voters other than self. Self counts for itself
// even when voters does not name it (a list that is not known yet).
func NewQuorum(self string, voters []string, window time.Duration) *Quorum {
	q := &Quorum{window: window, self: self, voters: len(voters), selfVoter: true, peers: make(map[string]*contact)}
	for _, v := range voters {
		if v != self {
			q.peers[v] = &contact{}
		}
	}
	return q
}

// SetVoters replaces the voters with the latest configuration's: a voter
// that stays keeps its contact history, a new one starts in contact (as
// every peer does when a leader starts), a removed one is
// forgotten. Non-voters never count, so the caller passes voters only. An
// empty list is not a configuration and changes nothing. Self counts only
// while it is a voter.
func (q *Quorum) SetVoters(voters []string) {
	if len(voters) == 0 {
		return
	}
	seen := make(map[string]bool, len(voters))
	q.selfVoter = false
	for _, v := range voters {
		if seen[v] {
			continue
		}
		seen[v] = true
		if v == q.self {
			q.selfVoter = true
			continue
		}
		if _, ok := q.peers[v]; !ok {
			q.peers[v] = &contact{}
		}
	}
	for p := range q.peers {
		if !seen[p] {
			delete(q.peers, p)
		}
	}
	q.voters = len(seen)
}

// Voters is the number of voters, self included when it is one.
func (q *Quorum) Voters() int { return q.voters }

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
	n := 0
	if q.selfVoter {
		n++
	}
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
