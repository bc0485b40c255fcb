package assign

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

const (
	benchTasks   = 10000
	benchWorkers = 500
)

// benchLags gives every worker random lags: 90% of the copies it holds are
// caught up, the rest lag; plus a few dozen stale entries for other tasks.
func benchLags(r *rand.Rand, tasks []Task, workers []Worker, prev Assignment) {
	idx := map[string]int{}
	for i, w := range workers {
		idx[w.ID] = i
		workers[i].Lags = map[string]int64{}
	}
	lag := func() int64 {
		if r.IntN(10) == 0 {
			return 10001 + r.Int64N(1_000_000)
		}
		return r.Int64N(10001)
	}
	for _, t := range tasks { // in order: the same seed gives the same lags
		p, ok := prev[t.ID]
		if !ok {
			continue
		}
		id := t.ID
		for _, w := range append([]string{p.Active}, p.Standbys...) {
			if i, ok := idx[w]; ok {
				workers[i].Lags[id] = lag()
			}
		}
	}
	for i := range workers {
		for range 20 {
			workers[i].Lags[tasks[r.IntN(len(tasks))].ID] = r.Int64N(2_000_000)
		}
	}
}

func benchBase(r *rand.Rand) Input {
	cfg := DefaultConfig()
	cfg.NumStandbyReplicas = 1
	tasks := make([]Task, benchTasks)
	for i := range tasks {
		tasks[i] = Task{ID: fmt.Sprintf("task-%05d", i), Stateful: i%10 != 0}
	}
	workers := make([]Worker, benchWorkers)
	for i := range workers {
		workers[i] = Worker{ID: fmt.Sprintf("worker-%03d", i), Capacity: 1 + r.IntN(4)}
	}
	return Input{Config: cfg, Tasks: tasks, Workers: workers}
}

// fleet gives an input's workers zone and rack labels (3 zones of 10
// racks), its tasks weights 1-5, and spreads copies by zone, then rack.
func fleet(in Input, r *rand.Rand) Input {
	in.Config.SpreadBy = []string{"zone", "rack"}
	in.Tasks = slices.Clone(in.Tasks)
	for i := range in.Tasks {
		in.Tasks[i].Weight = 1 + r.IntN(5)
	}
	in.Workers = slices.Clone(in.Workers)
	for i := range in.Workers {
		z := i % 3
		in.Workers[i].Labels = map[string]string{"zone": fmt.Sprint("zone-", z), "rack": fmt.Sprint("rack-", z, "-", r.IntN(10))}
	}
	return in
}

// benchInputs are four 10,000 x 500 situations: a steady cluster, the same
// cluster after 5% of the workers were replaced, a random (unbalanced)
// previous assignment, and everything piled on two workers; with labels,
// the same with fleet's labels, weights and spread.
func benchInputs(b testing.TB, labels bool) map[string]Input {
	r := rand.New(rand.NewPCG(42, 42))
	fr := rand.New(rand.NewPCG(7, 7))
	benchBase := func(r *rand.Rand) Input {
		in := benchBase(r)
		if labels {
			in = fleet(in, fr)
		}
		return in
	}
	out := map[string]Input{}

	fresh := benchBase(r)
	res, err := Plan(fresh)
	if err != nil {
		b.Fatal(err)
	}
	steady := fresh
	steady.Previous = res.Assignment
	benchLags(r, steady.Tasks, steady.Workers, steady.Previous)
	out["steady"] = steady

	churn := steady
	churn.Workers = append([]Worker(nil), steady.Workers[25:]...)
	for i := range 25 {
		churn.Workers = append(churn.Workers, Worker{ID: fmt.Sprintf("worker-new-%02d", i), Capacity: 1 + r.IntN(4)})
		if labels {
			churn.Workers[len(churn.Workers)-1].Labels = steady.Workers[i].Labels
		}
	}
	out["churn"] = churn

	random := benchBase(r)
	random.Previous = Assignment{}
	for _, t := range random.Tasks {
		p := Placement{Active: random.Workers[r.IntN(benchWorkers)].ID}
		if t.Stateful {
			p.Standbys = []string{random.Workers[r.IntN(benchWorkers)].ID}
		}
		random.Previous[t.ID] = p
	}
	benchLags(r, random.Tasks, random.Workers, random.Previous)
	out["random"] = random

	// Worst case: everything piled on two workers that alone have state.
	pile := benchBase(r)
	pile.Previous = Assignment{}
	for i, t := range pile.Tasks {
		a, s := pile.Workers[i%2].ID, pile.Workers[1-i%2].ID
		p := Placement{Active: a}
		if t.Stateful {
			p.Standbys = []string{s}
		}
		pile.Previous[t.ID] = p
	}
	benchLags(r, pile.Tasks, pile.Workers, pile.Previous)
	out["pile"] = pile
	return out
}

// BenchmarkPlan plans 10,000 tasks (90% stateful, 1 standby) on 500
// workers of capacity 1-4 with random lags.
func BenchmarkPlan(b *testing.B) { benchmarkPlan(b, false) }

// BenchmarkPlanFleet is BenchmarkPlan with zone and rack labels, weights
// 1-5 and spread by zone, then rack.
func BenchmarkPlanFleet(b *testing.B) { benchmarkPlan(b, true) }

func benchmarkPlan(b *testing.B, labels bool) {
	inputs := benchInputs(b, labels)
	for _, name := range []string{"steady", "churn", "random", "pile"} {
		in := inputs[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var res Result
			for b.Loop() {
				var err error
				if res, err = Plan(in); err != nil {
					b.Fatal(err)
				}
			}
			p := newPlanner(in)
			p.run()
			b.ReportMetric(float64(len(res.Moves)), "moves")
			b.ReportMetric(float64(p.rounds), "rounds")
		})
	}
}
