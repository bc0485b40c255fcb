package assign

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The worked examples of docs/design.md, "The assignor", step by step as the
// text tells them. Ti is a task, Ii a worker; num_standby_replicas is 1,
// capacities are equal and acceptable_recovery_lag is the default 10000. A
// worker is caught up on the copies it holds (lag 0) unless the text says
// otherwise: "lagging" is a lag above acceptable_recovery_lag, and a worker
// that joins holds no state at all.

// TestExample1WorkerJoins: I1 {T1,T3 | T2}, I2 {T2 | T1,T3}. I3 joins: the
// first rebalance keeps every active where it is and gives I3 warm-ups of
// T1 and T3. Once I3 has caught up: I1 {T1 | T2}, I2 {T2 | T3},
// I3 {T3 | T1}.
func TestExample1WorkerJoins(t *testing.T) {
	s := newScenario(t, "T1 T2 T3", "I1 {T1,T3 | T2}", "I2 {T2 | T1,T3}")
	s.stable("before I3 joins")

	s.join("I3")
	s.plan("I3 joins", followup, "I1 {T1,T3 | T2}", "I2 {T2 | T1,T3}", "I3 { | | warm T1,T3}")

	s.lags("I3", "T1=0 T3=0")
	s.plan("I3 caught up", noFollowup, "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
	s.lagsOfCopies()
	s.stable("after the move")
}

// TestExample2WorkerDiesStandbysCaughtUp: standbys caught up,
// I1 {T1,T4 | T3}, I2 {T2 | T1,T4}, I3 {T3 | T2}. I1 dies: one rebalance,
// no follow-up: I2 {T1,T4 | T2,T3}, I3 {T2,T3 | T1,T4}.
func TestExample2WorkerDiesStandbysCaughtUp(t *testing.T) {
	s := newScenario(t, "T1 T2 T3 T4", "I1 {T1,T4 | T3}", "I2 {T2 | T1,T4}", "I3 {T3 | T2}")
	s.stable("all alive")

	s.leave("I1")
	s.plan("I1 dies", noFollowup, "I2 {T1,T4 | T2,T3}", "I3 {T2,T3 | T1,T4}")
	s.lagsOfCopies()
	s.stable("after I1 died")
}

// TestExample3WorkerDiesStandbysLagging: the start of example 2 with
// lagging standbys. I1 dies: I2 {T1,T2,T4 | T3}, I3 {T3 | T1,T2,T4}, I3
// restoring T4. Once I3 has caught up on T4: I2 {T1,T2 | T3,T4},
// I3 {T3,T4 | T1,T2}.
//
// I3 must take one of I2's three actives. The text has it restore T4, for
// which it holds no state, rather than take over T2, whose lagging standby
// it holds (less to restore). The rule that a new copy goes to the most
// caught-up worker does not decide this: it picks the worker for a copy
// (here I3 is the only one that can hold T1's and T4's standbys), not the
// task for a worker. The assignor gets T4 because, once T1 and T4 have
// their new standbys on I3, it counts a standby with no state yet as a
// lagging standby like T2's and takes the highest task. A rule that gave
// I3 the task it has the least to restore of would end in
// I2 {T1,T4 | T2,T3}, I3 {T2,T3 | T1,T4} instead.
func TestExample3WorkerDiesStandbysLagging(t *testing.T) {
	s := newScenario(t, "T1 T2 T3 T4", "I1 {T1,T4 | T3}", "I2 {T2 | T1,T4}", "I3 {T3 | T2}")
	s.lags("I1", "T3=lagging")
	s.lags("I2", "T1=lagging T4=lagging")
	s.lags("I3", "T2=lagging")
	s.stable("all alive")

	// Nobody is caught up on T1 and T4: I2, the most caught up, runs them.
	s.leave("I1")
	s.plan("I1 dies", followup, "I2 {T1,T2,T4 | T3}", "I3 {T3 | T1,T2,T4}")

	// I2 has restored what it runs; I3 has caught up on T4 only, and I2 is
	// still restoring its new standby of T3.
	s.lags("I2", "T1=0 T4=0 T3=lagging")
	s.lags("I3", "T4=0 T1=lagging")
	s.plan("I3 caught up on T4", noFollowup, "I2 {T1,T2 | T3,T4}", "I3 {T3,T4 | T1,T2}")
	s.lagsOfCopies()
	s.stable("after the move")
}

const (
	followup   = true
	noFollowup = false
)

// scenario is a cluster the examples drive: the workers with their lags,
// and the assignment in force, which every plan replaces.
type scenario struct {
	t  *testing.T
	in Input
}

// newScenario starts from an assignment in the notation of the design
// ("I1 {T1,T3 | T2}"): every worker named is alive with capacity 1 and
// caught up on every copy it holds.
func newScenario(t *testing.T, tasks string, workers ...string) *scenario {
	s := &scenario{t: t, in: Input{Config: haConfig(), Tasks: stateful(strings.Fields(tasks)...)}}
	s.in.Config.AcceptableRecoveryLag = DefaultAcceptableRecoveryLag
	s.in.Previous = parseAssignment(t, workers...)
	for _, w := range workers {
		s.join(strings.Fields(w)[0])
	}
	s.lagsOfCopies()
	return s
}

func (s *scenario) worker(id string) *Worker {
	for i := range s.in.Workers {
		if s.in.Workers[i].ID == id {
			return &s.in.Workers[i]
		}
	}
	s.t.Fatalf("no worker %s", id)
	return nil
}

// join adds a worker with no state.
func (s *scenario) join(id string) {
	s.in.Workers = append(s.in.Workers, Worker{ID: id, Capacity: 1, Lags: map[string]int64{}})
}

// leave removes a worker; the assignment in force still names it.
func (s *scenario) leave(id string) {
	s.in.Workers = slices.DeleteFunc(s.in.Workers, func(w Worker) bool { return w.ID == id })
}

// lags sets some of a worker's lags: "T1=0 T4=lagging".
func (s *scenario) lags(id, spec string) {
	w := s.worker(id)
	for _, kv := range strings.Fields(spec) {
		task, v, _ := strings.Cut(kv, "=")
		lag := int64(big)
		if v != "lagging" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				s.t.Fatalf("lag %q: %v", kv, err)
			}
			lag = n
		}
		w.Lags[task] = lag
	}
}

// lagsOfCopies makes every worker caught up on exactly the copies it holds
// in the assignment in force.
func (s *scenario) lagsOfCopies() {
	for i := range s.in.Workers {
		s.in.Workers[i].Lags = map[string]int64{}
	}
	for id, p := range s.in.Previous {
		for _, w := range append(append([]string{p.Active}, p.Standbys...), p.Warmups...) {
			if i := slices.IndexFunc(s.in.Workers, func(x Worker) bool { return x.ID == w }); i >= 0 {
				s.in.Workers[i].Lags[id] = 0
			}
		}
	}
}

// plan runs the assignor, expects the assignment want and whether a
// follow-up rebalance is due, and puts the result in force.
func (s *scenario) plan(step string, wantFollowup bool, want ...string) {
	s.t.Helper()
	res := mustPlan(s.t, s.in)
	assertAssignment(s.t, step, res.Assignment, parseAssignment(s.t, want...))
	if res.Followup != wantFollowup {
		s.t.Fatalf("%s: followup %v, want %v", step, res.Followup, wantFollowup)
	}
	checkInvariants(s.t, s.in, res)
	s.in.Previous = res.Assignment
}

// stable expects a plan to change nothing: no move and no follow-up.
func (s *scenario) stable(step string) {
	s.t.Helper()
	res := mustPlan(s.t, s.in)
	assertAssignment(s.t, step, res.Assignment, s.in.Previous)
	if res.Followup || len(res.Moves) != 0 {
		s.t.Fatalf("%s: followup %v, moves %v", step, res.Followup, res.Moves)
	}
}

// parseAssignment reads the design's notation, one worker per argument:
// "I1 {T1,T3 | T2 | warm T4}" runs T1 and T3 active, a standby of T2 and a
// warm-up of T4 on I1; empty parts may be left blank ("I3 { | | warm T1}").
func parseAssignment(t *testing.T, workers ...string) Assignment {
	t.Helper()
	a := Assignment{}
	get := func(task string) Placement { return a[task] }
	for _, spec := range workers {
		id, body, ok := strings.Cut(spec, "{")
		id = strings.TrimSpace(id)
		body, closed := strings.CutSuffix(strings.TrimSpace(body), "}")
		if !ok || !closed || id == "" {
			t.Fatalf("bad worker spec %q", spec)
		}
		parts := strings.Split(body, "|")
		if len(parts) > 3 {
			t.Fatalf("bad worker spec %q", spec)
		}
		for i, part := range parts {
			part = strings.TrimSpace(part)
			if i == 2 {
				var warmPrefix bool
				part, warmPrefix = strings.CutPrefix(part, "warm")
				if !warmPrefix && part != "" {
					t.Fatalf("bad warm-ups in %q", spec)
				}
			}
			for _, task := range strings.FieldsFunc(part, func(r rune) bool { return r == ',' || r == ' ' }) {
				p := get(task)
				switch i {
				case 0:
					if p.Active != "" {
						t.Fatalf("%s has two actives", task)
					}
					p.Active = id
				case 1:
					p.Standbys = append(p.Standbys, id)
					slices.Sort(p.Standbys)
				case 2:
					p.Warmups = append(p.Warmups, id)
					slices.Sort(p.Warmups)
				}
				a[task] = p
			}
		}
	}
	for _, task := range slices.Sorted(maps.Keys(a)) {
		if a[task].Active == "" {
			t.Fatalf("%s has no active", task)
		}
	}
	return a
}
