package succession

import (
	"fmt"
	"slices"
)

// CoordRecord is a coordination record as the transport read it, with what
// its headers say: whether a challenge wrote it (its offset + 1 is the new
// term), and for a yield record the member that left and the offset of the
// last lease record it no longer acts on.
type CoordRecord struct {
	Record
	Challenge bool
	// YieldOf is set on a yield record only.
	YieldOf   MemberID
	YieldUpTo int64
}

// EventKind is what happened to the coordinator's member.
type EventKind int

const (
	// EventStart: the member starts; every start registers anew.
	EventStart EventKind = iota
	// EventRecords: the transport read Records from the coordination topic.
	EventRecords
	// EventTimer: a timer the coordinator armed fired, or the backend asks
	// for a new evaluation (its tenure ended).
	EventTimer
	// EventRegistered: this member's registration record is at Offset.
	EventRegistered
	// EventProbed: the freshness probe is at Offset, or failed with Err.
	EventProbed
	// EventChallenged: the challenge committed (Term, ValidUntilMillis: the
	// tenure it won), or failed with Err.
	EventChallenged
	// EventLeft: a tenure that did not hand over ended; Offset is its last
	// lease record.
	EventLeft
)

// Tenure is what the transport knows of this member's hold on the role when
// it steps the coordinator.
type Tenure struct {
	Held bool
	Term uint64
	// ValidUntilMillis: the holder confirms its lease until then.
	ValidUntilMillis int64
	// Leaving: the holder is handing the role over (its release is in flight).
	Leaving bool
}

// Event is one input of Coordinator.Step: what the transport saw, and its
// member's tenure and hand-over at that moment.
type Event struct {
	Kind    EventKind
	Records []CoordRecord
	Offset  int64
	Term    uint64
	// ValidUntilMillis of a won challenge.
	ValidUntilMillis int64
	Err              error
	Tenure           Tenure
	// HandoverUntilMillis: after a hand-over, do not register again before
	// another member holds the role or this instant passes.
	HandoverUntilMillis int64
}

// EffectKind is what the transport must do.
type EffectKind int

const (
	// DoRegister: append this member's registration record (retrying until it
	// is written), then report EventRegistered.
	DoRegister EffectKind = iota
	// DoProbe: append a probe record, then report EventProbed.
	DoProbe
	// DoChallenge: challenge for the role (Reason says why), then report
	// EventChallenged.
	DoChallenge
	// DoTake: become the holder with the tenure the challenge won.
	DoTake
	// DoStepDown: the current tenure ends (Reason says why).
	DoStepDown
	// DoRenewAt: the holder renews its lease at AtMillis.
	DoRenewAt
	// DoYield: append a yield record for lease records up to Offset.
	DoYield
	// DoTimer: step again with EventTimer at AtMillis (replacing the last
	// timer armed).
	DoTimer
)

// Effect is one output of Coordinator.Step. (Action is Evaluate's answer;
// an Effect is what the transport does about it.)
type Effect struct {
	Kind     EffectKind
	AtMillis int64
	Offset   int64
	Reason   string
}

func (e Effect) String() string {
	switch e.Kind {
	case DoRegister:
		return "register"
	case DoProbe:
		return "probe"
	case DoChallenge:
		return fmt.Sprintf("challenge (%s)", e.Reason)
	case DoTake:
		return "take"
	case DoStepDown:
		return fmt.Sprintf("step-down (%s)", e.Reason)
	case DoRenewAt:
		return fmt.Sprintf("renew-at %d", e.AtMillis)
	case DoYield:
		return fmt.Sprintf("yield up-to=%d", e.Offset)
	case DoTimer:
		return fmt.Sprintf("timer %d", e.AtMillis)
	}
	return fmt.Sprintf("Effect(%d)", int(e.Kind))
}

// Coordinator is one member's side of the election (docs/design.md,
// "Succession (Kafka backend)"): it folds the coordination records it is
// given, applies Evaluate at every step and says what to do. It does no I/O
// and reads no clock; the transport performs the effects and reports their
// results as events.
type Coordinator struct {
	role string
	me   MemberID
	cfg  LeaseConfig

	latest   map[string]Record
	state    RoleState
	maxSeen  int64
	term     int64 // offset of the latest challenge's lease record
	foreign  map[MemberID]struct{ offset, deadline int64 }
	until    int64
	myReg    int64
	regging  bool
	probing  bool
	probe    int64
	chasing  bool // a challenge is in flight
	leaseKey string
}

// NewCoordinator is the coordinator of member for role. Step it with
// EventStart first.
func NewCoordinator(role string, member MemberID, cfg LeaseConfig) *Coordinator {
	return &Coordinator{
		role: role, me: member, cfg: cfg,
		latest: map[string]Record{}, state: RoleState{Role: role},
		maxSeen: -1, term: -1, myReg: -1, probe: -1,
		foreign:  map[MemberID]struct{ offset, deadline int64 }{},
		leaseKey: string(LeaseKey(role)),
	}
}

// State is the folded state of the role.
func (c *Coordinator) State() RoleState {
	s := c.state
	s.Roster = slices.Clone(s.Roster)
	if s.Lease != nil {
		l := *s.Lease
		s.Lease = &l
	}
	return s
}

// TermOffset is the offset of the latest challenge's lease record (-1:
// none): the term is that offset + 1, the same on every member.
func (c *Coordinator) TermOffset() int64 { return c.term }

// Folded is the offset of the last coordination record folded (-1: none).
func (c *Coordinator) Folded() int64 { return c.maxSeen }

// ForeignUntil is, as of the last step, when the last lease another member
// may still act on runs out (0: none). A new holder serves only after it.
func (c *Coordinator) ForeignUntil() int64 { return c.until }

// Step takes one event at nowMillis and returns the effects to perform, in
// order. It ends with a DoTimer unless it only starts the member.
func (c *Coordinator) Step(ev Event, nowMillis int64) []Effect {
	if ev.Kind == EventStart {
		// Every start registers anew: a recovered member lands at the
		// tail of the roster (no failback). The registration stays in
		// flight until the fold shows it, so a slow fetch never registers
		// twice.
		c.regging = true
		return []Effect{{Kind: DoRegister}, {Kind: DoTimer, AtMillis: nowMillis + 500}}
	}
	out, t := c.observe(ev)
	c.until = c.foreignUntil(nowMillis)
	if c.regging && !c.registered() {
		// This run's registration is not folded yet: ranks from an older
		// registration must not drive a challenge.
		return append(out, Effect{Kind: DoTimer, AtMillis: nowMillis + 50})
	}
	d := Evaluate(c.state, c.me, nowMillis, c.cfg)
	st := &stepping{effects: out, held: t.Held, next: nowMillis + 1000}
	switch d.Action {
	case NotRegistered:
		c.notRegistered(st, t, ev.HandoverUntilMillis, nowMillis)
	case Hold:
		c.hold(st, d, nowMillis)
	case Challenge:
		c.challenge(st, nowMillis)
	case Wait:
		c.wait(st, d, t)
	}
	if st.held {
		if nowMillis >= t.ValidUntilMillis {
			st.stepDown("the lease runs out before a renewal committed")
		} else {
			st.next = min(st.next, t.ValidUntilMillis)
		}
	}
	return append(st.effects, Effect{Kind: DoTimer, AtMillis: max(st.next, nowMillis+1)})
}

// stepping is what a Step has decided so far: the effects, whether this
// member still holds the role after them, and when to step again.
type stepping struct {
	effects []Effect
	held    bool
	next    int64
}

func (st *stepping) stepDown(reason string) {
	st.effects = append(st.effects, Effect{Kind: DoStepDown, Reason: reason})
	st.held = false
}

// observe takes in what ev reports, and returns the effects it asks for
// at once and the tenure as of ev (a challenge that won starts one).
func (c *Coordinator) observe(ev Event) ([]Effect, Tenure) {
	var out []Effect
	t := ev.Tenure
	switch ev.Kind {
	case EventRecords:
		c.fold(ev.Records)
	case EventRegistered:
		c.myReg = ev.Offset
	case EventProbed:
		c.probing = false
		if ev.Err == nil {
			c.probe = ev.Offset
		}
	case EventChallenged:
		c.chasing = false
		if ev.Err == nil {
			out = append(out, Effect{Kind: DoTake})
			t = Tenure{Held: true, Term: ev.Term, ValidUntilMillis: ev.ValidUntilMillis}
		}
	case EventLeft:
		// This member no longer acts on its lease: a holder that overrode
		// it need not wait for it to run out.
		out = append(out, Effect{Kind: DoYield, Offset: ev.Offset})
	}
	return out, t
}

// notRegistered: this member is not in the roster. It registers again,
// unless it has just handed the role over.
func (c *Coordinator) notRegistered(st *stepping, t Tenure, handoverUntil, nowMillis int64) {
	// A holder that releases the role deregistered itself: it leaves
	// once its release has committed (ending the tenure now would
	// cancel that commit and fail the hand-over).
	if st.held && !t.Leaving {
		st.stepDown("no longer in the roster")
	}
	c.probe = -1
	if nowMillis < handoverUntil && (c.state.Lease == nil || c.state.Lease.Holder == c.me) {
		// Handed over: wait for the successor before joining the
		// roster again.
		st.next = min(st.next, nowMillis+50)
		return
	}
	if !c.regging {
		c.regging = true
		st.effects = append(st.effects, Effect{Kind: DoRegister})
	}
}

// hold: the lease names this member. It renews, or reclaims a lease a
// previous run of it held.
func (c *Coordinator) hold(st *stepping, d Decision, nowMillis int64) {
	c.regging = false
	if !st.held {
		// The lease names this member but this process does not hold
		// it: a previous incarnation did. Reclaim it (the challenge
		// fences that incarnation).
		st.effects = c.tryChallenge(st.effects, "the lease names this member from a previous run")
		st.next = min(st.next, nowMillis+20)
		return
	}
	c.probe = -1
	st.effects = append(st.effects, Effect{Kind: DoRenewAt, AtMillis: d.WaitUntilMillis})
	st.next = min(st.next, d.WaitUntilMillis)
}

// challenge: it is this member's turn. A holder renews now; any other
// member challenges.
func (c *Coordinator) challenge(st *stepping, nowMillis int64) {
	c.regging = false
	if st.held {
		// Our lease as the topic shows it ran out (renewals not
		// visible yet, or late): renew now.
		st.effects = append(st.effects, Effect{Kind: DoRenewAt, AtMillis: nowMillis})
		return
	}
	st.effects = c.tryChallenge(st.effects, "succession: this member's turn")
	st.next = min(st.next, nowMillis+20)
}

// wait: another member's lease or turn comes first. A holder whose lease
// another challenge has taken steps down.
func (c *Coordinator) wait(st *stepping, d Decision, t Tenure) {
	c.regging = false
	c.probe = -1
	// A lease naming another member that comes after this holder's own
	// lease record means another challenge fenced it; one from before
	// (the view has not reached that record yet) does not.
	if l := c.state.Lease; st.held && l != nil && l.Holder != c.me && c.maxSeen >= int64(t.Term)-1 {
		st.stepDown("the lease names " + string(l.Holder))
	}
	if d.WaitUntilMillis > 0 {
		st.next = min(st.next, d.WaitUntilMillis)
	}
}

// tryChallenge challenges on a fresh view only: first a probe record is
// written, and the challenge goes ahead once the fold has read past it and
// still says so. A member that was paused (or partitioned) would otherwise
// act on the roster and lease it saw before, and take the role back from a
// holder it has not heard of yet.
func (c *Coordinator) tryChallenge(out []Effect, why string) []Effect {
	switch {
	case c.chasing || c.probing:
	case c.probe >= 0 && c.maxSeen >= c.probe:
		c.probe = -1
		c.chasing = true
		out = append(out, Effect{Kind: DoChallenge, Reason: why})
	case c.probe >= 0:
		// waiting to read the probe back
	default:
		c.probing = true
		out = append(out, Effect{Kind: DoProbe})
	}
	return out
}

// registered reports whether the folded state holds this run's registration.
func (c *Coordinator) registered() bool {
	if c.myReg < 0 {
		return false
	}
	for _, r := range c.state.Roster {
		if r.Member == c.me {
			return r.Offset >= c.myReg
		}
	}
	return false
}

func (c *Coordinator) fold(recs []CoordRecord) {
	for _, r := range recs {
		c.latest[string(r.Key)] = r.Record
		c.maxSeen = max(c.maxSeen, r.Offset)
		c.foldForeign(r)
		if r.Challenge && string(r.Key) == c.leaseKey {
			c.term = r.Offset
		}
	}
	all := make([]Record, 0, len(c.latest))
	for _, r := range c.latest {
		all = append(all, r)
	}
	c.state = FoldRecords(c.role, all)
}

// foldForeign keeps, per other member, its latest lease record (offset and
// deadline): until that deadline the member may act on it (confirm reads)
// unless it announced that it left (a yield record naming the offset of its
// last lease record). A new holder serves only once no other member's lease
// is left, so that a challenge decided on a stale view (it missed a renewal,
// or a simultaneous challenger's grant) never leaves two members trusting a
// lease at once.
func (c *Coordinator) foldForeign(r CoordRecord) {
	switch {
	case string(r.Key) == c.leaseKey:
		// A hand-over ends the lease now (a grant whose deadline is now):
		// its holder stopped acting on it first.
		if l := FoldRecords(c.role, []Record{r.Record}).Lease; l != nil && l.Holder != c.me {
			c.foreign[l.Holder] = struct{ offset, deadline int64 }{r.Offset, l.DeadlineMillis}
		}
	case r.YieldOf != "":
		if e, ok := c.foreign[r.YieldOf]; ok && e.offset <= r.YieldUpTo {
			delete(c.foreign, r.YieldOf)
		}
	}
}

// foreignUntil is when the last other member's lease runs out; it forgets
// the leases that ran out before now.
func (c *Coordinator) foreignUntil(now int64) int64 {
	var u int64
	for m, e := range c.foreign {
		if e.deadline <= now {
			delete(c.foreign, m)
		} else {
			u = max(u, e.deadline)
		}
	}
	return u
}
