package kafkaha

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xce/xce/ha/succession"
)

// bogus is an input decide does not know.
type bogus struct{}

func (bogus) isInput() {}

// TestDecide steps the coordination loop's decision through scripted
// inputs, with no broker and no clock: each case is a run of inputs, and
// the actions of its last step.
func TestDecide(t *testing.T) {
	const role, me = "primary", "a"
	lease := succession.LeaseConfig{LeaseMillis: 1000, RenewMillis: 300, StaggerMillis: 100}
	rec := func(off int64, k, v []byte, challenge bool) succession.CoordRecord {
		return succession.CoordRecord{Record: succession.Record{Key: k, Value: v, Offset: off, TimestampMillis: 1000}, Challenge: challenge}
	}
	reg := func(off int64, member string) succession.CoordRecord {
		k, v := succession.RegistrationRecord(role, succession.MemberID(member))
		return rec(off, k, v, false)
	}
	leaseOf := func(off int64, member string, deadline int64) succession.CoordRecord {
		k, v := succession.LeaseRecord(role, succession.Lease{Holder: succession.MemberID(member), DeadlineMillis: deadline})
		return rec(off, k, v, true)
	}
	probe := func(off int64) succession.CoordRecord {
		return rec(off, []byte("probe/"+role+"/"+me), []byte("1000"), false)
	}
	won := &holder{term: 3}
	held := succession.Tenure{Held: true, Term: 3, ValidUntilMillis: 1900}

	type step struct {
		in       input
		now      int64
		tenure   succession.Tenure
		handover int64
	}
	at := func(now int64, in input) step { return step{in: in, now: now} }
	// registeredAlone: this member registered and is alone in the roster.
	registeredAlone := []step{at(1000, started{}), at(1001, registered{0}), at(1002, fetched{[]succession.CoordRecord{reg(0, me)}})}
	// probedBack: ... and read its freshness probe back.
	probedBack := append(slices.Clone(registeredAlone), at(1003, probed{offset: 1}), at(1004, fetched{[]succession.CoordRecord{probe(1)}}))
	cases := []struct {
		name  string
		steps []step
		want  []string
		take  *holder
	}{
		{
			name:  "every start registers",
			steps: []step{at(1000, started{})},
			want:  []string{"register", "timer in 500ms"},
		},
		{
			name:  "a registration not folded yet drives nothing",
			steps: []step{at(1000, started{}), at(1001, registered{0})},
			want:  []string{"timer in 50ms"},
		},
		{
			name:  "alone in the roster: probe before challenging",
			steps: registeredAlone,
			want:  []string{"probe", "timer in 20ms"},
		},
		{
			name:  "the probe read back: challenge",
			steps: probedBack,
			want:  []string{"challenge (succession: this member's turn)", "timer in 20ms"},
		},
		{
			name:  "a failed probe is written again",
			steps: append(slices.Clone(registeredAlone), at(1003, probed{offset: -1, err: errors.New("broker down")})),
			want:  []string{"probe", "timer in 20ms"},
		},
		{
			name: "a won challenge takes its holder",
			steps: append(slices.Clone(probedBack),
				at(1005, challenged{h: won, term: 3, validUntilMillis: 1900})),
			// The lease record is not folded yet: renew it at once, and
			// look again when the tenure's lease runs out.
			want: []string{"take", "renew-at 1005", "timer in 895ms"},
			take: won,
		},
		{
			name: "a lost challenge takes nothing and probes again",
			steps: append(slices.Clone(probedBack),
				at(1005, challenged{err: errors.New("fenced")})),
			want: []string{"probe", "timer in 20ms"},
		},
		{
			name: "the holder renews at its renewal instant",
			steps: append(slices.Clone(probedBack),
				step{in: fetched{[]succession.CoordRecord{leaseOf(2, me, 2000)}}, now: 1010, tenure: held}),
			want: []string{"renew-at 1300", "timer in 290ms"},
		},
		{
			name: "a tenure that ended evaluates at once, as a timer does",
			steps: append(slices.Clone(probedBack),
				step{in: fetched{[]succession.CoordRecord{leaseOf(2, me, 2000)}}, now: 1010, tenure: held},
				step{in: tenureEnded{}, now: 1020, tenure: held}),
			want: []string{"renew-at 1300", "timer in 280ms"},
		},
		{
			name: "a holder whose lease ran out steps down; the timer is never in the past",
			steps: append(slices.Clone(probedBack),
				step{in: fetched{[]succession.CoordRecord{leaseOf(2, me, 2000)}}, now: 1010, tenure: held},
				step{in: timerFired{}, now: 1900, tenure: held}),
			want: []string{"renew-at 1900", "step-down (the lease runs out before a renewal committed)", "timer in 1ms"},
		},
		{
			name: "another member's lease: wait, and look again within a second",
			steps: []step{at(1000, started{}), at(1001, registered{1}),
				at(1002, fetched{[]succession.CoordRecord{reg(0, "b"), reg(1, me), leaseOf(2, "b", 3000)}})},
			want: []string{"timer in 1s"},
		},
		{
			name:  "a tenure that left announces its yield",
			steps: append(slices.Clone(registeredAlone), at(1003, left{offset: 7})),
			want:  []string{"yield up-to=7", "timer in 20ms"}, // the probe is in flight
		},
		{
			name: "after a hand-over, no registration before the successor holds",
			steps: []step{at(1000, started{}), at(1001, registered{0}), at(1002, fetched{[]succession.CoordRecord{reg(0, me)}}),
				{in: fetched{[]succession.CoordRecord{{Record: succession.Record{Key: succession.DeregistrationKey(role, me), Offset: 1}}}}, now: 1003, handover: 2000}},
			want: []string{"timer in 50ms"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := succession.NewCoordinator(role, me, lease)
			var acts []action
			for _, s := range tc.steps {
				acts = decide(c, s.in, s.now, s.tenure, s.handover)
			}
			var got []string
			var took *holder
			for _, a := range acts {
				switch a.Kind {
				case succession.DoTake:
					got, took = append(got, "take"), a.take
				case succession.DoTimer:
					got = append(got, fmt.Sprintf("timer in %v", a.after))
				default:
					got = append(got, a.Effect.String())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("actions %q, want %q", got, tc.want)
			}
			if took != tc.take {
				t.Errorf("took %p, want %p", took, tc.take)
			}
		})
	}
}

func TestDecideRefusesAnUnknownInput(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("decide took an input it does not know")
		}
	}()
	decide(succession.NewCoordinator("primary", "a", succession.DefaultLeaseConfig()), bogus{}, 0, succession.Tenure{}, 0)
}

// otherHolder names another member only while its lease, as last seen,
// holds.
func TestOtherHolder(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, tc := range []struct {
		name  string
		lease *succession.Lease
		want  string
	}{
		{"no lease", nil, ""},
		{"own lease", &succession.Lease{Holder: "a", DeadlineMillis: now.UnixMilli() + 100}, ""},
		{"another's live lease", &succession.Lease{Holder: "b", DeadlineMillis: now.UnixMilli() + 100}, "b"},
		{"another's lease at its deadline", &succession.Lease{Holder: "b", DeadlineMillis: now.UnixMilli()}, ""},
	} {
		b := &Backend{cfg: Config{Member: "a"}}
		b.state.Lease = tc.lease
		if got := b.otherHolder(now); got != tc.want {
			t.Errorf("%s: otherHolder = %q, want %q", tc.name, got, tc.want)
		}
	}
}
