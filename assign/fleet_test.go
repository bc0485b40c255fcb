package assign

import (
	"slices"
	"testing"
)

// away marks a worker gone but within the replacement delay.
func (s *scenario) away(id string) {
	w := s.worker(id)
	w.Away, w.Lags = true, nil
}

// back brings an away worker back with the copies it held caught up.
func (s *scenario) back(id string) {
	s.worker(id).Away = false
	s.lagsOfCopies()
}

// TestAwayWorkerKeepsItsCopies: I1 {T1 | T2}, I2 {T2 | T3}, I3 {T3 | T1}.
// I1's session ends within the replacement delay: T1 goes to its standby
// on I3 at once, I1 keeps a standby of T1 and T2 and no new copy is made.
// Back in time, I1 is caught up and takes T1 back as before.
func TestAwayWorkerKeepsItsCopies(t *testing.T) {
	s := newScenario(t, "T1 T2 T3", "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
	s.away("I1")
	s.plan("I1 away", noFollowup, "I1 { | T1,T2}", "I2 {T2 | T3}", "I3 {T1,T3}")
	s.stable("still away")
	s.back("I1")
	s.plan("I1 back", noFollowup, "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
	s.stable("back")
}

// TestAwayWorkerGoneForGood: when the delay ends the caller drops the
// worker and the lost copies are made elsewhere.
func TestAwayWorkerGoneForGood(t *testing.T) {
	s := newScenario(t, "T1 T2 T3", "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
	s.away("I1")
	s.plan("I1 away", noFollowup, "I1 { | T1,T2}", "I2 {T2 | T3}", "I3 {T1,T3}")
	s.leave("I1")
	s.plan("delay over", noFollowup, "I2 {T2 | T1,T3}", "I3 {T1,T3 | T2}")
}

// TestAwayMinCopies: with two standbys and min_copies 3, a task whose
// away worker held one copy gets a replacement at once.
func TestAwayMinCopies(t *testing.T) {
	in := Input{Config: haConfig(), Tasks: stateful("T1"), Workers: workersN(4),
		Previous: Assignment{"T1": pl("w1", "w2", "w3")}}
	in.Config.NumStandbyReplicas = 2
	in = caughtUp(in, in.Previous)
	in.Workers[0].Away, in.Workers[0].Lags = true, nil
	res := mustPlan(t, in)
	if got := res.Assignment["T1"]; got.Active == "w1" || !slices.Contains(got.Standbys, "w1") || len(got.Standbys) != 2 {
		t.Fatalf("min_copies 0: %+v, want w1 kept as a standby and no new copy", got)
	}
	in.Config.MinCopies = 3
	res = mustPlan(t, in)
	if got := res.Assignment["T1"]; !slices.Contains(got.Standbys, "w1") || !slices.Contains(got.Standbys, "w4") {
		t.Fatalf("min_copies 3: %+v, want w1 kept and a new copy on w4", got)
	}
}

// TestOnlyAwayWorkers: with every worker away nothing runs, and the copies
// are kept for their workers.
func TestOnlyAwayWorkers(t *testing.T) {
	in := Input{Config: haConfig(), Tasks: stateful("T1"), Workers: []Worker{{ID: "I1", Capacity: 1, Away: true}},
		Previous: Assignment{"T1": pl("I1")}}
	res := mustPlan(t, in)
	if got := res.Assignment["T1"]; got.Active != "" || !slices.Equal(got.Standbys, []string{"I1"}) {
		t.Fatalf("%+v, want no active and I1 kept", got)
	}
}

// TestFrozenHandlesOnlyFailures: frozen, a new worker gets nothing, a
// lagging active stays, and a dead worker's active goes to its standby.
func TestFrozenHandlesOnlyFailures(t *testing.T) {
	s := newScenario(t, "T1 T2 T3", "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
	s.in.Frozen = true
	s.join("I4")
	s.lags("I4", "T1=0 T2=0")
	s.lags("I1", "T1=lagging")
	s.stable("frozen: no balance, no warm-up, a lagging active stays")
	s.leave("I2")
	s.plan("I2 dies", noFollowup, "I1 {T1,T2 | }", "I3 {T3 | T1}", "I4 { | T2,T3}")
	s.in.Frozen = false
	res := mustPlan(t, s.in)
	if len(res.Moves) == 0 {
		t.Fatal("unfrozen: no move towards balance")
	}
}

// TestFrozenKeepsWarmupsAndDrains: frozen, a warm-up in progress goes on
// and a drained worker's caught-up active still moves to a caught-up copy;
// the standbys the drained worker's copies no longer count for are made,
// here on the worker warming T1 up.
func TestFrozenKeepsWarmupsAndDrains(t *testing.T) {
	s := newScenario(t, "T1 T2", "I1 {T1 | T2}", "I2 {T2 | T1}", "I3 { | | warm T1}")
	s.lags("I3", "T1=lagging")
	s.in.Frozen = true
	s.stable("a warm-up goes on")
	s.drain("I1", true)
	s.plan("I1 drained", noFollowup, "I1 { | T1,T2}", "I2 {T1,T2}", "I3 { | T1,T2}")
}

// TestLoadBalanceLimitsMoves: all actives on one worker with reported
// loads; BalanceLoad moves at most MaxLoadMoves actives per plan, to
// caught-up standbys, and converges over plans.
func TestLoadBalanceLimitsMoves(t *testing.T) {
	in := Input{Config: haConfig(), Workers: workersN(2)}
	in.Config.NumStandbyReplicas = 1
	in.Config.Balance = BalanceLoad
	in.Config.MaxLoadMoves = 2
	in.Previous = Assignment{}
	for _, id := range []string{"T1", "T2", "T3", "T4", "T5", "T6"} {
		in.Tasks = append(in.Tasks, Task{ID: id, Stateful: true})
		in.Previous[id] = pl("w1", "w2")
	}
	in = caughtUp(in, in.Previous)
	loads := map[string]int64{"T1": 100, "T2": 100, "T3": 100, "T4": 100, "T5": 300, "T6": 300}
	in.Workers[0].Loads, in.Workers[1].Loads = loads, loads
	res := mustPlan(t, in)
	actives := 0
	for _, m := range res.Moves {
		if m.Kind == KindActive {
			actives++
			if m.To != "w2" {
				t.Fatalf("move %v, want to the caught-up standby on w2", m)
			}
		}
	}
	if actives != 2 || !res.Followup {
		t.Fatalf("moved %d actives (followup %v), want 2 and a follow-up", actives, res.Followup)
	}
	for range 5 {
		in = caughtUp(in, res.Assignment)
		res = mustPlan(t, in)
	}
	load := map[string]int64{}
	for id, p := range res.Assignment {
		load[p.Active] += loads[id]
	}
	if load["w1"] != 500 || load["w2"] != 500 || res.Followup {
		t.Fatalf("loads %v (followup %v), want 500 each", load, res.Followup)
	}
}
