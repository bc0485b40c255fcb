package ha

import "fmt"

// Event is something the role machine reacts to. The controller's event loop
// is the only caller of Step.
type Event interface{ isEvent() }

// Started: storage is open and the election backend runs.
type Started struct{}

// Observed is the backend's current view; it is re-read on every backend
// signal and on a periodic tick, so a dropped signal only delays it.
type Observed struct {
	State    RaftState
	Term     uint64
	LeaderID string
}

// BarrierDone: the barrier of a leadership term finished. Err is nil when
// every earlier entry is applied.
type BarrierDone struct {
	Term uint64
	Err  error
}

// Fenced: a newer primary exists downstream (the epoch fence). The node must
// leave PRIMARY for the rest of the term.
type Fenced struct {
	Term   uint64
	Reason string
}

// TransferDone: a leadership transfer the machine asked for finished; Err
// is nil when another node took over.
type TransferDone struct{ Err error }

// Stopping: the node shuts down.
type Stopping struct{}

// StorageFailing: a write or sync of the node's storage failed (Reason set),
// or one succeeded again after a failure (Reason empty). A node whose
// storage fails is never PRIMARY: it hands leadership on and says why.
type StorageFailing struct{ Reason string }

func (Started) isEvent()        {}
func (Observed) isEvent()       {}
func (BarrierDone) isEvent()    {}
func (Fenced) isEvent()         {}
func (Stopping) isEvent()       {}
func (TransferDone) isEvent()   {}
func (StorageFailing) isEvent() {}

// Effect is work the event loop performs, in order, after a Step.
type Effect interface{ isEffect() }

// RoleChanged: log it, count it, publish it to watchers.
type RoleChanged struct {
	From, To Role
	Term     uint64
	Reason   string
}

// BeginTerm: start the leadership term's goroutine (barrier, then report
// BarrierDone). At most one term runs at a time.
type BeginTerm struct{ Term uint64 }

// EndTerm: stop the running term goroutine, if any.
type EndTerm struct{}

// Establish: start leader-only services for the term.
type Establish struct{ Term uint64 }

// Revoke: stop leader-only services.
type Revoke struct{}

// FirstDecision: run phase 2 (role-dependent services). Emitted exactly once
// per machine, on the first PRIMARY or STANDBY.
type FirstDecision struct{ Role Role }

// TransferLeadership: hand leadership to another voter (the term could not be
// established, or the node was fenced).
type TransferLeadership struct{ Reason string }

func (RoleChanged) isEffect()        {}
func (BeginTerm) isEffect()          {}
func (EndTerm) isEffect()            {}
func (Establish) isEffect()          {}
func (Revoke) isEffect()             {}
func (FirstDecision) isEffect()      {}
func (TransferLeadership) isEffect() {}

// Machine is the role state machine of one node.
type Machine struct {
	self string

	role     Role
	term     uint64
	leaderID string
	reason   string

	// barrierTerm is the term whose goroutine runs (0: none).
	barrierTerm uint64
	// fencedTerm is a term in which this node must not be PRIMARY again.
	fencedTerm uint64
	// transferring: a leadership transfer is under way.
	transferring bool
	decided      bool
	stopped      bool
	// storage is why the node's storage fails ("" while it works).
	storage string
	// last is the backend's latest observed state, looked at again when
	// the storage's health changes.
	last    Observed
	hasLast bool
}

// NewMachine returns a machine in INIT for the node id.
func NewMachine(self string) *Machine {
	return &Machine{self: self, role: RoleInit, reason: "starting"}
}

// Role, Term, LeaderID and Reason describe the current state.
func (m *Machine) Role() Role       { return m.role }
func (m *Machine) Term() uint64     { return m.term }
func (m *Machine) LeaderID() string { return m.leaderID }
func (m *Machine) Reason() string   { return m.reason }

// Storage is why the node's storage fails, or "" while it works.
func (m *Machine) Storage() string { return m.storage }

// Step applies one event and returns the effects to perform, in order.
func (m *Machine) Step(ev Event) []Effect {
	if m.stopped {
		return nil
	}
	switch ev := ev.(type) {
	case Started:
		if m.role == RoleInit {
			return m.become(RoleElecting, "electing", nil)
		}
		return nil
	case Observed:
		return m.observe(ev)
	case BarrierDone:
		return m.barrierDone(ev)
	case Fenced:
		return m.fenced(ev)
	case TransferDone:
		// A failed transfer is asked again at the next observation that
		// still finds this node leading a term it must not serve.
		m.transferring = false
		return nil
	case Stopping:
		var fx []Effect
		fx = m.leave(fx)
		m.stopped = true
		return fx
	case StorageFailing:
		if ev.Reason == m.storage {
			return nil
		}
		m.storage = ev.Reason
		if ev.Reason == "" {
			// Healthy again: a transfer asked for because of the
			// storage is no longer needed.
			m.transferring = false
		}
		if !m.hasLast {
			return nil
		}
		return m.observe(m.last)
	}
	panic(fmt.Sprintf("ha: unknown event %T", ev))
}

func (m *Machine) observe(o Observed) []Effect {
	m.last, m.hasLast = o, true
	var fx []Effect
	if m.role == RoleInit {
		fx = m.become(RoleElecting, "electing", fx)
	}
	if o.Term > m.term {
		m.term = o.Term
		// A transfer asked for in an older term is over either way.
		m.transferring = false
	}
	m.leaderID = o.LeaderID
	switch {
	case o.State == StateLeader:
		m.leaderID = m.self
		switch {
		case m.storage != "":
			// A leader that cannot write its own storage commits
			// nothing: stay out of PRIMARY and hand leadership to a
			// healthy node. Raft itself does not campaign again while
			// the storage fails (raftha.Config.CampaignAllowed).
			reason := "storage failing: " + m.storage
			fx = m.leave(fx)
			if !m.transferring {
				m.transferring = true
				fx = append(fx, TransferLeadership{Reason: reason})
			}
			return m.become(RoleElecting, reason+"; handing leadership on", fx)
		case m.role == RolePrimary && m.barrierTerm == o.Term:
			return fx
		case o.Term == m.fencedTerm:
			// Fenced in this term: stay out of PRIMARY and keep handing
			// leadership on until Raft settles elsewhere.
			if m.role == RolePrimary {
				fx = m.leave(fx)
				fx = m.become(RoleElecting, "fenced", fx)
			}
			if !m.transferring {
				m.transferring = true
				fx = append(fx, TransferLeadership{Reason: "fenced in this term"})
			}
			return fx
		case m.barrierTerm == o.Term:
			return fx // barrier under way
		}
		// A new term: lost and regained leadership counts as new, so the
		// previous term is revoked before the new one begins.
		fx = m.leave(fx)
		m.barrierTerm = o.Term
		fx = append(fx, BeginTerm{Term: o.Term})
		return m.become(RoleElecting, "elected, applying earlier entries", fx)
	case o.State == StateFollower && o.LeaderID != "" && o.LeaderID != m.self:
		fx = m.leave(fx)
		return m.become(RoleStandby, m.withStorage("following "+o.LeaderID), fx)
	case o.State == StateShutdown:
		fx = m.leave(fx)
		return m.become(RoleElecting, "raft is shut down", fx)
	case m.storage != "":
		fx = m.leave(fx)
		return m.become(RoleElecting, "storage failing: "+m.storage+"; not campaigning until a write succeeds", fx)
	default:
		fx = m.leave(fx)
		return m.become(RoleElecting, "electing", fx)
	}
}

func (m *Machine) barrierDone(b BarrierDone) []Effect {
	if b.Term != m.barrierTerm || m.role != RoleElecting {
		return nil // a stale term
	}
	if b.Err != nil {
		// Nomad's rule: a term that cannot be established is handed on.
		m.barrierTerm = 0
		return []Effect{EndTerm{}, TransferLeadership{Reason: "barrier failed: " + b.Err.Error()}}
	}
	fx := []Effect{Establish{Term: b.Term}}
	return m.become(RolePrimary, "elected and caught up", fx)
}

func (m *Machine) fenced(f Fenced) []Effect {
	if f.Term < m.term || m.role != RolePrimary {
		return nil
	}
	m.fencedTerm = f.Term
	var fx []Effect
	fx = m.leave(fx)
	m.transferring = true
	fx = append(fx, TransferLeadership{Reason: "fenced: " + f.Reason})
	return m.become(RoleElecting, "fenced: "+f.Reason, fx)
}

// withStorage adds the storage's failure, if any, to a reason.
func (m *Machine) withStorage(reason string) string {
	if m.storage == "" {
		return reason
	}
	return reason + "; storage failing: " + m.storage
}

// leave ends PRIMARY duties and any running term.
func (m *Machine) leave(fx []Effect) []Effect {
	if m.role == RolePrimary {
		fx = append(fx, Revoke{})
	}
	if m.barrierTerm != 0 {
		fx = append(fx, EndTerm{})
		m.barrierTerm = 0
	}
	return fx
}

func (m *Machine) become(r Role, reason string, fx []Effect) []Effect {
	if r == m.role && reason == m.reason {
		return fx
	}
	from := m.role
	m.role, m.reason = r, reason
	if from != r {
		fx = append(fx, RoleChanged{From: from, To: r, Term: m.term, Reason: reason})
	}
	if !m.decided && (r == RolePrimary || r == RoleStandby) {
		m.decided = true
		fx = append(fx, FirstDecision{Role: r})
	}
	return fx
}
