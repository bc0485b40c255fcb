package succession

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// cfg is the configuration of the hand-written scenarios: a lease of 1 s,
// renewed 300 ms after each grant, challengers 100 ms apart.
var cfg = LeaseConfig{LeaseMillis: 1000, RenewMillis: 300, StaggerMillis: 100}

// threeMembers is a, b, c registered in that order, a holding a lease granted
// at 0.
func threeMembers() *topic {
	tp := newTopic("controller")
	tp.register("a", 0)
	tp.register("b", 0)
	tp.register("c", 0)
	tp.lease("a", 1000, 0)
	return tp
}

func TestHolderThatStopsRenewingIsSucceededByRank1OneStaggerAfterItsDeadline(t *testing.T) {
	tp := threeMembers()
	s := tp.state()
	expect(t, s, "a", 0, cfg, hold(300))
	expect(t, s, "b", 0, cfg, wait(1100))
	expect(t, s, "c", 0, cfg, wait(1200))

	// a renews once at 300, then dies.
	tp.lease("a", 1300, 300)
	s = tp.state()
	expect(t, s, "a", 300, cfg, hold(600))
	expect(t, s, "b", 300, cfg, wait(1400))
	expect(t, s, "c", 300, cfg, wait(1500))

	expect(t, s, "b", 1399, cfg, wait(1400))
	expect(t, s, "b", 1400, cfg, challenge)
	expect(t, s, "c", 1400, cfg, wait(1500))

	// b takes over: its lease record moves every anchor to the new deadline,
	// so c no longer challenges at 1500. Dead a is now rank 1, c rank 2.
	tp.lease("b", 2400, 1400)
	s = tp.state()
	expect(t, s, "b", 1400, cfg, hold(1700))
	expect(t, s, "c", 1500, cfg, wait(2600))
	expect(t, s, "a", 1500, cfg, wait(2500))
}

func TestRank2ChallengesTwoStaggersAfterTheDeadlineWhenRank1IsDeadToo(t *testing.T) {
	tp := threeMembers()
	s := tp.state() // a and b die; nobody writes again
	expect(t, s, "c", 1100, cfg, wait(1200))
	expect(t, s, "c", 1199, cfg, wait(1200))
	expect(t, s, "c", 1200, cfg, challenge)
	tp.lease("c", 2200, 1200)
	s = tp.state()
	expect(t, s, "c", 1200, cfg, hold(1500))
	if r, _ := s.RankOf("c"); r != 0 {
		t.Fatalf("rank of new holder c = %d, want 0", r)
	}
}

func TestRecoveredMemberRegistersAgainAndLandsAtTheTail(t *testing.T) {
	tp := threeMembers()
	tp.lease("b", 2100, 1100) // a died; b took over at 1100
	tp.register("a", 3000)    // a recovers and registers again
	s := tp.state()
	if got := formatState(s); got != "roster: b@1(t=0) c@2(t=0) a@5(t=3000)\nlease: b until 2100" {
		t.Fatalf("state:\n%s", got)
	}
	for m, want := range map[MemberID]int{"b": 0, "c": 1, "a": 2} {
		if r, ok := s.RankOf(m); !ok || r != want {
			t.Errorf("RankOf(%s) = %d, %v, want %d", m, r, ok, want)
		}
	}
	// No failback: b's lease has expired (it died too) and a comes after c.
	expect(t, s, "c", 3000, cfg, challenge)
	expect(t, s, "a", 2150, cfg, wait(2300))
	expect(t, s, "a", 2300, cfg, challenge)
	// While b holds, a only waits behind c.
	tp.lease("b", 4000, 3000)
	s = tp.state()
	expect(t, s, "a", 3001, cfg, wait(4200))
	expect(t, s, "c", 3001, cfg, wait(4100))
}

func TestHolderOfAnExpiredLeaseKeepsRank0AndReclaimsAtItsOwnDeadline(t *testing.T) {
	tp := threeMembers()
	s := tp.state() // a pauses (GC, partition) and misses its renewal
	expect(t, s, "a", 999, cfg, hold(999))
	if r, _ := s.RankOf("a"); r != 0 {
		t.Fatalf("rank of expired holder = %d, want 0", r)
	}
	expect(t, s, "a", 1000, cfg, challenge)
	expect(t, s, "a", 5000, cfg, challenge)
	expect(t, s, "b", 1000, cfg, wait(1100))
	tp.lease("a", 2000, 1000)
	s = tp.state()
	expect(t, s, "a", 1000, cfg, hold(1300))
	expect(t, s, "b", 1000, cfg, wait(2100))
}

func TestWithNoLeaseEachMemberChallengesFromItsOwnRegistrationPlusRankStaggers(t *testing.T) {
	tp := newTopic("controller")
	tp.register("a", 10)
	tp.register("b", 20)
	tp.register("c", 500)
	s := tp.state()
	expect(t, s, "a", 5, cfg, wait(10)) // evaluated before its own timestamp: clock skew
	expect(t, s, "a", 10, cfg, challenge)
	expect(t, s, "b", 10, cfg, wait(120))
	expect(t, s, "b", 120, cfg, challenge)
	expect(t, s, "c", 10, cfg, wait(700))
	expect(t, s, "c", 699, cfg, wait(700))
	expect(t, s, "c", 700, cfg, challenge)

	// a leaves before taking the role: b becomes rank 0, anchored at its own
	// registration, c rank 1.
	tp.deregister("a", 30)
	s = tp.state()
	expect(t, s, "b", 30, cfg, challenge)
	expect(t, s, "c", 30, cfg, wait(600))

	// A released lease is no lease: everyone is anchored at registration.
	tp.lease("b", 1030, 30)
	tp.release(40)
	s = tp.state()
	expect(t, s, "b", 40, cfg, challenge)
	expect(t, s, "c", 40, cfg, wait(600))
}

func TestRosterOfOne(t *testing.T) {
	tp := newTopic("controller")
	tp.register("a", 50)
	s := tp.state()
	expect(t, s, "a", 50, cfg, challenge)
	expect(t, s, "z", 50, cfg, notRegistered)
	tp.lease("a", 1050, 50)
	s = tp.state()
	expect(t, s, "a", 50, cfg, hold(350))
	expect(t, s, "a", 1049, cfg, hold(1049))
	expect(t, s, "a", 1050, cfg, challenge)
	expect(t, s, "z", 1050, cfg, notRegistered)
}

func TestDeregisteredMemberIsNotRegisteredAndThoseBehindMoveUp(t *testing.T) {
	tp := threeMembers()
	tp.deregister("b", 100)
	s := tp.state()
	expect(t, s, "b", 100, cfg, notRegistered)
	expect(t, s, "c", 100, cfg, wait(1100))

	// The holder leaves with its lease still live: nobody challenges before
	// the deadline, and c, now rank 0, goes at the deadline itself.
	tp.deregister("a", 200)
	s = tp.state()
	expect(t, s, "a", 200, cfg, notRegistered)
	expect(t, s, "c", 200, cfg, wait(1000))
	expect(t, s, "c", 1000, cfg, challenge)
}

func TestHolderHandsOverByDeregisteringAndExpiringItsLease(t *testing.T) {
	tp := threeMembers()
	tp.deregister("a", 400)
	tp.lease("a", 400, 400) // a lease that ends now
	s := tp.state()
	expect(t, s, "b", 400, cfg, challenge)
	expect(t, s, "c", 400, cfg, wait(500))
}

func TestStaggerZeroSendsEveryChallengerAtTheDeadline(t *testing.T) {
	zero := cfg
	zero.StaggerMillis = 0
	s := threeMembers().state()
	for _, m := range []MemberID{"b", "c"} {
		expect(t, s, m, 0, zero, wait(1000))
		expect(t, s, m, 999, zero, wait(1000))
		expect(t, s, m, 1000, zero, challenge)
	}
	expect(t, s, "a", 1000, zero, challenge)

	// Without a lease, stagger 0 anchors everyone at its own registration.
	tp := newTopic("controller")
	tp.register("a", 10)
	tp.register("b", 20)
	s = tp.state()
	expect(t, s, "b", 19, zero, wait(20))
	expect(t, s, "b", 20, zero, challenge)
}

func TestHolderRenewsRenewMillisAfterTheGrantButNeverInThePastOrAfterTheDeadline(t *testing.T) {
	tp := newTopic("controller")
	tp.register("a", 0)
	tp.lease("a", 5000, 0) // granted with a longer lease than cfg's
	s := tp.state()
	expect(t, s, "a", 0, cfg, hold(4300))
	expect(t, s, "a", 4300, cfg, hold(4300))
	expect(t, s, "a", 4500, cfg, hold(4500)) // overdue: renew now
	expect(t, s, "a", 4999, cfg, hold(4999))
	expect(t, s, "a", 5000, cfg, challenge)

	bad := LeaseConfig{LeaseMillis: 1000, RenewMillis: 2000} // fails Validate
	expect(t, s, "a", 0, bad, hold(4999))
}

func TestArithmeticSaturatesAtTheEdgesOfTime(t *testing.T) {
	tp := newTopic("controller")
	tp.register("a", 0)
	tp.register("b", 0)
	tp.lease("a", math.MaxInt64-1, 0)
	s := tp.state()
	expect(t, s, "b", 0, cfg, wait(math.MaxInt64))
	expect(t, s, "b", math.MaxInt64, cfg, challenge)
	huge := LeaseConfig{LeaseMillis: math.MaxInt64, RenewMillis: 1, StaggerMillis: math.MaxInt64}
	expect(t, s, "a", math.MinInt64, huge, hold(0)) // granted at -1, renewed 1 ms later
	expect(t, s, "b", math.MinInt64, huge, wait(math.MaxInt64))

	tp = newTopic("controller")
	tp.register("a", 0)
	tp.lease("a", math.MinInt64+1, 0)
	expect(t, tp.state(), "a", math.MinInt64, cfg, hold(math.MinInt64))
}

// member is one process in a simulated failover.
type member struct {
	id    MemberID
	alive bool
}

// event is something the test does to the cluster at an instant.
type event struct {
	at   int64
	what string // "register", "die", "recover" (registers again), "pause", "resume"
	who  MemberID
}

// simulate runs members against an in-memory topic with a fake clock that
// jumps from one instant of interest to the next, and returns who held the
// role from when, and the challenges made. Live members act on Evaluate: they
// renew a Hold when it is due and win a Challenge by writing a lease, in
// member order, so that with simultaneous challengers the first wins and the
// others see its lease (as they would learn from the epoch).
func simulate(t *testing.T, cfg LeaseConfig, events []event, until int64) (holders, challenges []string) {
	t.Helper()
	tp := newTopic("controller")
	var members []*member
	find := func(id MemberID) *member {
		for _, m := range members {
			if m.id == id {
				return m
			}
		}
		m := &member{id: id}
		members = append(members, m)
		return m
	}
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	holder := MemberID("")
	now := int64(0)
	for steps := 0; now <= until; steps++ {
		if steps > 10_000 {
			t.Fatalf("no progress at %d", now)
		}
		for len(events) > 0 && events[0].at <= now {
			ev := events[0]
			events = events[1:]
			m := find(ev.who)
			switch ev.what {
			case "register", "recover":
				m.alive = true
				tp.register(m.id, now)
			case "die", "pause":
				m.alive = false
			case "resume":
				m.alive = true
			}
		}
		next := int64(math.MaxInt64)
		if len(events) > 0 {
			next = events[0].at
		}
		for _, m := range members {
			if !m.alive {
				continue
			}
			d := Evaluate(tp.state(), m.id, now, cfg)
			switch {
			case d.Action == Challenge:
				challenges = append(challenges, fmt.Sprintf("%d %s", now, m.id))
				tp.lease(m.id, cfg.Grant(m.id, now).DeadlineMillis, now)
				d = Evaluate(tp.state(), m.id, now, cfg)
			case d.Action == Hold && d.WaitUntilMillis <= now:
				tp.lease(m.id, cfg.Grant(m.id, now).DeadlineMillis, now)
				d = Evaluate(tp.state(), m.id, now, cfg)
			}
			if d.Action == Hold || d.Action == Wait {
				if d.WaitUntilMillis <= now && d.Action == Wait {
					t.Fatalf("%s told to wait until %d at %d", m.id, d.WaitUntilMillis, now)
				}
				next = min(next, max(d.WaitUntilMillis, now+1))
			}
		}
		if l := tp.state().Lease; l != nil && l.Holder != holder {
			holder = l.Holder
			holders = append(holders, fmt.Sprintf("%d %s", now, holder))
		}
		now = next
	}
	return holders, challenges
}

func TestSimulatedFailoversFollowTheRanks(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        LeaseConfig
		events     []event
		until      int64
		holders    []string
		challenges []string
	}{{
		name: "holder dies, rank 1 takes over one stagger after the deadline",
		cfg:  cfg,
		events: []event{
			{0, "register", "a"}, {1, "register", "b"}, {2, "register", "c"},
			{500, "die", "a"}, // last renewal at 300: deadline 1300
		},
		until:      10_000,
		holders:    []string{"0 a", "1400 b"},
		challenges: []string{"0 a", "1400 b"},
	}, {
		name: "holder and rank 1 die together, rank 2 two staggers after the deadline",
		cfg:  cfg,
		events: []event{
			{0, "register", "a"}, {1, "register", "b"}, {2, "register", "c"},
			{500, "die", "a"}, {500, "die", "b"},
		},
		until:      10_000,
		holders:    []string{"0 a", "1500 c"},
		challenges: []string{"0 a", "1500 c"},
	}, {
		name: "recovered member lands at the tail: no failback",
		cfg:  cfg,
		events: []event{
			{0, "register", "a"}, {1, "register", "b"}, {2, "register", "c"},
			{500, "die", "a"}, {2000, "recover", "a"},
			{5000, "die", "b"}, // b's last renewal at 4700: deadline 5700; c is rank 1 now
		},
		until:      10_000,
		holders:    []string{"0 a", "1400 b", "5800 c"},
		challenges: []string{"0 a", "1400 b", "5800 c"},
	}, {
		name: "paused holder reclaims its own role after its deadline, ahead of rank 1",
		cfg:  cfg,
		events: []event{
			{0, "register", "a"}, {1, "register", "b"},
			{200, "pause", "a"}, {1050, "resume", "a"}, // misses the renewal at 300: deadline 1000
		},
		until:      3000,
		holders:    []string{"0 a"},
		challenges: []string{"0 a", "1050 a"},
	}, {
		name:       "roster of one keeps the role for ever",
		cfg:        cfg,
		events:     []event{{7, "register", "a"}},
		until:      10_000,
		holders:    []string{"7 a"},
		challenges: []string{"7 a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			holders, challenges := simulate(t, tc.cfg, slices.Clone(tc.events), tc.until)
			if !slices.Equal(holders, tc.holders) {
				t.Errorf("holders %q, want %q", holders, tc.holders)
			}
			if !slices.Equal(challenges, tc.challenges) {
				t.Errorf("challenges %q, want %q", challenges, tc.challenges)
			}
		})
	}
}
