package assign

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// workersN returns n fresh workers w1..wn of capacity 1, without state.
func workersN(n int) []Worker {
	ws := make([]Worker, n)
	for i := range ws {
		ws[i] = Worker{ID: fmt.Sprintf("w%d", i+1), Capacity: 1}
	}
	return ws
}

// TestTaskStandbys: a task's own standby count, when above 0, replaces the
// config's for that task, and is capped by the workers with capacity like
// the config's.
func TestTaskStandbys(t *testing.T) {
	task := func(id string, stateful bool, standbys int) Task {
		return Task{ID: id, Stateful: stateful, StandbyReplicas: standbys}
	}
	drained := workersN(3)
	drained[2].Capacity = 0
	for _, tc := range []struct {
		name     string
		deflt    int
		tasks    []Task
		workers  []Worker
		standbys map[string]int
	}{
		{"more than the default", 1, []Task{task("a", true, 2), task("b", true, 0)}, workersN(4),
			map[string]int{"a": 2, "b": 1}},
		{"fewer than the default", 2, []Task{task("a", true, 1), task("b", true, 0)}, workersN(4),
			map[string]int{"a": 1, "b": 2}},
		{"default 0", 0, []Task{task("T", true, 2), task("U", true, 0)}, workersN(3),
			map[string]int{"T": 2, "U": 0}},
		{"capped by the workers", 0, []Task{task("a", true, 5), task("b", true, 2)}, workersN(3),
			map[string]int{"a": 2, "b": 2}},
		{"a drained worker is not eligible", 0, []Task{task("a", true, MaxStandbyReplicas)}, drained,
			map[string]int{"a": 1}},
		{"one worker", 1, []Task{task("a", true, 3)}, workersN(1), map[string]int{"a": 0}},
		{"stateless tasks have none", 1, []Task{task("s", false, 2), task("a", true, 2)}, workersN(3),
			map[string]int{"s": 0, "a": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.NumStandbyReplicas = tc.deflt
			in := Input{Config: cfg, Tasks: tc.tasks, Workers: tc.workers}
			res := mustPlan(t, in)
			checkInvariants(t, in, res)
			for id, want := range tc.standbys {
				if got := len(res.Assignment[id].Standbys); got != want {
					t.Errorf("task %s: %d standbys, want %d: %s", id, got, want, fmtAssignment(res.Assignment))
				}
			}
		})
	}
}

// mixedStandbys is a caught-up cluster of four workers with tasks asking
// for 0 (the default, 1), 1, 2 and 3 standbys: 2+2+2+2+3+3+4+4 = 22 copies.
func mixedStandbys() Input {
	cfg := DefaultConfig()
	cfg.NumStandbyReplicas = 1
	counts := map[string]int{"a": 0, "b": 0, "c": 1, "d": 1, "e": 2, "f": 2, "g": 3, "h": 3}
	var tasks []Task
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		tasks = append(tasks, Task{ID: id, Stateful: true, StandbyReplicas: counts[id]})
	}
	ws := []Worker{{ID: "w1", Capacity: 1}, {ID: "w2", Capacity: 2}, {ID: "w3", Capacity: 1}, {ID: "w4", Capacity: 2}}
	for i := range ws {
		ws[i].Lags = map[string]int64{}
		for _, task := range tasks {
			ws[i].Lags[task.ID] = 0
		}
	}
	return Input{Config: cfg, Tasks: tasks, Workers: ws}
}

// TestTaskStandbysBalance: the stateful copies class counts each task's own
// standbys: 22 copies over capacities 1:2:1:2 put 3-4 on the small workers
// and 7-8 on the large ones, and the actives stay balanced too.
func TestTaskStandbysBalance(t *testing.T) {
	in := mixedStandbys()
	p, res := runPlanner(t, in)
	checkInvariants(t, in, res)
	checkTarget(t, in, p, res)
	if res.Followup {
		t.Fatalf("everything is caught up, yet a follow-up: %s", fmtAssignment(res.Assignment))
	}
	acts, copies := map[string]int{}, map[string]int{}
	for _, pl := range res.Assignment {
		acts[pl.Active]++
		copies[pl.Active]++
		for _, w := range pl.Standbys {
			copies[w]++
		}
	}
	for _, w := range in.Workers {
		alo, ahi := bandOf(len(in.Tasks), w.Capacity, 6)
		clo, chi := bandOf(22, w.Capacity, 6)
		if acts[w.ID] < alo || acts[w.ID] > ahi || copies[w.ID] < clo || copies[w.ID] > chi {
			t.Errorf("worker %s: %d actives (want %d-%d), %d copies (want %d-%d): %s", w.ID,
				acts[w.ID], alo, ahi, copies[w.ID], clo, chi, fmtAssignment(res.Assignment))
		}
	}
}

// TestTaskStandbysDeterministic: with mixed counts the plan does not depend
// on the order of tasks, workers or map iteration.
func TestTaskStandbysDeterministic(t *testing.T) {
	in := mixedStandbys()
	in.Workers[1].Lags = map[string]int64{"e": big, "g": 5}
	in.Previous = Assignment{"a": pl("w1", "w2"), "g": pl("w2", "w1", "w3", "w4"), "e": pl("w3")}
	want := mustPlan(t, in)
	r := rand.New(rand.NewPCG(7, 7))
	for range 20 {
		if got := mustPlan(t, shuffled(r, in)); !reflect.DeepEqual(got, want) {
			t.Fatalf("shuffled input planned differently:\n got  %s\n want %s", fmtAssignment(got.Assignment), fmtAssignment(want.Assignment))
		}
	}
}

// TestTaskStandbysFixedPoint: planned from its own output (the copies
// caught up), a plan with mixed counts changes nothing; and when one task
// asks for fewer standbys it keeps all but one of those it had, and the
// plan after that is a fixed point again.
func TestTaskStandbysFixedPoint(t *testing.T) {
	in := mixedStandbys()
	for i := range in.Workers {
		in.Workers[i].Lags = nil // a fresh cluster: nothing has state
	}
	res := settle(t, in)
	in = caughtUp(in, res.Assignment)

	// g asks for one standby fewer.
	for i := range in.Tasks {
		if in.Tasks[i].ID == "g" {
			in.Tasks[i].StandbyReplicas = 2
		}
	}
	fewer := mustPlan(t, in)
	checkInvariants(t, in, fewer)
	before, after := res.Assignment["g"], fewer.Assignment["g"]
	kept := 0
	for _, w := range after.Standbys {
		if w == before.Active || slices.Contains(before.Standbys, w) {
			kept++
		}
	}
	if len(after.Standbys) != 2 || kept != 2 {
		t.Fatalf("g went from %+v to %+v: want two of the copies it had as standbys", before, after)
	}
	settle(t, in)
}

// settle plans from in, then from each output with its copies caught up,
// until no follow-up is needed, and checks that planning from that output
// once more changes nothing. It returns that output.
func settle(t *testing.T, in Input) Result {
	t.Helper()
	res := mustPlan(t, in)
	for round := 0; res.Followup; round++ {
		if round == 10 {
			t.Fatalf("no convergence: %s", fmtAssignment(res.Assignment))
		}
		in = caughtUp(in, res.Assignment)
		res = mustPlan(t, in)
		checkInvariants(t, in, res)
	}
	in = caughtUp(in, res.Assignment)
	again := mustPlan(t, in)
	if !reflect.DeepEqual(again.Assignment, res.Assignment) || len(again.Moves) != 0 || again.Followup {
		t.Fatalf("not a fixed point: moves %v\n was %s\n now %s", again.Moves, fmtAssignment(res.Assignment), fmtAssignment(again.Assignment))
	}
	return res
}

// caughtUp returns in with a the previous assignment and every worker
// caught up on each copy a gives it.
func caughtUp(in Input, a Assignment) Input {
	ws := make([]Worker, len(in.Workers))
	for i, w := range in.Workers {
		ws[i] = w
		ws[i].Lags = maps.Clone(w.Lags)
		if ws[i].Lags == nil {
			ws[i].Lags = map[string]int64{}
		}
		for id, p := range a {
			for _, x := range append(append([]string{p.Active}, p.Standbys...), p.Warmups...) {
				if x == w.ID {
					ws[i].Lags[id] = 0
				}
			}
		}
	}
	in.Workers, in.Previous = ws, a
	return in
}
