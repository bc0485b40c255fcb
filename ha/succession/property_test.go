package succession

import (
	"math/rand/v2"
	"testing"
)

// pool is the members random states draw from; "z" is never registered by
// randomRecords but may hold a lease.
var pool = []MemberID{"a", "b", "c", "d", "e", "z"}

// randomRecords is a random but realistic history of role "r": registrations,
// deregistrations, leases, releases, other roles' records and garbage, with
// unique offsets delivered in a random order.
func randomRecords(rng *rand.Rand) []Record {
	n := rng.IntN(16)
	offs := rng.Perm(n + 4)
	var recs []Record
	for i := range n {
		off, at := int64(offs[i]), rng.Int64N(3000)
		m := pool[rng.IntN(len(pool)-1)]
		switch rng.IntN(10) {
		case 0, 1, 2, 3:
			recs = append(recs, reg(off, at, "r", m))
		case 4:
			recs = append(recs, rec(off, at, DeregistrationKey("r", m), nil))
		case 5, 6:
			recs = append(recs, lease(off, at, "r", pool[rng.IntN(len(pool))], rng.Int64N(6000)))
		case 7:
			recs = append(recs, rec(off, at, LeaseKey("r"), nil))
		case 8:
			recs = append(recs, reg(off, at, "other", m))
		case 9:
			recs = append(recs, rec(off, at, RegistrationKey("r", m), []byte("garbage")))
		}
	}
	return recs
}

func randomConfig(rng *rand.Rand) LeaseConfig {
	l := 2 + rng.Int64N(2000)
	return LeaseConfig{LeaseMillis: l, RenewMillis: 1 + rng.Int64N(l-1), StaggerMillis: rng.Int64N(4) * rng.Int64N(500)}
}

// TestWaitEndsExactlyWhenTheAnswerChanges checks, over many random states,
// that a Wait's instant is the earliest at which the answer changes, that it
// does not move with now (the anchor never comes from now), and that time
// alone only ever turns Wait or Hold into Challenge.
func TestWaitEndsExactlyWhenTheAnswerChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var seen [4]int
	for i := range 20_000 {
		s := FoldRecords("r", randomRecords(rng))
		c := randomConfig(rng)
		m := pool[rng.IntN(len(pool))]
		if s.Lease != nil && rng.IntN(3) == 0 {
			m = s.Lease.Holder
		}
		now := rng.Int64N(9000) - 1000
		d := Evaluate(s, m, now, c)
		seen[d.Action]++
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: %s at %d with %+v: %v\n%s\n"+format,
				append([]any{i, m, now, c, d, formatState(s)}, args...)...)
		}
		at := func(ts int64) Decision { return Evaluate(s, m, ts, c) }
		later := now + rng.Int64N(10_000)
		_, registered := s.RankOf(m)

		switch d.Action {
		case NotRegistered:
			if registered || at(later) != d {
				fail("registered=%v, at %d: %v", registered, later, at(later))
			}
		case Wait:
			w := d.WaitUntilMillis
			if w <= now {
				fail("waits until the past")
			}
			if got := at(w - 1); got != d {
				fail("at %d (one before): %v", w-1, got)
			}
			if got := at(w); got.Action != Challenge {
				fail("at %d: %v, want CHALLENGE", w, got)
			}
			if ts := now - 1000 + rng.Int64N(w-now+1000); at(ts) != d {
				fail("at %d, before the wait ends: %v: the instant moved with now", ts, at(ts))
			}
		case Hold:
			l := s.Lease
			if l == nil || l.Holder != m || !l.Live(now) {
				fail("holds without a live lease")
			}
			if w := d.WaitUntilMillis; w < now || w >= l.DeadlineMillis {
				fail("renews outside [now, deadline)")
			}
			if ts := now + rng.Int64N(l.DeadlineMillis-now); at(ts).Action != Hold {
				fail("at %d, before the deadline: %v", ts, at(ts))
			}
			if got := at(l.DeadlineMillis); got != challenge {
				fail("at the deadline: %v, want CHALLENGE (reclaim)", got)
			}
		case Challenge:
			if l := s.Lease; l != nil && l.Live(now) {
				fail("challenges a live lease")
			}
			if got := at(later); got != challenge {
				fail("at %d: %v: a challenge does not expire", later, got)
			}
		}
	}
	for a, n := range seen {
		if n < 500 {
			t.Errorf("only %d random cases ended in %v: the generator is too narrow", n, Action(a))
		}
	}
}

// TestNobodyChallengesALiveLeaseAndRanksChallengeInOrder checks every member
// of random states with a lease: none challenges while it is live, and when
// the stagger is positive rank n's anchor is exactly one stagger after rank
// n-1's.
func TestNobodyChallengesALiveLeaseAndRanksChallengeInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5_000 {
		s := FoldRecords("r", randomRecords(rng))
		if s.Lease == nil || len(s.Roster) == 0 {
			continue
		}
		c := randomConfig(rng)
		c.StaggerMillis = 1 + rng.Int64N(300)
		now := s.Lease.DeadlineMillis - 1 - rng.Int64N(100)
		anchors := make([]int64, len(s.Roster))
		for _, r := range s.Roster {
			rank, _ := s.RankOf(r.Member)
			d := Evaluate(s, r.Member, now, c)
			switch d.Action {
			case Hold:
				if rank != 0 || r.Member != s.Lease.Holder {
					t.Fatalf("case %d: %s of rank %d holds\n%s", i, r.Member, rank, formatState(s))
				}
				anchors[0] = s.Lease.DeadlineMillis
			case Wait:
				anchors[rank] = d.WaitUntilMillis
			default:
				t.Fatalf("case %d: %s at %d: %v under a live lease\n%s", i, r.Member, now, d, formatState(s))
			}
		}
		for n, a := range anchors {
			if want := s.Lease.DeadlineMillis + int64(n)*c.StaggerMillis; a != want {
				t.Fatalf("case %d: rank %d anchored at %d, want %d\n%s", i, n, a, want, formatState(s))
			}
		}
	}
}
