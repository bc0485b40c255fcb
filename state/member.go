package state

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// MemberRecord is what the state machine knows of one cluster member:
// raft's configuration holds only its id and peer address, while clients
// and the other members need its client address too (docs/design.md,
// "Membership").
type MemberRecord struct {
	ID         string `json:"id"`
	PeerAddr   string `json:"peer_addr"`
	ClientAddr string `json:"client_addr"`
}

// Bounds of a member record's fields.
const (
	maxMemberIDLen = 128
	maxAddrLen     = 512
)

// Validate checks a record: an id of 1 to 128 characters of
// [A-Za-z0-9._-] (as task ids), and two host:port addresses.
func (m MemberRecord) Validate() error {
	if err := validMemberID(m.ID); err != nil {
		return err
	}
	if err := validAddr(m.PeerAddr); err != nil {
		return fmt.Errorf("member %s: peer address: %w", m.ID, err)
	}
	if err := validAddr(m.ClientAddr); err != nil {
		return fmt.Errorf("member %s: client address: %w", m.ID, err)
	}
	return nil
}

func validMemberID(id string) error {
	if len(id) < 1 || len(id) > maxMemberIDLen {
		return fmt.Errorf("member id must be 1 to %d characters (got %d)", maxMemberIDLen, len(id))
	}
	for _, r := range id {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("member id %q: only [A-Za-z0-9._-] allowed", id)
		}
	}
	return nil
}

// validAddr accepts host:port with a non-empty host and a port of 1-65535.
func validAddr(a string) error {
	if len(a) > maxAddrLen {
		return fmt.Errorf("longer than %d bytes", maxAddrLen)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n") {
		return fmt.Errorf("%q has no valid host", a)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%q has no valid port", a)
	}
	return nil
}

// ErrBadMember is returned by the member encoders for an invalid record.
var ErrBadMember = errors.New("invalid member")

// EncodeSetMember returns the CmdSetMember entry that sets m's record.
func EncodeSetMember(m MemberRecord) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMember, err)
	}
	return (&Command{Type: CmdSetMember, Member: m}).Encode(), nil
}

// EncodeRemoveMember returns the CmdRemoveMember entry that removes id's
// record.
func EncodeRemoveMember(id string) ([]byte, error) {
	if err := validMemberID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMember, err)
	}
	return (&Command{Type: CmdRemoveMember, Member: MemberRecord{ID: id}}).Encode(), nil
}

// setMemberLocked stores m, replacing id's previous record.
func (f *FSM) setMemberLocked(index uint64, m MemberRecord) Result {
	f.members[m.ID] = m
	return Result{Index: index}
}

// removeMemberLocked removes id's record; CodeNotFound when there is none.
func (f *FSM) removeMemberLocked(index uint64, id string) Result {
	if _, ok := f.members[id]; !ok {
		return Result{Index: index, Code: CodeNotFound}
	}
	delete(f.members, id)
	return Result{Index: index}
}

// Members returns the member table, sorted by id.
func (f *FSM) Members() []MemberRecord {
	f.mu.RLock()
	out := make([]MemberRecord, 0, len(f.members))
	for _, m := range f.members {
		out = append(out, m)
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(a, b MemberRecord) int { return strings.Compare(a.ID, b.ID) })
	return out
}
