package succession

import (
	"fmt"
	"strings"
	"testing"
)

// topic is an in-memory coordination topic: a single partition that assigns
// offsets in append order. It stands in for the broker in every test.
type topic struct {
	role string
	recs []Record
	next int64
}

func newTopic(role string) *topic { return &topic{role: role} }

func (tp *topic) append(key, value []byte, atMillis int64) int64 {
	off := tp.next
	tp.recs = append(tp.recs, Record{Key: key, Value: value, Offset: off, TimestampMillis: atMillis})
	tp.next++
	return off
}

func (tp *topic) register(m MemberID, at int64) int64 {
	k, v := RegistrationRecord(tp.role, m)
	return tp.append(k, v, at)
}

func (tp *topic) deregister(m MemberID, at int64) int64 {
	return tp.append(DeregistrationKey(tp.role, m), nil, at)
}

func (tp *topic) lease(m MemberID, deadline, at int64) int64 {
	k, v := LeaseRecord(tp.role, Lease{Holder: m, DeadlineMillis: deadline})
	return tp.append(k, v, at)
}

func (tp *topic) release(at int64) int64 {
	return tp.append(LeaseKey(tp.role), nil, at)
}

func (tp *topic) state() RoleState { return FoldRecords(tp.role, tp.recs) }

// formatState renders a state on two lines for scripts and failure messages.
func formatState(s RoleState) string {
	var b strings.Builder
	b.WriteString("roster:")
	for _, r := range s.Roster {
		fmt.Fprintf(&b, " %s@%d(t=%d)", r.Member, r.Offset, r.AtMillis)
	}
	b.WriteString("\nlease: ")
	if s.Lease == nil {
		b.WriteString("none")
	} else {
		fmt.Fprintf(&b, "%s until %d", s.Lease.Holder, s.Lease.DeadlineMillis)
	}
	return b.String()
}

// expect asserts Evaluate's answer for member at now.
func expect(t *testing.T, s RoleState, m MemberID, now int64, cfg LeaseConfig, want Decision) {
	t.Helper()
	if got := Evaluate(s, m, now, cfg); got != want {
		t.Fatalf("Evaluate(%s, now=%d) = %v, want %v\n%s", m, now, got, want, formatState(s))
	}
}

func wait(until int64) Decision { return Decision{Action: Wait, WaitUntilMillis: until} }
func hold(until int64) Decision { return Decision{Action: Hold, WaitUntilMillis: until} }

var (
	challenge     = Decision{Action: Challenge}
	notRegistered = Decision{Action: NotRegistered}
)
