package assign

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// big is a lag far above the acceptable recovery lag: "not caught up".
const big = 1_000_000

func pl(active string, standbys ...string) Placement {
	if len(standbys) == 0 {
		standbys = nil
	}
	return Placement{Active: active, Standbys: standbys}
}

func warm(p Placement, warmups ...string) Placement {
	p.Warmups = warmups
	return p
}

func stateful(ids ...string) []Task {
	ts := make([]Task, len(ids))
	for i, id := range ids {
		ts[i] = Task{ID: id, Stateful: true}
	}
	return ts
}

func haConfig() Config {
	c := DefaultConfig()
	c.NumStandbyReplicas = 1
	c.MaxWarmupReplicas = 2
	return c
}

func mustPlan(t *testing.T, in Input) Result {
	t.Helper()
	res, err := Plan(in)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	return res
}

func assertAssignment(t *testing.T, step string, got, want Assignment) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got  %s\n want %s", step, fmtAssignment(got), fmtAssignment(want))
	}
}

// fmtAssignment prints an assignment per worker, in the notation of
// docs/design.md, "The assignor": I1 {T1,T3 | T2 | warm T4}.
func fmtAssignment(a Assignment) string {
	type row struct{ act, sb, wu []string }
	rows := map[string]*row{}
	get := func(w string) *row {
		if rows[w] == nil {
			rows[w] = &row{}
		}
		return rows[w]
	}
	for _, id := range slices.Sorted(mapsKeys(a)) {
		p := a[id]
		get(p.Active).act = append(get(p.Active).act, id)
		for _, w := range p.Standbys {
			get(w).sb = append(get(w).sb, id)
		}
		for _, w := range p.Warmups {
			get(w).wu = append(get(w).wu, id)
		}
	}
	var b strings.Builder
	for _, w := range slices.Sorted(mapsKeys(rows)) {
		r := rows[w]
		b.WriteString(w + " {" + strings.Join(r.act, ",") + " | " + strings.Join(r.sb, ","))
		if len(r.wu) > 0 {
			b.WriteString(" | warm " + strings.Join(r.wu, ","))
		}
		b.WriteString("} ")
	}
	return b.String()
}

func mapsKeys[M ~map[string]V, V any](m M) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestStickyBalanced: C1 {T0,T1}, C2 {T2,T3}, capacity 1, all caught up.
func TestStickyBalanced(t *testing.T) {
	prev := Assignment{"T0": pl("C1"), "T1": pl("C1"), "T2": pl("C2"), "T3": pl("C2")}
	res := mustPlan(t, Input{
		Config: DefaultConfig(),
		Tasks:  stateful("T0", "T1", "T2", "T3"),
		Workers: []Worker{
			{ID: "C1", Capacity: 1, Lags: map[string]int64{"T0": 0, "T1": 0}},
			{ID: "C2", Capacity: 1, Lags: map[string]int64{"T2": 0, "T3": 0}},
		},
		Previous: prev,
	})
	assertAssignment(t, "sticky", res.Assignment, prev)
	if res.Followup || len(res.Moves) != 0 {
		t.Fatalf("followup=%v moves=%v", res.Followup, res.Moves)
	}
}

// TestFreshClusterSpreads: with no state anywhere and no previous
// assignment nothing is pinned, so the first plan is already balanced.
func TestFreshClusterSpreads(t *testing.T) {
	cfg := haConfig()
	var tasks []Task
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
		tasks = append(tasks, Task{ID: id, Stateful: id < "i"})
	}
	res := mustPlan(t, Input{
		Config:  cfg,
		Tasks:   tasks,
		Workers: []Worker{{ID: "w1", Capacity: 1}, {ID: "w2", Capacity: 2}, {ID: "w3", Capacity: 1}},
	})
	if res.Followup {
		t.Fatal("fresh cluster needs no follow-up")
	}
	act, copies, total := map[string]int{}, map[string]int{}, map[string]int{}
	for _, task := range tasks {
		p := res.Assignment[task.ID]
		total[p.Active]++
		if task.Stateful {
			act[p.Active]++
			copies[p.Active]++
		}
		for _, w := range p.Standbys {
			copies[w]++
			total[w]++
		}
	}
	// 8 stateful actives over capacities 1:2:1 -> 2,4,2; 16 copies -> 4,8,4;
	// 20 in total -> 5,10,5.
	want := []map[string]int{{"w1": 2, "w2": 4, "w3": 2}, {"w1": 4, "w2": 8, "w3": 4}, {"w1": 5, "w2": 10, "w3": 5}}
	for i, got := range []map[string]int{act, copies, total} {
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("class %d: got %v, want %v", i, got, want[i])
		}
	}
}

// TestNoWorkers: without workers every task is listed, unassigned.
func TestNoWorkers(t *testing.T) {
	res := mustPlan(t, Input{Config: DefaultConfig(), Tasks: stateful("a", "b"),
		Previous: Assignment{"a": pl("gone", "gone2")}})
	assertAssignment(t, "no workers", res.Assignment, Assignment{"a": {}, "b": {}})
	if res.Followup || len(res.Moves) != 0 {
		t.Fatalf("followup=%v moves=%v", res.Followup, res.Moves)
	}
}

// TestWarmupBudget: a big imbalance is worked off at most
// MaxWarmupReplicas warm-ups at a time, continuing warm-ups first.
func TestWarmupBudget(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxWarmupReplicas = 1
	tasks := stateful("t1", "t2", "t3", "t4")
	prev := Assignment{}
	lags := map[string]int64{}
	for _, task := range tasks {
		prev[task.ID] = pl("w1")
		lags[task.ID] = 0
	}
	in := Input{Config: cfg, Tasks: tasks, Previous: prev,
		Workers: []Worker{{ID: "w1", Capacity: 1, Lags: lags}, {ID: "w2", Capacity: 1}}}
	r1 := mustPlan(t, in)
	if !r1.Followup || countWarmups(r1.Assignment) != 1 {
		t.Fatalf("round 1: followup=%v %s", r1.Followup, fmtAssignment(r1.Assignment))
	}
	// Not caught up yet: the same warm-up continues, nothing else starts.
	in.Previous = r1.Assignment
	r2 := mustPlan(t, in)
	assertAssignment(t, "warm-up continues", r2.Assignment, r1.Assignment)
	if !r2.Followup || len(r2.Moves) != 0 {
		t.Fatalf("round 2: followup=%v moves=%v", r2.Followup, r2.Moves)
	}
	// The warm-up catches up: its task moves, the next warm-up starts.
	var warmed string
	for id, p := range r1.Assignment {
		if len(p.Warmups) > 0 {
			warmed = id
		}
	}
	in.Workers[1].Lags = map[string]int64{warmed: 0}
	r3 := mustPlan(t, in)
	if r3.Assignment[warmed].Active != "w2" || countWarmups(r3.Assignment) != 1 || !r3.Followup {
		t.Fatalf("round 3: %s", fmtAssignment(r3.Assignment))
	}
}

func countWarmups(a Assignment) int {
	n := 0
	for _, p := range a {
		n += len(p.Warmups)
	}
	return n
}

// TestStatelessOnlyBalancesLoad: stateless tasks never get standbys or
// warm-ups (even if Previous says so) and fill up the less loaded workers.
func TestStatelessOnlyBalancesLoad(t *testing.T) {
	cfg := haConfig()
	tasks := []Task{{ID: "s1"}, {ID: "s2"}, {ID: "s3"}, {ID: "f1", Stateful: true}, {ID: "f2", Stateful: true}}
	res := mustPlan(t, Input{
		Config: cfg,
		Tasks:  tasks,
		Workers: []Worker{
			{ID: "a", Capacity: 1, Lags: map[string]int64{"f1": 0, "f2": 0}},
			{ID: "b", Capacity: 1, Lags: map[string]int64{"f1": 0, "f2": 0}},
		},
		Previous: Assignment{"s1": warm(pl("a", "b"), "b"), "f1": pl("a", "b"), "f2": pl("b", "a")},
	})
	for _, id := range []string{"s1", "s2", "s3"} {
		if p := res.Assignment[id]; p.Standbys != nil || p.Warmups != nil || p.Active == "" {
			t.Fatalf("%s: %+v", id, p)
		}
	}
	if res.Assignment["s1"].Active != "a" {
		t.Fatalf("s1 should stay on a: %s", fmtAssignment(res.Assignment))
	}
	load := map[string]int{}
	for _, p := range res.Assignment {
		load[p.Active]++
		for _, w := range p.Standbys {
			load[w]++
		}
	}
	if d := load["a"] - load["b"]; d < -1 || d > 1 {
		t.Fatalf("total load %v: %s", load, fmtAssignment(res.Assignment))
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cases := []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.AcceptableRecoveryLag = -1 }, "acceptable_recovery_lag: must not be negative"},
		{func(c *Config) { c.MaxWarmupReplicas = 0 }, "max_warmup_replicas: must be at least 1"},
		{func(c *Config) { c.NumStandbyReplicas = -1 }, "num_standby_replicas: must not be negative"},
		{func(c *Config) { c.NumStandbyReplicas = MaxStandbyReplicas + 1 }, "num_standby_replicas: must be at most 16"},
		{func(c *Config) { c.ProbingRebalanceInterval = 59 * time.Second }, "probing_rebalance_interval: must be at least 1m0s"},
	}
	for _, tc := range cases {
		c := DefaultConfig()
		tc.mutate(&c)
		err := c.Validate()
		if err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
		if _, err := Plan(Input{Config: c}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Plan: got %v, want it to contain %q", err, tc.want)
		}
	}
	var zero Config
	if err := zero.Validate(); err == nil || !strings.Contains(err.Error(), "max_warmup_replicas") ||
		!strings.Contains(err.Error(), "probing_rebalance_interval") {
		t.Errorf("zero config: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	cfg := DefaultConfig()
	w := func(id string, c int, lags map[string]int64) Worker { return Worker{ID: id, Capacity: c, Lags: lags} }
	cases := []struct {
		name string
		in   Input
		want string
	}{
		{"empty task id", Input{Tasks: []Task{{ID: "a"}, {ID: ""}}}, `task at index 1: empty id`},
		{"duplicate task", Input{Tasks: []Task{{ID: "a"}, {ID: "b"}, {ID: "a", Stateful: true}}}, `task "a": duplicate id`},
		{"negative standbys", Input{Tasks: []Task{{ID: "a", Stateful: true, StandbyReplicas: -1}}}, `task "a": negative standby replicas -1`},
		{"too many standbys", Input{Tasks: []Task{{ID: "a"}, {ID: "b", Stateful: true, StandbyReplicas: MaxStandbyReplicas + 1}}},
			`task "b": standby replicas 17 exceed the maximum 16`},
		{"empty worker id", Input{Workers: []Worker{w("", 1, nil)}}, `worker at index 0: empty id`},
		{"duplicate worker", Input{Workers: []Worker{w("x", 1, nil), w("x", 2, nil)}}, `worker "x": duplicate id`},
		{"negative capacity", Input{Workers: []Worker{w("x", -1, nil)}}, `worker "x": negative capacity -1`},
		{"huge capacity", Input{Workers: []Worker{w("x", MaxCapacity+1, nil)}}, `worker "x": capacity`},
		{"negative lag", Input{Tasks: stateful("a"), Workers: []Worker{w("x", 1, map[string]int64{"a": 0, "c": -2, "b": -1})}},
			`worker "x": negative lag -1 for task "b"`},
		{"negative lag of unknown task", Input{Workers: []Worker{w("x", 1, map[string]int64{"zz": -1})}}, `task "zz"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.Config = cfg
			_, err := Plan(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Departed workers and deleted tasks in Previous are not errors.
	res, err := Plan(Input{Config: cfg, Tasks: stateful("a"), Workers: []Worker{w("x", 1, nil)},
		Previous: Assignment{"a": pl("gone", "gone", "x"), "deleted": pl("x")}})
	if err != nil {
		t.Fatal(err)
	}
	assertAssignment(t, "departed", res.Assignment, Assignment{"a": pl("x")})
}

// TestNewStandbyGoesToTheMostCaughtUp: T runs on A without a standby; B
// has no state for T and C is 1,000 records behind (not caught up with an
// acceptable recovery lag of 100). Both are free, so the new standby goes
// to C, which has less to restore, although B comes first by id.
func TestNewStandbyGoesToTheMostCaughtUp(t *testing.T) {
	cfg := haConfig()
	cfg.AcceptableRecoveryLag = 100
	res := mustPlan(t, Input{
		Config: cfg,
		Tasks:  stateful("T"),
		Workers: []Worker{
			{ID: "A", Capacity: 1, Lags: map[string]int64{"T": 0}},
			{ID: "B", Capacity: 1},
			{ID: "C", Capacity: 1, Lags: map[string]int64{"T": 1000}},
		},
		Previous: Assignment{"T": pl("A", "gone")},
	})
	assertAssignment(t, "new standby", res.Assignment, Assignment{"T": pl("A", "C")})
}

// TestNewWarmupGoesToTheMostCaughtUp: A runs T1 and T2 and must give one
// up; B has no state and C is 1,000 records behind on T2. The move waits
// for a warm-up, which goes to C.
func TestNewWarmupGoesToTheMostCaughtUp(t *testing.T) {
	cfg := DefaultConfig()
	cfg.AcceptableRecoveryLag = 100
	res := mustPlan(t, Input{
		Config: cfg,
		Tasks:  stateful("T1", "T2"),
		Workers: []Worker{
			{ID: "A", Capacity: 1, Lags: map[string]int64{"T1": 0, "T2": 0}},
			{ID: "B", Capacity: 1},
			{ID: "C", Capacity: 1, Lags: map[string]int64{"T2": 1000}},
		},
		Previous: Assignment{"T1": pl("A"), "T2": pl("A")},
	})
	assertAssignment(t, "new warm-up", res.Assignment, Assignment{"T1": pl("A"), "T2": warm(pl("A"), "C")})
	if !res.Followup {
		t.Fatal("the warm-up needs a follow-up rebalance")
	}
}
