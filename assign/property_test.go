package assign

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// genInput makes a random, valid input: 1-20 workers (capacity 1-4, now and
// then 0, now and then drained), 0-200 tasks (in half the inputs with their own standby counts,
// 0 among them, now and then more than the workers allow), random lags
// around the acceptable recovery lag, and a random Previous that may name
// departed workers and deleted tasks, repeat a worker or put the active
// among the standbys.
func genInput(r *rand.Rand) Input {
	cfg := DefaultConfig()
	cfg.NumStandbyReplicas = r.IntN(4)
	cfg.MaxWarmupReplicas = 1 + r.IntN(4)
	cfg.AcceptableRecoveryLag = []int64{0, 100, 10000}[r.IntN(3)]
	nW, nT := 1+r.IntN(20), r.IntN(201)
	allCaughtUp := r.IntN(10) == 0
	zeroCaps := r.IntN(10) == 0
	drains := r.IntN(4) == 0
	ownStandbys := r.IntN(2) == 0

	tasks := make([]Task, nT)
	for i := range tasks {
		tasks[i] = Task{ID: fmt.Sprintf("t%03d", i), Stateful: r.IntN(10) < 7}
		if ownStandbys {
			tasks[i].StandbyReplicas = []int{0, 0, 1, 2, 3, 6, MaxStandbyReplicas}[r.IntN(7)]
		}
	}
	workers := make([]Worker, nW)
	for i := range workers {
		w := Worker{ID: fmt.Sprintf("w%02d", i), Capacity: 1 + r.IntN(4), Lags: map[string]int64{}}
		if zeroCaps && r.IntN(3) == 0 {
			w.Capacity = 0
		}
		w.Drained = drains && r.IntN(3) == 0
		density := r.Float64()
		for _, t := range tasks {
			switch {
			case allCaughtUp:
				w.Lags[t.ID] = 0
			case r.Float64() < density:
				w.Lags[t.ID] = []int64{0, cfg.AcceptableRecoveryLag, cfg.AcceptableRecoveryLag + 1,
					r.Int64N(3 * (cfg.AcceptableRecoveryLag + 1)), 1 << 40, infLag}[r.IntN(6)]
			}
		}
		workers[i] = w
	}
	pool := []string{"gone1", "gone2"}
	for _, w := range workers {
		pool = append(pool, w.ID)
	}
	pick := func() string { return pool[r.IntN(len(pool))] }
	var prev Assignment
	if r.IntN(8) != 0 {
		prev = Assignment{}
		skew := r.IntN(3) == 0 // pile actives on few workers
		for _, t := range tasks {
			if r.IntN(6) == 0 {
				continue
			}
			p := Placement{Active: pick()}
			if skew {
				p.Active = pool[2+r.IntN(min(2, nW))]
			}
			for range r.IntN(4) {
				p.Standbys = append(p.Standbys, pick())
			}
			if r.IntN(4) == 0 {
				p.Warmups = append(p.Warmups, pick())
			}
			prev[t.ID] = p
		}
		prev["deleted"] = Placement{Active: pick()}
	}
	return Input{Config: cfg, Tasks: tasks, Workers: workers, Previous: prev}
}

// planner runs the planner on a valid input and returns it, so that tests
// can look at the target as well as the output.
func runPlanner(t *testing.T, in Input) (*planner, Result) {
	t.Helper()
	if err := validateInput(in); err != nil {
		t.Fatal(err)
	}
	p := newPlanner(in)
	res := p.run()
	return p, res
}

type facts struct {
	in       Input
	drained  map[string]bool
	lag      map[[2]string]int64 // (worker, task) -> lag; missing = infinite
	workers  map[string]Worker
	stateful map[string]bool
	weight   map[string]int
	totalW   int
	eligible int // workers with capacity above 0
}

func newFacts(in Input) *facts {
	f := &facts{in: in, lag: map[[2]string]int64{}, workers: map[string]Worker{}, stateful: map[string]bool{}, weight: map[string]int{},
		drained: map[string]bool{}}
	for _, t := range in.Tasks {
		f.stateful[t.ID] = t.Stateful
	}
	for _, w := range in.Workers {
		f.workers[w.ID] = w
		for id, l := range w.Lags {
			if l != infLag {
				f.lag[[2]string{w.ID, id}] = l
			}
		}
		if w.Drained {
			f.drained[w.ID] = true
			f.weight[w.ID] = 0
			continue
		}
		f.weight[w.ID] = w.Capacity
		f.totalW += w.Capacity
	}
	if f.totalW == 0 {
		for id := range f.weight {
			f.weight[id] = 1
		}
		f.totalW = len(in.Workers)
		clear(f.drained)
	}
	for _, w := range f.weight {
		if w > 0 {
			f.eligible++
		}
	}
	return f
}

// standbys is how many standbys a stateful task must get: its own count
// when above 0, else the config's, capped by the eligible workers.
func (f *facts) standbys(task Task) int {
	want := task.StandbyReplicas
	if want == 0 {
		want = f.in.Config.NumStandbyReplicas
	}
	return min(want, max(f.eligible-1, 0))
}

// copies is the size of the stateful copies class: every stateful task's
// active and standbys.
func (f *facts) copies() int {
	n := 0
	for _, task := range f.in.Tasks {
		if task.Stateful {
			n += 1 + f.standbys(task)
		}
	}
	return n
}

func (f *facts) lagOf(w, t string) int64 {
	if l, ok := f.lag[[2]string{w, t}]; ok {
		return l
	}
	return infLag
}

func (f *facts) caughtUp(w, t string) bool { return f.lagOf(w, t) <= f.in.Config.AcceptableRecoveryLag }

func (f *facts) minLag(t string) int64 {
	m := int64(infLag)
	for _, w := range f.in.Workers {
		m = min(m, f.lagOf(w.ID, t))
	}
	return m
}

// cleanPrev is an independent re-implementation of the cleaning rules: it
// is what Moves are relative to.
func (f *facts) cleanPrev() Assignment {
	out := Assignment{}
	for _, t := range f.in.Tasks {
		p, ok := f.in.Previous[t.ID]
		if !ok {
			continue
		}
		var c Placement
		if _, ok := f.workers[p.Active]; ok {
			c.Active = p.Active
		}
		if t.Stateful {
			for _, w := range p.Standbys {
				if _, ok := f.workers[w]; ok && w != c.Active && !slices.Contains(c.Standbys, w) {
					c.Standbys = append(c.Standbys, w)
				}
			}
			for _, w := range p.Warmups {
				if _, ok := f.workers[w]; ok && w != c.Active && !slices.Contains(c.Standbys, w) && !slices.Contains(c.Warmups, w) {
					c.Warmups = append(c.Warmups, w)
				}
			}
			slices.Sort(c.Standbys)
			slices.Sort(c.Warmups)
		}
		out[t.ID] = c
	}
	return out
}

func bandOf(n, w, total int) (int, int) {
	lo := n * w / total
	if n*w%total != 0 {
		return lo, lo + 1
	}
	return lo, lo
}

// checkInvariants checks the rules every Result must satisfy.
func checkInvariants(t *testing.T, in Input, res Result) {
	t.Helper()
	f := newFacts(in)
	if len(res.Assignment) != len(in.Tasks) {
		t.Fatalf("assignment has %d tasks, input %d", len(res.Assignment), len(in.Tasks))
	}
	warmups := 0
	prev := f.cleanPrev()
	for _, task := range in.Tasks {
		p, ok := res.Assignment[task.ID]
		if !ok {
			t.Fatalf("task %s missing", task.ID)
		}
		if len(in.Workers) == 0 {
			if !reflect.DeepEqual(p, Placement{}) {
				t.Fatalf("task %s placed without workers: %+v", task.ID, p)
			}
			continue
		}
		if _, ok := f.workers[p.Active]; !ok {
			t.Fatalf("task %s: active %q is not a worker", task.ID, p.Active)
		}
		all := append([]string{p.Active}, p.Standbys...)
		all = append(all, p.Warmups...)
		seen := map[string]bool{}
		for _, w := range all {
			if _, ok := f.workers[w]; !ok {
				t.Fatalf("task %s: unknown worker %q", task.ID, w)
			}
			if seen[w] {
				t.Fatalf("task %s: worker %s holds two copies: %+v", task.ID, w, p)
			}
			seen[w] = true
		}
		if !slices.IsSorted(p.Standbys) || !slices.IsSorted(p.Warmups) ||
			(p.Standbys != nil && len(p.Standbys) == 0) || (p.Warmups != nil && len(p.Warmups) == 0) {
			t.Fatalf("task %s: unsorted or empty non-nil slices: %+v", task.ID, p)
		}
		if !task.Stateful {
			if p.Standbys != nil || p.Warmups != nil {
				t.Fatalf("stateless task %s has standbys or warm-ups: %+v", task.ID, p)
			}
			continue
		}
		// A drained worker takes no new copy: its standbys are ones it
		// had, beside the task's own count; it keeps an active only while
		// its move waits, and warms nothing up.
		was := prev[task.ID]
		counted := 0
		for _, w := range p.Standbys {
			if !f.drained[w] {
				counted++
			} else if !slices.Contains(was.Standbys, w) && was.Active != w {
				t.Fatalf("task %s: drained worker %s got a new standby: %+v (was %+v)", task.ID, w, p, was)
			}
		}
		if want := f.standbys(task); counted != want {
			t.Fatalf("task %s: %d standbys on workers not drained, want %d: %+v", task.ID, counted, want, p)
		}
		if f.drained[p.Active] && was.Active != p.Active {
			// Only as the most caught-up copy, where no other worker is
			// as caught up (every caught-up worker counts alike).
			eff := func(w string) int64 {
				if f.caughtUp(w, task.ID) {
					return 0
				}
				return f.lagOf(w, task.ID)
			}
			for _, w := range in.Workers {
				if !f.drained[w.ID] && eff(w.ID) <= eff(p.Active) {
					t.Fatalf("task %s: drained worker %s got the active (was %q) though %s is as caught up", task.ID, p.Active, was.Active, w.ID)
				}
			}
		}
		for _, w := range p.Warmups {
			if f.drained[w] {
				t.Fatalf("task %s: drained worker %s warms it up", task.ID, w)
			}
		}
		warmups += len(p.Warmups)
		// Actives only on caught-up workers unless none is caught up; then
		// on the most caught up, the previous active winning ties. Frozen,
		// an active stays where it runs whatever its lag.
		m := f.minLag(task.ID)
		if in.Frozen && p.Active == in.Previous[task.ID].Active {
			continue
		}
		if m <= in.Config.AcceptableRecoveryLag {
			if !f.caughtUp(p.Active, task.ID) {
				t.Fatalf("task %s: active %s not caught up (lag %d) though a worker is", task.ID, p.Active, f.lagOf(p.Active, task.ID))
			}
		} else {
			if f.lagOf(p.Active, task.ID) != m {
				t.Fatalf("task %s: nobody caught up, active %s has lag %d, min %d", task.ID, p.Active, f.lagOf(p.Active, task.ID), m)
			}
			if pa := prev[task.ID].Active; pa != "" && f.lagOf(pa, task.ID) == m && p.Active != pa {
				t.Fatalf("task %s: tie must keep previous active %s, got %s", task.ID, pa, p.Active)
			}
		}
	}
	if warmups > in.Config.MaxWarmupReplicas {
		t.Fatalf("%d warm-ups, budget %d", warmups, in.Config.MaxWarmupReplicas)
	}
	if warmups > 0 && !res.Followup {
		t.Fatal("warm-ups without follow-up")
	}
	checkMoves(t, prev, res)
}

// checkMoves replays Moves on the cleaned previous assignment and expects
// the new one.
func checkMoves(t *testing.T, prev Assignment, res Result) {
	t.Helper()
	got := Assignment{}
	for id := range res.Assignment {
		p := prev[id]
		got[id] = Placement{Active: p.Active, Standbys: slices.Clone(p.Standbys), Warmups: slices.Clone(p.Warmups)}
	}
	for _, m := range res.Moves {
		p := got[m.Task]
		switch m.Kind {
		case KindActive:
			if p.Active != m.From || m.To == "" {
				t.Fatalf("bad active move %+v on %+v", m, p)
			}
			p.Active = m.To
		case KindStandby, KindWarmup:
			s := &p.Standbys
			if m.Kind == KindWarmup {
				s = &p.Warmups
			}
			if m.From != "" {
				i := slices.Index(*s, m.From)
				if i < 0 {
					t.Fatalf("move %+v: %s holds no such copy", m, m.From)
				}
				*s = slices.Delete(*s, i, i+1)
			}
			if m.To != "" {
				*s = append(*s, m.To)
				slices.Sort(*s)
			}
			if len(*s) == 0 {
				*s = nil
			}
		default:
			t.Fatalf("bad kind %+v", m)
		}
		got[m.Task] = p
	}
	if !reflect.DeepEqual(got, res.Assignment) {
		t.Fatalf("moves do not replay:\n got  %s\n want %s", fmtAssignment(got), fmtAssignment(res.Assignment))
	}
	if !slices.IsSortedFunc(res.Moves, func(a, b Move) int {
		if a.Task != b.Task {
			return compareStr(a.Task, b.Task)
		}
		return kindOrder[a.Kind] - kindOrder[b.Kind]
	}) {
		t.Fatal("moves not sorted")
	}
}

func compareStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTarget checks the balanced target behind a result and that every
// difference between output and target waits for a worker to catch up.
func checkTarget(t *testing.T, in Input, p *planner, res Result) {
	t.Helper()
	if p.nW == 0 {
		return
	}
	w := func(i int) uint64 { return p.weight[i] }
	total := int(p.totalW)
	// Actives: always within the band.
	nA := make([]int, p.nW)
	copies := make([]int, p.nW)
	for _, ti := range p.stateful {
		nA[p.astar[ti]]++
		copies[p.astar[ti]]++
		for _, s := range p.sstar[ti] {
			copies[s]++
		}
	}
	for i := range p.nW {
		lo, hi := bandOf(len(p.stateful), int(w(i)), total)
		if (nA[i] < lo || nA[i] > hi) && !p.blocked {
			t.Fatalf("target actives of %s: %d outside [%d,%d]", p.workers[i].ID, nA[i], lo, hi)
		}
	}
	// Copies: balanced or no allowed single move left.
	nC := newFacts(in).copies()
	for v := range p.nW {
		loV, hiV := bandOf(nC, int(w(v)), total)
		for u := range p.nW {
			loU, hiU := bandOf(nC, int(w(u)), total)
			if p.blocked || !((copies[v] > hiV && copies[u] < hiU) || (copies[v] > loV && copies[u] < loU)) {
				continue
			}
			for _, ti := range p.stateful {
				// Standbys of a task whose active move waits stay put.
				if slices.Contains(p.sstar[ti], v) && !p.holds(ti, u) && !p.activeWaits(ti) {
					t.Fatalf("copies: standby of %s could move from %s (%d) to %s (%d)", p.tasks[ti].ID,
						p.workers[v].ID, copies[v], p.workers[u].ID, copies[u])
				}
			}
		}
	}
	// Output vs target: an active differs only when the target is not
	// caught up (and is not an equally caught-up free choice).
	differs := false
	for _, ti := range p.stateful {
		id := p.tasks[ti].ID
		out := res.Assignment[id]
		target := p.workers[p.astar[ti]].ID
		if out.Active != target {
			differs = true
			if p.caughtUp(p.astar[ti], ti) || p.free(ti, p.astar[ti]) {
				t.Fatalf("task %s: active %s, target %s is caught up", id, out.Active, target)
			}
		}
		var want []string
		for _, s := range p.sstar[ti] {
			want = append(want, p.workers[s].ID)
		}
		// A drained worker's standbys stay beside the target's.
		for _, s := range p.extra[ti] {
			if id := p.workers[s].ID; id != out.Active {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		if !slices.Equal(out.Standbys, want) {
			differs = true
		}
	}
	if res.Followup != (differs || p.blocked) {
		t.Fatalf("output differs from target: %v, blocked by the warm-up budget: %v, followup %v", differs, p.blocked, res.Followup)
	}
	// Total load: stateless tasks leave no allowed move.
	load := make([]int, p.nW)
	sl := make([]int, p.nW)
	n := 0
	for _, task := range p.tasks {
		pl := res.Assignment[task.ID]
		i := slices.IndexFunc(p.workers, func(x Worker) bool { return x.ID == pl.Active })
		load[i]++
		n++
		if !task.Stateful {
			sl[i]++
		}
		for _, s := range pl.Standbys {
			load[slices.IndexFunc(p.workers, func(x Worker) bool { return x.ID == s })]++
			n++
		}
	}
	for v := range p.nW {
		loV, hiV := bandOf(n, int(w(v)), total)
		for u := range p.nW {
			loU, hiU := bandOf(n, int(w(u)), total)
			if sl[v] > 0 && ((load[v] > hiV && load[u] < hiU) || (load[v] > loV && load[u] < loU)) {
				t.Fatalf("total load: a stateless task could move from %s (%d) to %s (%d)",
					p.workers[v].ID, load[v], p.workers[u].ID, load[u])
			}
		}
	}
	// Everything caught up everywhere: the output is the target.
	allCU := true
	for _, ti := range p.stateful {
		for i := range p.nW {
			allCU = allCU && p.caughtUp(i, ti)
		}
	}
	if allCU && res.Followup {
		t.Fatal("everything is caught up, yet a follow-up is needed")
	}
}

func shuffled(r *rand.Rand, in Input) Input {
	out := in
	out.Tasks = slices.Clone(in.Tasks)
	r.Shuffle(len(out.Tasks), func(i, j int) { out.Tasks[i], out.Tasks[j] = out.Tasks[j], out.Tasks[i] })
	out.Workers = slices.Clone(in.Workers)
	r.Shuffle(len(out.Workers), func(i, j int) { out.Workers[i], out.Workers[j] = out.Workers[j], out.Workers[i] })
	for i := range out.Workers {
		out.Workers[i].Lags = maps.Clone(out.Workers[i].Lags) // a fresh map iterates differently
	}
	return out
}

func seeds(t *testing.T, full int) int {
	if testing.Short() {
		return full / 10
	}
	return full
}

func TestPropertyInvariants(t *testing.T) {
	for seed := range seeds(t, 3000) {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		in := genInput(r)
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			p, res := runPlanner(t, in)
			checkInvariants(t, in, res)
			checkTarget(t, in, p, res)
		})
		if t.Failed() {
			return
		}
	}
}

func TestPropertyDeterministic(t *testing.T) {
	for seed := range seeds(t, 1500) {
		r := rand.New(rand.NewPCG(uint64(seed), 2))
		in := genInput(r)
		a := mustPlan(t, in)
		b := mustPlan(t, in)
		c := mustPlan(t, shuffled(r, in))
		if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a, c) {
			t.Fatalf("seed %d: not deterministic", seed)
		}
	}
}

// TestPropertySticky feeds each output back as Previous with every copy's
// lag set to 0 (the workers caught up) until no follow-up is needed, and
// then expects a fixed point: the same assignment, no moves, no follow-up.
func TestPropertySticky(t *testing.T) {
	maxRounds := 0
	for seed := range seeds(t, 1000) {
		r := rand.New(rand.NewPCG(uint64(seed), 3))
		in := genInput(r)
		for i := range in.Workers {
			in.Workers[i].Lags = maps.Clone(in.Workers[i].Lags)
		}
		idx := map[string]int{}
		for i, w := range in.Workers {
			idx[w.ID] = i
		}
		res := mustPlan(t, in)
		rounds := 0
		for {
			for id, p := range res.Assignment {
				for _, w := range append(append([]string{p.Active}, p.Standbys...), p.Warmups...) {
					if w != "" {
						in.Workers[idx[w]].Lags[id] = 0
					}
				}
			}
			in.Previous = res.Assignment
			next := mustPlan(t, in)
			checkInvariants(t, in, next)
			if !res.Followup {
				if !reflect.DeepEqual(next.Assignment, res.Assignment) || len(next.Moves) != 0 || next.Followup {
					t.Fatalf("seed %d round %d: not a fixed point: moves %v followup %v\n was %s\n now %s", seed, rounds,
						next.Moves, next.Followup, fmtAssignment(res.Assignment), fmtAssignment(next.Assignment))
				}
				break
			}
			res = next
			rounds++
			if rounds > 1000 {
				t.Fatalf("seed %d: no convergence after %d rounds", seed, rounds)
			}
		}
		maxRounds = max(maxRounds, rounds)
	}
	t.Logf("longest convergence: %d follow-up rounds", maxRounds)
}

// TestPropertyWarmupsTakeOverAtOnce: a warm-up that has caught up is used
// in the very next plan, never kept waiting as a warm-up. Its worker almost
// always ends up with the copy it warmed up (as active or standby); the
// exception is when several warm-ups finish at once and the finished moves
// balance the cluster another way, so the test bounds that share.
func TestPropertyWarmupsTakeOverAtOnce(t *testing.T) {
	warmups, unused := 0, 0
	for seed := range seeds(t, 1500) {
		r := rand.New(rand.NewPCG(uint64(seed), 4))
		in := genInput(r)
		res := mustPlan(t, in)
		if !res.Followup {
			continue
		}
		for i := range in.Workers {
			in.Workers[i].Lags = maps.Clone(in.Workers[i].Lags)
		}
		idx := map[string]int{}
		for i, w := range in.Workers {
			idx[w.ID] = i
		}
		for id, p := range res.Assignment {
			for _, w := range p.Warmups {
				in.Workers[idx[w]].Lags[id] = 0
			}
		}
		in.Previous = res.Assignment
		next := mustPlan(t, in)
		checkInvariants(t, in, next)
		for id, p := range res.Assignment {
			for _, w := range p.Warmups {
				warmups++
				np := next.Assignment[id]
				if slices.Contains(np.Warmups, w) {
					t.Fatalf("seed %d: caught-up warm-up %s/%s kept waiting", seed, id, w)
				}
				if np.Active != w && !slices.Contains(np.Standbys, w) {
					unused++
				}
			}
		}
	}
	if unused*100 > warmups {
		t.Fatalf("%d of %d caught-up warm-ups were not used", unused, warmups)
	}
	t.Logf("%d of %d caught-up warm-ups were not used", unused, warmups)
}

// TestPropertyIdempotent: planning again from the output, with nothing else
// changed (no lag has moved), changes nothing: warm-ups in progress keep
// their places and no copy flaps while the controller re-plans.
func TestPropertyIdempotent(t *testing.T) {
	bad := 0
	for seed := range seeds(t, 1500) {
		r := rand.New(rand.NewPCG(uint64(seed), 5))
		in := genInput(r)
		res := mustPlan(t, in)
		in.Previous = res.Assignment
		next := mustPlan(t, in)
		if !reflect.DeepEqual(next.Assignment, res.Assignment) || next.Followup != res.Followup {
			bad++
			if bad < 4 {
				t.Errorf("seed %d: re-planning changed the output: moves %v\n was %s\n now %s", seed, next.Moves,
					fmtAssignment(res.Assignment), fmtAssignment(next.Assignment))
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d inputs not idempotent", bad)
	}
}

// TestPropertyNewCopiesGoToTheMostCaughtUp: a new standby or warm-up (its
// worker held no copy of the task in Previous) never goes to a worker that
// is less caught up than another eligible one (capacity above 0, holding
// no copy of the task) when moving it there would keep the same balance.
// Caught-up workers count as equally caught up. A standby or warm-up in the
// output stands for a target copy on its worker (an active or a standby);
// the same balance means that every worker was inside its band, in each
// class that copy counts in (actives for an active, stateful copies for
// both), and stays inside it after the move; and, for an active, that the
// move would not need a warm-up slot when none is left.
func TestPropertyNewCopiesGoToTheMostCaughtUp(t *testing.T) {
	checked := 0
	for seed := range seeds(t, 3000) {
		r := rand.New(rand.NewPCG(uint64(seed), 6))
		in := genInput(r)
		p, res := runPlanner(t, in)
		if p.nW == 0 {
			continue
		}
		f := newFacts(in)
		prev := f.cleanPrev()
		eff := func(w string, task string) int64 {
			if f.caughtUp(w, task) {
				return 0
			}
			return f.lagOf(w, task)
		}
		// The target's counts per worker id and the bands of its classes.
		acts, copies := map[string]int{}, map[string]int{}
		for _, ti := range p.stateful {
			acts[p.workers[p.astar[ti]].ID]++
			copies[p.workers[p.astar[ti]].ID]++
			for _, s := range p.sstar[ti] {
				copies[p.workers[s].ID]++
			}
		}
		type class struct {
			cnt map[string]int
			n   int
		}
		bandFor := func(c class, w string) (int, int) { return bandOf(c.n, f.weight[w], f.totalW) }
		inBand := func(c class) bool {
			for _, w := range in.Workers {
				if lo, hi := bandFor(c, w.ID); c.cnt[w.ID] < lo || c.cnt[w.ID] > hi {
					return false
				}
			}
			return true
		}
		keeps := func(c class, w, u string) bool {
			loW, _ := bandFor(c, w)
			_, hiU := bandFor(c, u)
			return inBand(c) && c.cnt[w]-1 >= loW && c.cnt[u]+1 <= hiU
		}
		actClass := class{acts, len(p.stateful)}
		copyClass := class{copies, f.copies()}
		for _, ti := range p.stateful {
			task := p.tasks[ti].ID
			out, old := res.Assignment[task], prev[task]
			oldHolders := append(append([]string{old.Active}, old.Standbys...), old.Warmups...)
			target := map[string]bool{p.workers[p.astar[ti]].ID: true}
			for _, s := range p.sstar[ti] {
				target[p.workers[s].ID] = true
			}
			for _, w := range append(slices.Clone(out.Standbys), out.Warmups...) {
				if slices.Contains(oldHolders, w) || f.caughtUp(w, task) {
					continue
				}
				if !target[w] {
					t.Fatalf("seed %d: new copy of %s on %s stands for no target copy", seed, task, w)
				}
				checked++
				active := p.workers[p.astar[ti]].ID == w
				for _, u := range in.Workers {
					if target[u.ID] || f.weight[u.ID] == 0 || eff(u.ID, task) >= eff(w, task) {
						continue
					}
					// An active target that restores as a previous standby
					// holds no warm-up slot; moving it onto a worker that
					// needs one is not possible once none is left.
					ui := slices.IndexFunc(p.workers, func(x Worker) bool { return x.ID == u.ID })
					noSlot := active && p.needsWarmup(ti, ui) && !p.paid[ti] && p.budget == 0
					if !noSlot && keeps(copyClass, w, u.ID) && (!active || keeps(actClass, w, u.ID)) {
						t.Fatalf("seed %d: new copy of %s on %s (lag %d), but %s (lag %d) would keep the balance\n%s",
							seed, task, w, f.lagOf(w, task), u.ID, f.lagOf(u.ID, task), fmtAssignment(res.Assignment))
					}
				}
			}
		}
	}
	t.Logf("%d new copies on workers that were not caught up", checked)
}
