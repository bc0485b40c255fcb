package succession

// MemberID names a member of a role: one process that may hold it.
type MemberID string

// Registration is a member's latest registration for a role.
type Registration struct {
	Member MemberID
	// Offset is the registration record's offset: the member's join sequence.
	Offset int64
	// AtMillis is the registration record's timestamp: with no lease at all,
	// the member challenges from AtMillis + rank × stagger.
	AtMillis int64
}

// Lease names the member that holds a role and the instant at which its hold
// ends unless it renews.
type Lease struct {
	Holder         MemberID
	DeadlineMillis int64
}

// Live reports whether the lease still holds at nowMillis. A lease is live
// strictly before its deadline: at the deadline the holder reclaims and rank 1
// may challenge (with stagger 0) at the same instant.
func (l Lease) Live(nowMillis int64) bool { return nowMillis < l.DeadlineMillis }

// RoleState is what the coordination topic says about one role: FoldRecords
// builds it. Roster is in offset order with one entry per member (its latest
// registration); Lease is nil when no lease was ever granted or the last one
// was released.
type RoleState struct {
	Role   string
	Roster []Registration
	Lease  *Lease
}

// registration returns m's entry in the roster and its index.
func (s RoleState) registration(m MemberID) (Registration, int, bool) {
	for i, r := range s.Roster {
		if r.Member == m {
			return r, i, true
		}
	}
	return Registration{}, -1, false
}

// RankOf is m's place in the succession. The lease's holder, live or expired,
// is rank 0 while it is registered; everyone else follows in roster (offset)
// order. ok is false when m is not in the roster. RankOf trusts the roster's
// order, which FoldRecords guarantees.
func (s RoleState) RankOf(m MemberID) (rank int, ok bool) {
	_, i, ok := s.registration(m)
	if !ok {
		return 0, false
	}
	if s.Lease == nil {
		return i, true
	}
	if m == s.Lease.Holder {
		return 0, true
	}
	_, h, held := s.registration(s.Lease.Holder)
	if held && h > i {
		// The holder moved from behind m to the front: m moves back one.
		return i + 1, true
	}
	return i, true
}
