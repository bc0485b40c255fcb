// Package dispatch is the API's front: the gate that decides, from role,
// write quorum and the class of the operation, what each request gets
// (docs/design.md, "The gate"), and the handlers behind it.
package dispatch

import (
	"fmt"
	"time"

	"github.com/xce/xce/ha"
)

// Class is the kind of an operation, which alone decides how the gate treats it.
type Class int

const (
	// ClassHealth is served in every role.
	ClassHealth Class = iota + 1
	// ClassRead is served by a PRIMARY with write quorum, or by a STANDBY
	// when the caller asks for stale reads.
	ClassRead
	// ClassWrite is served by a PRIMARY with write quorum only.
	ClassWrite
	// ClassFact (soft state such as worker heartbeats) is served by any PRIMARY.
	ClassFact
	// ClassAdmin is served by a PRIMARY with write quorum only.
	ClassAdmin
)

func (c Class) String() string {
	switch c {
	case ClassHealth:
		return "health"
	case ClassRead:
		return "read"
	case ClassWrite:
		return "write"
	case ClassFact:
		return "fact"
	case ClassAdmin:
		return "admin"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Decision is the gate's answer for one request.
type Decision struct {
	Serve bool
	// Reason says, in an operator's words, why not.
	Reason string
	// Kind is a short, fixed label for Reason (for metrics).
	Kind string
	// RetryAfter is the suggested wait before the next attempt.
	RetryAfter time.Duration
}

// RetryTimings are the retry-after hints the gate gives.
type RetryTimings struct {
	// Electing is the hint while no primary is known (about one election).
	Electing time.Duration
	// NoQuorum is the hint while the primary has lost its write quorum.
	NoQuorum time.Duration
}

// Decide applies the gate's table (docs/design.md, "The gate"). stale is
// whether the caller accepts a stale read (read class only).
func Decide(v *ha.View, class Class, stale bool, t RetryTimings) Decision {
	if class == ClassHealth {
		return Decision{Serve: true}
	}
	if v.Stopping {
		return Decision{Kind: "shutting_down", Reason: "shutting down", RetryAfter: t.Electing}
	}
	switch v.Role {
	case ha.RolePrimary:
		if v.WriteQuorum || class == ClassFact {
			return Decision{Serve: true}
		}
		return Decision{Kind: "no_quorum", Reason: "no write quorum", RetryAfter: t.NoQuorum}
	case ha.RoleStandby:
		if class == ClassRead && stale {
			return Decision{Serve: true}
		}
		if v.LeaderID != "" {
			return Decision{Kind: "standby", Reason: fmt.Sprintf("standby: primary is %s at %s", v.LeaderID, v.LeaderAddr)}
		}
		return Decision{Kind: "standby", Reason: "standby: primary unknown", RetryAfter: t.Electing}
	case ha.RoleInit:
		return Decision{Kind: "starting", Reason: "starting", RetryAfter: t.Electing}
	case ha.RoleElecting:
		if v.Storage != "" {
			// This node cannot lead until its storage takes writes
			// again; another node may already be PRIMARY.
			return Decision{Kind: "storage", Reason: "storage failing: " + v.Storage, RetryAfter: t.Electing}
		}
		if v.QuorumLost {
			return Decision{Kind: "no_quorum", Reason: "no write quorum", RetryAfter: t.NoQuorum}
		}
		return Decision{Kind: "electing", Reason: "electing", RetryAfter: t.Electing}
	default:
		return Decision{Kind: "electing", Reason: "electing", RetryAfter: t.Electing}
	}
}

// heldRetry is the retry-after of a refusal after a hold: the caller was
// held for the hint already, and should come back at once.
const heldRetry = 10 * time.Millisecond

// Holds reports whether the gate holds a request it refuses, for up to the
// decision's retry-after, so as to serve it the moment the view allows:
// while no primary is known (a node starting, restoring its state or
// electing), when the caller can only wait. A STANDBY that knows the
// PRIMARY sends the caller there at once, a PRIMARY without write quorum
// answers at once, and so does a node shutting down or whose storage
// fails.
func Holds(v *ha.View, d Decision) bool {
	return !d.Serve && d.RetryAfter > 0 && v.Role != ha.RolePrimary && v.LeaderAddr == "" && !v.Stopping && v.Storage == ""
}
