// Package ha holds the role state machine (INIT, ELECTING, PRIMARY, STANDBY),
// write-quorum tracking, and the election backends behind them.
//
// The machine is pure: Step takes an event and returns the effects the
// controller's event loop must perform. It does no I/O and reads no clock.
package ha

import "fmt"

// Role is a node's role. The numbering matches xce.v1.Role.
type Role int32

const (
	RoleUnknown  Role = 0
	RoleInit     Role = 1
	RoleElecting Role = 2
	RolePrimary  Role = 3
	RoleStandby  Role = 4
)

func (r Role) String() string {
	switch r {
	case RoleInit:
		return "INIT"
	case RoleElecting:
		return "ELECTING"
	case RolePrimary:
		return "PRIMARY"
	case RoleStandby:
		return "STANDBY"
	}
	return fmt.Sprintf("Role(%d)", int32(r))
}

// ParseRole is the inverse of Role.String.
func ParseRole(s string) (Role, bool) {
	for _, r := range []Role{RoleInit, RoleElecting, RolePrimary, RoleStandby} {
		if r.String() == s {
			return r, true
		}
	}
	return RoleUnknown, false
}

// RaftState is the backend's own view of itself.
type RaftState int

const (
	StateFollower RaftState = iota
	StateCandidate
	StateLeader
	StateShutdown
)

func (s RaftState) String() string {
	switch s {
	case StateFollower:
		return "follower"
	case StateCandidate:
		return "candidate"
	case StateLeader:
		return "leader"
	case StateShutdown:
		return "shutdown"
	}
	return fmt.Sprintf("RaftState(%d)", int(s))
}
