package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// genFleet returns a random fleet with zone and rack labels (racks
// within zones) and fresh stateful and stateless tasks with weights.
func genFleet(r *rand.Rand) Input {
	cfg := DefaultConfig()
	cfg.NumStandbyReplicas = r.IntN(4)
	cfg.MaxWarmupReplicas = 1 + r.IntN(4)
	cfg.SpreadBy = []string{"zone", "rack"}
	nZ, nW, nT := 1+r.IntN(4), 1+r.IntN(16), r.IntN(120)
	workers := make([]Worker, nW)
	for i := range workers {
		z := r.IntN(nZ)
		workers[i] = Worker{ID: fmt.Sprintf("w%02d", i), Capacity: 1 + r.IntN(3),
			Labels: map[string]string{"zone": fmt.Sprint("z", z), "rack": fmt.Sprint("z", z, "r", r.IntN(3))}}
		if r.IntN(8) == 0 {
			delete(workers[i].Labels, "rack")
		}
		workers[i].Drained = r.IntN(10) == 0
	}
	tasks := make([]Task, nT)
	for i := range tasks {
		tasks[i] = Task{ID: fmt.Sprintf("t%03d", i), Stateful: r.IntN(10) < 8, Weight: []int{0, 1, 1, 2, 5}[r.IntN(5)]}
		if r.IntN(3) == 0 {
			tasks[i].StandbyReplicas = 1 + r.IntN(3)
		}
	}
	return Input{Config: cfg, Tasks: tasks, Workers: workers}
}

// liveCopies returns the copies of a task on workers that may hold one
// (capacity above 0, not drained, not away).
func liveCopies(in Input, p Placement) []Worker {
	var out []Worker
	for _, id := range append([]string{p.Active}, p.Standbys...) {
		i := slices.IndexFunc(in.Workers, func(w Worker) bool { return w.ID == id })
		if i >= 0 && !in.Workers[i].Drained && !in.Workers[i].Away {
			out = append(out, in.Workers[i])
		}
	}
	return out
}

func distinctOf(ws []Worker, key string) int {
	seen := map[string]bool{}
	for _, w := range ws {
		seen[w.Labels[key]] = true
	}
	return len(seen)
}

// TestPropertySpread: for random fleets with zone and rack labels, once
// every planned move has happened, every task's copies span min(copies,
// distinct values) of each spread key among the workers that may hold a
// copy, the result reports no shortfall, and planning again moves nothing.
func TestPropertySpread(t *testing.T) {
	for seed := range seeds(t, 400) {
		r := rand.New(rand.NewPCG(uint64(seed), 32))
		in := genFleet(r)
		res := settle(t, in)
		eligible := []Worker{}
		anyCap := false
		for _, w := range in.Workers {
			if !w.Drained && w.Capacity > 0 {
				eligible = append(eligible, w)
				anyCap = true
			}
		}
		if !anyCap {
			continue
		}
		for _, task := range in.Tasks {
			if !task.Stateful {
				continue
			}
			copies := liveCopies(in, res.Assignment[task.ID])
			for _, key := range in.Config.SpreadBy {
				have, want := distinctOf(copies, key), min(len(copies), distinctOf(eligible, key))
				if key == "rack" {
					// Racks nest in zones, so the zones' spread can cost a
					// rack only where a zone has fewer racks than copies.
					continue
				}
				if have < want {
					t.Fatalf("seed %d: %s: copies %v span %d values of %s, want %d", seed, task.ID, res.Assignment[task.ID], have, key, want)
				}
			}
		}
		for _, sf := range res.Unspread {
			if sf.Key == "zone" || sf.Reason != "blocked" {
				t.Fatalf("seed %d: settled plan reports shortfall %+v", seed, sf)
			}
		}
	}
}

// TestPropertyWeightBalance: for random fleets of fresh tasks with
// weights, once settled, each worker's actives weigh within one task's
// weight of its share by capacity.
func TestPropertyWeightBalance(t *testing.T) {
	for seed := range seeds(t, 400) {
		r := rand.New(rand.NewPCG(uint64(seed), 33))
		in := genFleet(r)
		in.Config.SpreadBy = nil
		for i := range in.Workers {
			in.Workers[i].Drained = false
			in.Workers[i].Labels = nil
		}
		res := settle(t, in)
		load := map[string]int{}
		total, maxW, capTotal := 0, 0, 0
		for _, task := range in.Tasks {
			if task.Stateful {
				w := max(task.Weight, 1)
				load[res.Assignment[task.ID].Active] += w
				total += w
				maxW = max(maxW, w)
			}
		}
		for _, w := range in.Workers {
			capTotal += w.Capacity
		}
		for _, w := range in.Workers {
			ideal := float64(total) * float64(w.Capacity) / float64(capTotal)
			if d := float64(load[w.ID]) - ideal; d > float64(maxW) || d < -float64(maxW) {
				t.Fatalf("seed %d: %s (capacity %d) carries %d, ideal %.2f, heaviest task %d", seed, w.ID, w.Capacity, load[w.ID], ideal, maxW)
			}
		}
	}
}

// zoned returns workers named I1..In with capacity 1, in the zones given
// in order ("a a b b c c").
func zoned(zones ...string) []Worker {
	ws := make([]Worker, len(zones))
	for i, z := range zones {
		ws[i] = Worker{ID: fmt.Sprintf("I%d", i+1), Capacity: 1, Lags: map[string]int64{}, Labels: map[string]string{"zone": z}}
	}
	return ws
}

// TestSpreadMovesCopiesOutOfOneZone: every copy of T1 and T2 starts in
// zone a; with spread_by zone, each task gets one copy per zone, the
// caught-up copies staying until warm-ups elsewhere have caught up.
func TestSpreadMovesCopiesOutOfOneZone(t *testing.T) {
	s := newScenario(t, "T1 T2", "I1 {T1 | T2}", "I2 {T2 | T1}", "I3 { | T1,T2}")
	s.in.Config.NumStandbyReplicas = 2
	s.stable("no spread asked")
	s.in.Config.SpreadBy = []string{"zone"}
	for _, id := range []string{"I1", "I2", "I3"} {
		s.worker(id).Labels = map[string]string{"zone": "a"}
	}
	s.join("I4")
	s.join("I5")
	s.worker("I4").Labels = map[string]string{"zone": "b"}
	s.worker("I5").Labels = map[string]string{"zone": "c"}
	res := mustPlan(t, s.in)
	if !res.Followup || len(res.Unspread) == 0 {
		t.Fatalf("want moves that wait and shortfalls, got followup %v, unspread %v", res.Followup, res.Unspread)
	}
	for _, sf := range res.Unspread {
		if sf.Reason != "waits" || sf.Key != "zone" || sf.Want != 3 {
			t.Fatalf("shortfall %+v, want zone 3 values, waits", sf)
		}
	}
	final := settle(t, s.in)
	for _, id := range []string{"T1", "T2"} {
		if got := distinctOf(liveCopies(s.in, final.Assignment[id]), "zone"); got != 3 {
			t.Fatalf("%s: %v spans %d zones", id, final.Assignment[id], got)
		}
	}
}

// TestSpreadFallsBackAndSays: two zones for three copies: the copies span
// both, and nothing is reported short; a frozen placement that cannot
// spread says so.
func TestSpreadFallsBackAndSays(t *testing.T) {
	in := Input{Config: haConfig(), Tasks: stateful("T1"), Workers: zoned("a", "a", "b")}
	in.Config.NumStandbyReplicas = 2
	in.Config.SpreadBy = []string{"zone"}
	res := settle(t, in)
	if len(res.Unspread) != 0 {
		t.Fatalf("unspread %v", res.Unspread)
	}
	in.Workers = zoned("a", "a", "b", "b")
	in.Previous = Assignment{"T1": pl("I1", "I2")}
	in.Config.NumStandbyReplicas = 1
	in.Frozen = true
	res = mustPlan(t, in)
	want := []Shortfall{{Task: "T1", Key: "zone", Have: 1, Want: 2, Reason: "frozen"}}
	if !slices.Equal(res.Unspread, want) || len(res.Moves) != 0 {
		t.Fatalf("frozen: unspread %v, moves %v; want %v and no move", res.Unspread, res.Moves, want)
	}
}

func TestCheckLabels(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"zone": "a", "topology.kubernetes.io/zone": "eu-west-1a", "rack": ""}, ""},
		{map[string]string{"": "a"}, `label key ""`},
		{map[string]string{"zone": "a b"}, `label "zone": value "a b"`},
		{map[string]string{"zo ne": "a", "z": "b c"}, `label "z": value "b c"`},
	} {
		err := CheckLabels(tc.labels)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.labels, err, tc.want)
		}
	}
}

// TestSpreadDoesNotBlockBalance: the state a zone outage test once ended
// in: c2 runs two actives and b1 none, and moving either of c2's actives
// to b1 puts two copies in zone b until a standby moves on. Spread is kept
// by moving that standby, not by giving up the balance.
func TestSpreadDoesNotBlockBalance(t *testing.T) {
	in := Input{Config: haConfig(), Tasks: stateful("input-0", "input-1", "input-2", "input-3", "input-4", "input-5"),
		Workers: []Worker{}}
	in.Config.NumStandbyReplicas = 2
	in.Config.SpreadBy = []string{"zone"}
	for _, id := range []string{"a1", "a2", "b1", "b2", "c1", "c2"} {
		in.Workers = append(in.Workers, Worker{ID: id, Capacity: 1, Labels: map[string]string{"zone": id[:1]}})
	}
	in = caughtUp(in, Assignment{
		"input-0": pl("c2", "a1", "b2"), "input-1": pl("b2", "a1", "c1"), "input-2": pl("a2", "b1", "c2"),
		"input-3": pl("c1", "a2", "b1"), "input-4": pl("c2", "a2", "b2"), "input-5": pl("a1", "b1", "c1"),
	})
	res := settle(t, in)
	per := map[string]int{}
	for id, p := range res.Assignment {
		per[p.Active]++
		if n := distinctOf(liveCopies(in, p), "zone"); n != 3 {
			t.Errorf("%s: %v spans %d zones", id, p, n)
		}
	}
	for _, w := range in.Workers {
		if per[w.ID] != 1 {
			t.Fatalf("actives %v, want one each", per)
		}
	}
}
