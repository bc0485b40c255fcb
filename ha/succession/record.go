package succession

import (
	"bytes"
	"cmp"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Record is one record of the coordination topic as the transport consumed it:
// a compacted topic with a single partition, so Offset is a total order.
type Record struct {
	Key   []byte
	Value []byte // nil is a tombstone
	// Offset is the record's offset in the partition: the join sequence.
	Offset int64
	// TimestampMillis is the record's timestamp in milliseconds. Configure the
	// topic with message.timestamp.type=LogAppendTime so that every member's
	// instant comes from one clock (the leader broker's) and never decreases with
	// the offset; with CreateTime it is the producer's clock.
	TimestampMillis int64
}

// Encoding versions and key prefixes. A reader that does not understand a
// value treats it as unusable (see FoldRecords), so a new format needs new
// readers first.
const (
	regPrefix   = "reg/"
	leasePrefix = "lease/"
	regTag      = "reg v1 "
	leaseTag    = "lease v1 "
)

func esc(s string) string { return url.PathEscape(s) }

// RegistrationKey is the key of member's registration for role.
func RegistrationKey(role string, member MemberID) []byte {
	return []byte(regPrefix + esc(role) + "/" + esc(string(member)))
}

// DeregistrationKey is the key to produce with a nil value (a tombstone) to
// deregister member from role. It is the registration key: compaction then
// removes the registration for good.
func DeregistrationKey(role string, member MemberID) []byte {
	return RegistrationKey(role, member)
}

// RegistrationRecord is the key and value member produces to register for
// role, or to register again after a recovery (which moves it to the tail).
// The member ID must be non-empty; FoldRecords ignores empty ones.
func RegistrationRecord(role string, member MemberID) (key, value []byte) {
	return RegistrationKey(role, member), registrationValue(role, member)
}

func registrationValue(role string, member MemberID) []byte {
	return []byte(regTag + esc(role) + " " + esc(string(member)))
}

// LeaseKey is the key of role's lease. Producing it with a nil value releases
// the lease; note that with no lease every registered member's anchor is its
// own registration instant, usually long past, so after a release all of them
// challenge at once. To hand over one stagger at a time instead, deregister and
// write a lease whose deadline is now.
func LeaseKey(role string) []byte {
	return []byte(leasePrefix + esc(role))
}

// LeaseRecord is the key and value that grant or renew l for role.
func LeaseRecord(role string, l Lease) (key, value []byte) {
	return LeaseKey(role), leaseValue(role, l)
}

func leaseValue(role string, l Lease) []byte {
	return []byte(leaseTag + esc(role) + " " + esc(string(l.Holder)) + " " +
		strconv.FormatInt(l.DeadlineMillis, 10))
}

// parseLease decodes a lease value of role. Only the exact encoding that
// leaseValue produces is accepted, so every value has one meaning.
func parseLease(role string, v []byte) (Lease, bool) {
	f := strings.Split(string(v), " ")
	if len(f) != 5 || f[0]+" "+f[1]+" " != leaseTag || f[2] != esc(role) {
		return Lease{}, false
	}
	holder, err := url.PathUnescape(f[3])
	if err != nil || holder == "" {
		return Lease{}, false
	}
	deadline, err := strconv.ParseInt(f[4], 10, 64)
	if err != nil {
		return Lease{}, false
	}
	l := Lease{Holder: MemberID(holder), DeadlineMillis: deadline}
	if !bytes.Equal(leaseValue(role, l), v) {
		return Lease{}, false
	}
	return l, true
}

// compareRecords orders records by offset and breaks ties (which a real
// partition never has) on every other field, so that the fold of any
// permutation is the same.
func compareRecords(a, b Record) int {
	if c := cmp.Compare(a.Offset, b.Offset); c != 0 {
		return c
	}
	if c := cmp.Compare(a.TimestampMillis, b.TimestampMillis); c != 0 {
		return c
	}
	if c := bytes.Compare(a.Key, b.Key); c != 0 {
		return c
	}
	switch {
	case a.Value == nil && b.Value == nil:
		return 0
	case a.Value == nil:
		return -1
	case b.Value == nil:
		return 1
	}
	return bytes.Compare(a.Value, b.Value)
}

// FoldRecords replays the coordination topic into role's state. It folds a
// sorted copy of recs in offset order (recs is not modified), so records may
// arrive in any order:
//
//   - records of other roles, and records whose key is not exactly an encoding
//     of this role's keys (including non-canonical escapes), are ignored;
//   - a registration registers its member at the record's offset and
//     timestamp; a later one (higher offset) replaces it, and a tombstone
//     removes the member;
//   - a lease record replaces the lease; a tombstone removes it.
//
// A value that is not exactly the encoding of its key's record is unusable:
// it supersedes the key's earlier value as a tombstone would, and never
// registers anyone or grants anything. Ignoring it instead would let the fold
// depend on compaction, which keeps only the latest value of each key: two
// members replaying the partition before and after a cleaning would disagree
// on ranks. FoldRecords never panics.
func FoldRecords(role string, recs []Record) RoleState {
	sorted := slices.Clone(recs)
	slices.SortFunc(sorted, compareRecords)

	regKeyPrefix := []byte(regPrefix + esc(role) + "/")
	leaseKey := LeaseKey(role)

	regs := make(map[MemberID]Registration)
	var lease *Lease
	for _, r := range sorted {
		switch {
		case bytes.Equal(r.Key, leaseKey):
			lease = nil
			if r.Value == nil {
				continue
			}
			if l, ok := parseLease(role, r.Value); ok {
				lease = &l
			}
		case bytes.HasPrefix(r.Key, regKeyPrefix):
			rest := string(r.Key[len(regKeyPrefix):])
			m, err := url.PathUnescape(rest)
			if err != nil || m == "" || esc(m) != rest {
				continue // not a key this role's members produce
			}
			member := MemberID(m)
			delete(regs, member)
			if r.Value != nil && bytes.Equal(r.Value, registrationValue(role, member)) {
				regs[member] = Registration{Member: member, Offset: r.Offset, AtMillis: r.TimestampMillis}
			}
		}
	}

	st := RoleState{Role: role, Lease: lease}
	if len(regs) > 0 {
		st.Roster = make([]Registration, 0, len(regs))
		for _, reg := range regs {
			st.Roster = append(st.Roster, reg)
		}
		slices.SortFunc(st.Roster, func(a, b Registration) int {
			if c := cmp.Compare(a.Offset, b.Offset); c != 0 {
				return c
			}
			return cmp.Compare(a.Member, b.Member)
		})
	}
	return st
}
