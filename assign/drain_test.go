package assign

import (
	"slices"
	"testing"
)

// Draining a worker (Worker.Drained: an operator drained it, or it is
// leaving), in the notation of docs/design.md, "The assignor".

// drain marks a worker drained, or no longer.
func (s *scenario) drain(id string, drained bool) { s.worker(id).Drained = drained }

// TestDrainMovesActivesToCaughtUpStandbys: I1 {T1 | T2}, I2 {T2 | T3},
// I3 {T3 | T1}. Draining I1 moves T1 to its caught-up standby on I3 at
// once; I1 keeps standbys of T1 and T2 beside the ones the tasks get
// elsewhere. Undrained, I1 is caught up on T1 as a standby and takes it
// back at once; the extra standbys go.
func TestDrainMovesActivesToCaughtUpStandbys(t *testing.T) {
	s := newScenario(t, "T1 T2 T3", "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
	s.stable("before the drain")

	s.drain("I1", true)
	s.plan("I1 drained", noFollowup, "I1 { | T1,T2}", "I2 {T2 | T1,T3}", "I3 {T1,T3 | T2}")
	s.stable("drained, nothing caught up yet")
	s.lagsOfCopies()
	s.stable("drained, every copy caught up")

	s.drain("I1", false)
	s.plan("I1 undrained", noFollowup, "I1 {T1 | T2}", "I2 {T2 | T3}", "I3 {T3 | T1}")
}

// TestDrainWaitsForAWarmup: the drained worker holds the only copy of T1:
// T1 stays active there while another worker warms up, and moves once it
// has caught up.
func TestDrainWaitsForAWarmup(t *testing.T) {
	s := newScenario(t, "T1", "I1 {T1}")
	s.in.Config.NumStandbyReplicas = 0
	s.join("I2")
	s.plan("I2 joins", noFollowup, "I1 {T1}")
	s.drain("I1", true)
	s.plan("I1 drained", followup, "I1 {T1}", "I2 { | | warm T1}")
	s.plan("still warming up", followup, "I1 {T1}", "I2 { | | warm T1}")
	s.lags("I2", "T1=0")
	s.plan("I2 caught up", noFollowup, "I2 {T1}")
}

// TestDrainedWorkerGetsNothingNew: a new task, stateful or not, goes to a
// worker that is not drained; a stateless active leaves the drained
// worker.
func TestDrainedWorkerGetsNothingNew(t *testing.T) {
	in := Input{Config: haConfig(), Tasks: append(stateful("T1", "T2"), Task{ID: "S1"}, Task{ID: "S2"}),
		Workers:  []Worker{{ID: "I1", Capacity: 4, Drained: true}, {ID: "I2", Capacity: 1}, {ID: "I3", Capacity: 1}},
		Previous: Assignment{"S1": {Active: "I1"}}}
	res := mustPlan(t, in)
	checkInvariants(t, in, res)
	for id, p := range res.Assignment {
		if p.Active == "I1" || slices.Contains(p.Standbys, "I1") || slices.Contains(p.Warmups, "I1") {
			t.Errorf("%s: %+v on the drained worker", id, p)
		}
	}
}

// TestAllDrainedStayPut: when every worker is drained there is nowhere
// better to go: nothing moves.
func TestAllDrainedStayPut(t *testing.T) {
	s := newScenario(t, "T1 T2", "I1 {T1 | T2}", "I2 {T2 | T1}")
	s.drain("I1", true)
	s.drain("I2", true)
	s.stable("every worker drained")
}

// TestDrainFixedPoint: with drained workers, planning again from a plan's
// output, lags unchanged, changes nothing.
func TestDrainFixedPoint(t *testing.T) {
	s := newScenario(t, "T1 T2 T3 T4 T5 T6", "I1 {T1,T2 | T3,T4}", "I2 {T3,T4 | T5,T6}", "I3 {T5,T6 | T1,T2}")
	s.join("I4")
	s.drain("I1", true)
	res := mustPlan(t, s.in)
	s.in.Previous = res.Assignment
	again := mustPlan(t, s.in)
	assertAssignment(t, "planned again from its own output", again.Assignment, res.Assignment)
	if len(again.Moves) != 0 || again.Followup != res.Followup {
		t.Fatalf("moves %v, followup %v then %v", again.Moves, res.Followup, again.Followup)
	}
}
