package succession

import (
	"fmt"
	"math"
)

// Grant is the lease holder obtains by writing (or renewing) at nowMillis.
func (c LeaseConfig) Grant(holder MemberID, nowMillis int64) Lease {
	return Lease{Holder: holder, DeadlineMillis: addSat(nowMillis, c.LeaseMillis)}
}

// Action is what a member should do about a role.
type Action int

// The zero Action is NotRegistered, so a zero Decision never starts anything.
const (
	// NotRegistered: the member is not in the roster; it must register before
	// it can hold or challenge. No instant changes this, only a record.
	NotRegistered Action = iota
	// Hold: the member holds a live lease; renew it at WaitUntilMillis.
	Hold
	// Challenge: take the role now (InitProducerId, then write the lease).
	Challenge
	// Wait: do nothing until WaitUntilMillis or the next record.
	Wait
)

func (a Action) String() string {
	switch a {
	case NotRegistered:
		return "NOT_REGISTERED"
	case Hold:
		return "HOLD"
	case Challenge:
		return "CHALLENGE"
	case Wait:
		return "WAIT"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is Evaluate's answer. WaitUntilMillis is the instant to act again
// for Hold (renew) and Wait (evaluate again); it is 0 for NotRegistered and
// Challenge, which no passing of time changes. A Wait ends exactly when the
// answer changes; a Hold's answer changes only at the lease's deadline, after
// its renewal instant.
type Decision struct {
	Action          Action
	WaitUntilMillis int64
}

func (d Decision) String() string {
	switch d.Action {
	case Hold, Wait:
		return fmt.Sprintf("%s until=%d", d.Action, d.WaitUntilMillis)
	}
	return d.Action.String()
}

// Evaluate is what member should do about state's role at nowMillis; see the
// package documentation for the rules. Only a new record (a new state) or the
// passing of WaitUntilMillis can change the answer.
//
// Hold's WaitUntilMillis is the renewal instant: the lease was granted at
// deadline - LeaseMillis and is renewed RenewMillis later. It is clamped into
// [nowMillis, deadline): a renewal that is already due (a lease written with a
// longer LeaseMillis, or a holder that fell behind) is due now, and a renewal
// is always attempted while the lease still holds. A failed renewal leaves the
// state unchanged, so the next Evaluate says renew now again: the caller backs
// off between attempts.
//
// Challenge and Wait anchor at the lease's deadline + rank × stagger, or with
// no lease at the member's own registration instant + rank × stagger, never at
// nowMillis. A member named by a live lease but no longer registered is
// NotRegistered: it has left and should let the lease lapse. cfg should pass
// Validate; a negative stagger counts as 0, and arithmetic saturates instead
// of overflowing.
func Evaluate(state RoleState, member MemberID, nowMillis int64, cfg LeaseConfig) Decision {
	rank, ok := state.RankOf(member)
	if !ok {
		return Decision{Action: NotRegistered}
	}
	l := state.Lease
	if l != nil && l.Holder == member && l.Live(nowMillis) {
		renew := addSat(addSat(l.DeadlineMillis, negSat(cfg.LeaseMillis)), cfg.RenewMillis)
		renew = min(max(renew, nowMillis), l.DeadlineMillis-1)
		return Decision{Action: Hold, WaitUntilMillis: renew}
	}
	at := anchor(state, member, rank, cfg)
	if nowMillis >= at {
		return Decision{Action: Challenge}
	}
	return Decision{Action: Wait, WaitUntilMillis: at}
}

// anchor is the instant from which member, of the given rank, challenges.
func anchor(state RoleState, member MemberID, rank int, cfg LeaseConfig) int64 {
	var base int64
	if state.Lease != nil {
		base = state.Lease.DeadlineMillis
	} else {
		reg, _, _ := state.registration(member)
		base = reg.AtMillis
	}
	return addSat(base, mulSat(int64(rank), max(cfg.StaggerMillis, 0)))
}

// addSat is a+b, saturated at the int64 limits.
func addSat(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// negSat is -a, with -MinInt64 saturated to MaxInt64.
func negSat(a int64) int64 {
	if a == math.MinInt64 {
		return math.MaxInt64
	}
	return -a
}

// mulSat is a×b for a, b >= 0, saturated at MaxInt64.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
