package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/state"
)

// rig is a Service over a real FSM; "replication" applies each command as
// the next log entry.
type rig struct {
	t      *testing.T
	fsm    *state.FSM
	copies atomic.Int64 // AllTasks calls by the service
	svc    *Service

	mu      sync.Mutex
	index   uint64
	writes  int
	failing bool
}

const (
	sessionTimeout = 3 * time.Second
	acc            = 100
)

func newRig(t *testing.T, standbys int, opts ...func(*Config)) *rig {
	r := &rig{t: t, fsm: state.NewFSM("c")}
	cfg := Config{
		Assign: assign.Config{AcceptableRecoveryLag: acc, MaxWarmupReplicas: 2, NumStandbyReplicas: standbys,
			ProbingRebalanceInterval: time.Minute},
		SessionTimeout: sessionTimeout, HeartbeatInterval: 500 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := New(cfg, countingFSM{r.fsm, &r.copies}, r.apply, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r.svc = svc
	return r
}

// countingFSM counts how often the service copies the task set.
type countingFSM struct {
	*state.FSM
	copies *atomic.Int64
}

func (c countingFSM) AllTasks() ([]state.Task, uint64) {
	c.copies.Add(1)
	return c.FSM.AllTasks()
}

func (r *rig) apply(_ context.Context, b []byte) (state.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing {
		return state.Result{}, errors.New("leadership lost")
	}
	c, err := state.DecodeCommand(b)
	if err != nil {
		r.t.Errorf("the service wrote a bad command: %v", err)
	}
	if c.Type == state.CmdSetAssignment {
		r.writes++
	}
	r.index++
	res, _ := r.fsm.Apply(r.index, 1, b).(state.Result)
	return res, nil
}

func (r *rig) setFailing(v bool) {
	r.mu.Lock()
	r.failing = v
	r.mu.Unlock()
}

func (r *rig) assignmentWrites() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

func (r *rig) submit(ids ...string) {
	for _, id := range ids {
		r.submitTask(state.Task{ID: id, Stateful: true})
	}
}

func (r *rig) submitTask(t state.Task) {
	c := state.Command{Type: state.CmdSubmitTask, Task: t}
	if _, err := r.apply(context.Background(), c.Encode()); err != nil {
		r.t.Fatal(err)
	}
}

// commit writes an assignment directly, as a previous primary would have.
func (r *rig) commit(a map[string]state.Placement) {
	gen, _ := r.fsm.AssignmentGeneration()
	d := state.AssignmentDelta{Base: gen, Generation: gen + 1}
	for _, id := range slices.Sorted(mapsKeys(a)) {
		p := a[id]
		p.Task = id
		d.Set = append(d.Set, p)
	}
	c := state.Command{Type: state.CmdSetAssignment, Assign: d}
	if res, err := r.apply(context.Background(), c.Encode()); err != nil || res.Code != state.CodeOK {
		r.t.Fatalf("commit: %v %+v", err, res)
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// register opens worker id's session and sends its first heartbeat, with
// no lags: the assignor plans for a worker once it has reported.
func (r *rig) register(id string, capacity uint32) {
	r.t.Helper()
	if _, err := r.svc.Register(id, capacity, ""); err != nil {
		r.t.Fatalf("register %s: %v", id, err)
	}
	r.beat(id, nil)
}

func (r *rig) beat(id string, lags map[string]int64, facts ...Fact) Answer {
	r.t.Helper()
	c, err := r.svc.Heartbeat(id, lags, facts, nil)
	if err != nil {
		r.t.Fatalf("heartbeat %s: %v", id, err)
	}
	return c
}

func (r *rig) placement(task string) state.Placement {
	_, a := r.fsm.Assignment()
	return a[task]
}

// establish starts a term as the node does (Start, then Run until the term
// ends) and returns what ends it: cancel, then wait for Run.
func (r *rig) establish(term uint64) (revoke func()) {
	r.t.Helper()
	r.start(term)
	return r.run(term)
}

// start opens the term's sessions without running its loop, so that a test
// can register workers before the loop's first plan.
func (r *rig) start(term uint64) {
	r.t.Helper()
	if err := r.svc.Start(term); err != nil {
		r.t.Fatal(err)
	}
}

// run runs a started term's loop and returns what ends it.
func (r *rig) run(term uint64) (revoke func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.svc.Run(ctx, term) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("Run of term %d: %v", term, err)
		}
	}
}

func (r *rig) gen() uint64 {
	g, _ := r.fsm.AssignmentGeneration()
	return g
}

// settle advances fake time by d and lets the loop run.
func settle(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func TestFirstPlanNeedsNoSettle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0", "t1", "t2", "t3")
		// Both workers register before the loop runs: a loop that planned
		// between them would rightly keep every active on w1 (w2 has not
		// caught up), which is not what this test is about.
		r.start(1)
		r.register("w1", 1)
		r.register("w2", 1)
		defer r.run(1)()
		settle(200 * time.Millisecond)
		if r.gen() == 0 {
			t.Fatal("no assignment for a cluster that had none: it should not wait a session timeout")
		}
		for _, id := range []string{"t0", "t1", "t2", "t3"} {
			p := r.placement(id)
			if p.Active == "" || len(p.Standbys) != 1 || p.Standbys[0] == p.Active {
				t.Fatalf("%s placed %+v, want an active and one standby elsewhere", id, p)
			}
			if task, _ := r.fsm.Task(id); task.State != state.TaskStateAssigned {
				t.Fatalf("%s state %q after assignment", id, task.State)
			}
		}
		c := r.beat("w1", nil)
		if len(c.Actives) != 2 || len(c.Standbys) != 2 || c.Generation != r.gen() {
			t.Fatalf("w1 copies %+v, want 2 actives and 2 standbys of generation %d", c, r.gen())
		}
	})
}

// A new primary with a committed assignment waits one session timeout for
// the workers to report; a balanced, caught-up cluster then keeps every
// placement and no generation is written.
func TestFailoverSettlesAndMovesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0", "t1", "t2", "t3")
		r.commit(map[string]state.Placement{
			"t0": {Active: "w1", Standbys: []string{"w2"}}, "t1": {Active: "w1", Standbys: []string{"w2"}},
			"t2": {Active: "w2", Standbys: []string{"w1"}}, "t3": {Active: "w2", Standbys: []string{"w1"}},
		})
		_, before := r.fsm.Assignment()
		writes := r.assignmentWrites()
		defer r.establish(2)()
		caught := map[string]int64{"t0": 0, "t1": 0, "t2": 0, "t3": 0}
		// Only w1 has reported when half the settle period has passed: a
		// hasty plan would move w2's tasks.
		r.register("w1", 1)
		r.beat("w1", caught)
		settle(sessionTimeout / 2)
		if r.assignmentWrites() != writes {
			t.Fatal("planned while settling")
		}
		if _, settling, _, ok := r.svc.Soft(); !ok || !settling {
			t.Fatalf("Soft: settling=%v ok=%v, want settling", settling, ok)
		}
		r.register("w2", 1)
		for range 4 {
			r.beat("w1", caught)
			r.beat("w2", caught)
			settle(sessionTimeout / 4)
		}
		if _, settling, _, _ := r.svc.Soft(); settling {
			t.Fatal("still settling after the session timeout")
		}
		if _, after := r.fsm.Assignment(); !equalAssignments(before, after) || r.assignmentWrites() != writes {
			t.Fatalf("a failover changed the placement:\nbefore %v\nafter  %v", before, after)
		}
	})
}

func equalAssignments(a, b map[string]state.Placement) bool {
	if len(a) != len(b) {
		return false
	}
	for k, p := range a {
		q, ok := b[k]
		if !ok || p.Active != q.Active || !slices.Equal(p.Standbys, q.Standbys) || !slices.Equal(p.Warmups, q.Warmups) {
			return false
		}
	}
	return true
}

// A worker that stops heartbeating is gone after the session timeout; its
// actives move to their caught-up standbys at once.
func TestSilentWorkerExpiresAndStandbysTakeOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0", "t1", "t2", "t3", "t4", "t5")
		defer r.establish(1)()
		for _, w := range []string{"w1", "w2", "w3"} {
			r.register(w, 1)
		}
		settle(200 * time.Millisecond)
		// A worker holds (caught up) every copy it was given, a pending
		// active as a standby; it reports what it held, then learns its
		// copies from the answer.
		last := map[string]map[string]int64{}
		lagsOf := func(w string) map[string]int64 {
			c := r.beat(w, last[w])
			m := map[string]int64{}
			defer func() { last[w] = m }()
			for _, t := range slices.Concat(c.Actives, c.PendingActives, c.Standbys, c.Warmups) {
				m[t] = 0
			}
			return m
		}
		// Report until the assignment is stable: the first plan placed
		// tasks before anyone held state, later reports may swap them.
		var w3Last time.Time
		stable := 0
		for round := 0; stable < 3; round++ {
			if round > 40 {
				t.Fatal("the assignment never became stable")
			}
			gen := r.gen()
			for _, w := range []string{"w1", "w2", "w3"} {
				r.beat(w, lagsOf(w))
			}
			w3Last = time.Now()
			settle(500 * time.Millisecond)
			if r.gen() == gen {
				stable++
			} else {
				stable = 0
			}
		}
		_, before := r.fsm.Assignment()
		var onW3 []string
		for id, p := range before {
			if p.Active == "w3" {
				onW3 = append(onW3, id)
			}
		}
		if len(onW3) != 2 {
			t.Fatalf("w3 runs %v, want 2 of 6 tasks", onW3)
		}
		// w3 dies: only w1 and w2 keep reporting.
		start := time.Now()
		for r.placementOf(onW3[0]).Active == "w3" {
			if time.Since(start) > sessionTimeout+time.Second {
				t.Fatalf("w3's tasks still on w3 %v after it went silent", time.Since(start))
			}
			r.beat("w1", lagsOf("w1"))
			r.beat("w2", lagsOf("w2"))
			settle(250 * time.Millisecond)
		}
		if took := time.Since(w3Last); took < sessionTimeout {
			t.Fatalf("w3 expired %v after its last heartbeat, before its session timeout %v", took, sessionTimeout)
		}
		for _, id := range onW3 {
			p, old := r.placement(id), before[id]
			if len(old.Standbys) != 1 || p.Active != old.Standbys[0] {
				t.Fatalf("%s: active moved to %q, want its caught-up standby %v", id, p.Active, old.Standbys)
			}
		}
		ws, _, err := r.svc.Workers()
		if err != nil || len(ws) != 2 {
			t.Fatalf("Workers() = %d sessions, %v; want w1 and w2", len(ws), err)
		}
	})
}

func (r *rig) placementOf(task string) state.Placement { return r.placement(task) }

// A warm-up whose lag crosses the acceptable recovery lag takes over at the
// next heartbeat, not at the probing interval.
func TestCaughtUpWarmupTakesOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submit("t0", "t1", "t2", "t3")
		r.commit(map[string]state.Placement{
			"t0": {Active: "w1"}, "t1": {Active: "w1"}, "t2": {Active: "w2"}, "t3": {Active: "w2"},
		})
		r.svc.cfg.Settle = time.Millisecond
		defer r.establish(1)()
		r.register("w1", 1)
		r.register("w2", 1)
		r.register("w3", 1)
		r.beat("w1", map[string]int64{"t0": 0, "t1": 0})
		r.beat("w2", map[string]int64{"t2": 0, "t3": 0})
		settle(200 * time.Millisecond)
		c := r.beat("w3", nil)
		if len(c.Warmups) == 0 || len(c.Actives) != 0 {
			t.Fatalf("w3 copies %+v: want warm-ups and no active while it has no state", c)
		}
		warm := c.Warmups[0]
		gen := r.gen()
		// Still lagging: nothing moves.
		r.beat("w3", map[string]int64{warm: acc + 1})
		settle(200 * time.Millisecond)
		if r.gen() != gen {
			t.Fatal("a lag report that does not cross the threshold changed the assignment")
		}
		// Crossing: the active moves within a tick, far before the probing
		// interval (a minute).
		r.beat("w3", map[string]int64{warm: acc})
		settle(200 * time.Millisecond)
		if p := r.placement(warm); p.Active != "w3" {
			t.Fatalf("%s placed %+v after w3 caught up; want its active on w3", warm, p)
		}
	})
}

// A plan that leaves moves waiting is repeated after the probing interval
// even if no lag report crosses the threshold.
func TestProbingRebalanceRepeatsThePlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submit("t0", "t1", "t2", "t3")
		r.commit(map[string]state.Placement{
			"t0": {Active: "w1"}, "t1": {Active: "w1"}, "t2": {Active: "w2"}, "t3": {Active: "w2"},
		})
		r.svc.cfg.Settle = time.Millisecond
		defer r.establish(1)()
		for _, w := range []string{"w1", "w2", "w3"} {
			r.register(w, 1)
		}
		beat := func() {
			r.beat("w1", map[string]int64{"t0": 0, "t1": 0})
			r.beat("w2", map[string]int64{"t2": 0, "t3": 0})
			r.beat("w3", nil)
		}
		beat()
		settle(200 * time.Millisecond)
		if _, _, followup, _ := r.svc.Soft(); !followup {
			t.Fatal("no follow-up while w3 warms up")
		}
		plans := r.svc.plansForTest()
		for range 50 { // 50 s: less than the probing interval
			beat()
			settle(time.Second)
		}
		if got := r.svc.plansForTest(); got != plans {
			t.Fatalf("%d plans without a trigger before the probing interval", got-plans)
		}
		for range 15 {
			beat()
			settle(time.Second)
		}
		if got := r.svc.plansForTest(); got <= plans {
			t.Fatal("no plan after the probing interval")
		}
	})
}

// A failed write is retried; a delta from a stale generation is re-planned.
func TestFailedWriteIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submit("t0", "t1")
		r.setFailing(true)
		defer r.establish(1)()
		r.register("w1", 1)
		settle(500 * time.Millisecond)
		if r.gen() != 0 {
			t.Fatal("an assignment landed while writes fail")
		}
		r.setFailing(false)
		settle(2 * time.Second)
		if r.gen() == 0 || r.placement("t0").Active != "w1" {
			t.Fatalf("no assignment after writes recovered: gen %d", r.gen())
		}
	})
}

// A task's own standby count replaces num_standby_replicas (here 0) for
// it; a count above the assignor's maximum, which the log format takes but
// a submit refuses, is capped rather than failing the plan.
func TestTaskStandbysArePlanned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submitTask(state.Task{ID: "two", Stateful: true, StandbyReplicas: 2})
		r.submitTask(state.Task{ID: "huge", Stateful: true, StandbyReplicas: 1 << 16})
		r.submit("plain")
		r.start(1)
		r.register("w1", 1)
		r.register("w2", 1)
		r.register("w3", 1)
		defer r.run(1)()
		settle(200 * time.Millisecond)
		for id, want := range map[string]int{"two": 2, "huge": 2, "plain": 0} {
			p := r.placement(id)
			if p.Active == "" || len(p.Standbys) != want || slices.Contains(p.Standbys, p.Active) {
				t.Errorf("%s placed %+v, want an active and %d standbys elsewhere", id, p, want)
			}
		}
	})
}

// Task-set changes are planned after a spacing that follows the last
// plan's cost (taskReplanAfter, a table test in config_test.go): plans that
// cost nothing, as under the fake clock here, come at the next tick, so
// each submit is placed within two ticks, and never more than one a tick.
func TestTaskSetChangesArePlanned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		defer r.establish(1)()
		r.register("w1", 1)
		settle(200 * time.Millisecond)
		plans := r.svc.plansForTest()
		for i := range 20 {
			id := fmt.Sprintf("late%d", i)
			r.submit(id)
			r.beat("w1", nil)
			settle(200 * time.Millisecond)
			if p := r.placement(id); p.Active != "w1" {
				t.Fatalf("%s, submitted 200ms ago, is placed %+v", id, p)
			}
		}
		if n := r.svc.plansForTest() - plans; n > 40 {
			t.Fatalf("%d plans for 20 submits over 4 s of 100ms ticks", n)
		}
	})
}

// With no worker at all, submits cause no assignment writes, and the
// task set is not even copied.
func TestNoWorkersNoWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		defer r.establish(1)()
		for i := range 10 {
			r.submit(fmt.Sprintf("t%d", i))
			settle(300 * time.Millisecond)
		}
		if n := r.assignmentWrites(); n != 0 {
			t.Fatalf("%d assignment writes without any worker", n)
		}
		if n := r.copies.Load(); n != 0 {
			t.Fatalf("the task set was copied %d times without any worker", n)
		}
		r.register("w1", 1)
		settle(200 * time.Millisecond)
		if p := r.placement("t0"); p.Active != "w1" {
			t.Fatalf("t0 placed %+v once a worker joined", p)
		}
	})
}

func TestRequestsOffThePrimaryAndBadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submit("t0")
		if _, err := r.svc.Register("w1", 1, ""); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Register before Start: %v", err)
		}
		if _, err := r.svc.Heartbeat("w1", nil, nil, nil); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Heartbeat before Start: %v", err)
		}
		if _, _, err := r.svc.Workers(); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Workers before Start: %v", err)
		}
		revoke := r.establish(1)
		if _, err := r.svc.Heartbeat("w1", nil, nil, nil); !errors.Is(err, ErrUnknownWorker) {
			t.Fatalf("heartbeat without registration: %v", err)
		}
		r.register("w1", 1)
		bad := []struct {
			name string
			err  error
		}{
			{"bad id", func() error { _, err := r.svc.Register("w 1", 1, ""); return err }()},
			{"huge capacity", func() error { _, err := r.svc.Register("w2", assign.MaxCapacity+1, ""); return err }()},
			{"negative lag", func() error { _, err := r.svc.Heartbeat("w1", map[string]int64{"t0": -1}, nil, nil); return err }()},
			{"bad task id", func() error { _, err := r.svc.Heartbeat("w1", map[string]int64{"t/0": 1}, nil, nil); return err }()},
			{"negative load", func() error {
				_, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", Loads: map[string]int64{"t0": -1}})
				return err
			}()},
			{"bad load task id", func() error {
				_, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", Loads: map[string]int64{"t/0": 1}})
				return err
			}()},
			{"too many loads", func() error {
				loads := make(map[string]int64, MaxLags+1)
				for i := range MaxLags + 1 {
					loads[fmt.Sprintf("t%d", i)] = 1
				}
				_, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", Loads: loads})
				return err
			}()},
			{"bad label", func() error {
				_, err := r.svc.RegisterWith(Registration{Worker: "w2", Capacity: 1, Labels: map[string]string{"": "a"}})
				return err
			}()},
			{"bad fact", func() error { _, err := r.svc.Heartbeat("w1", nil, []Fact{{Kind: 9}}, nil); return err }()},
			{"long fact", func() error {
				_, err := r.svc.Heartbeat("w1", nil, []Fact{{Kind: FactNotify, Text: string(make([]byte, MaxFactText+1))}}, nil)
				return err
			}()},
		}
		for _, b := range bad {
			if !errors.Is(b.err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", b.name, b.err)
			}
		}
		// Bad input changed nothing: w2 has no session, w1 no lags.
		ws, _, _ := r.svc.Workers()
		if len(ws) != 1 || ws[0].ID != "w1" || len(ws[0].Lags) != 0 {
			t.Fatalf("sessions after bad input: %+v", ws)
		}
		// Facts: a pending reason on a task shows through Soft once w1 runs it.
		r.beat("w1", map[string]int64{"t0": 5}, Fact{Kind: FactSetPendingReason, Task: "t0", Text: "disk full"},
			Fact{Kind: FactNotify, Text: "hello"}, Fact{Kind: FactUpdate, Task: "nope", Text: "x"})
		settle(200 * time.Millisecond)
		soft, _, _, ok := r.svc.Soft()
		if !ok || soft["t0"].PendingReason != "disk full" || soft["t0"].Lags["w1"] != 5 {
			t.Fatalf("soft facts %+v", soft)
		}
		if ws, _, _ := r.svc.Workers(); ws[0].Notice != "hello" {
			t.Fatalf("notice %q", ws[0].Notice)
		}
		revoke()
		if _, err := r.svc.Heartbeat("w1", nil, nil, nil); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Heartbeat after the term: %v", err)
		}
		// A new term starts with no sessions.
		defer r.establish(2)()
		if _, err := r.svc.Heartbeat("w1", nil, nil, nil); !errors.Is(err, ErrUnknownWorker) {
			t.Fatalf("heartbeat in a new term: %v", err)
		}
	})
}

func TestTooManyWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		defer r.establish(1)()
		for i := range MaxWorkers {
			if _, err := r.svc.Register(fmt.Sprintf("w%d", i), 1, ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.svc.Register("one-more", 1, ""); !errors.Is(err, ErrTooManyWorkers) {
			t.Fatalf("register beyond the limit: %v", err)
		}
		if _, err := r.svc.Register("w7", 2, ""); err != nil {
			t.Fatalf("a known worker re-registering at the limit: %v", err)
		}
	})
}

func (s *Service) plansForTest() uint64 { return s.plans.Load() }

// The node runs one term at a time: Start while a term runs fails, and Run
// serves only the term that was started.
func TestOneTermAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		if err := r.svc.Run(context.Background(), 1); err == nil {
			t.Fatal("Run without Start succeeded")
		}
		revoke := r.establish(1)
		if err := r.svc.Start(2); err == nil {
			t.Fatal("Start while term 1 runs succeeded")
		}
		r.register("w1", 1)
		revoke()
		if _, err := r.svc.Heartbeat("w1", nil, nil, nil); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Heartbeat after the term: %v", err)
		}
		defer r.establish(2)()
	})
}

// TestRegisterLabels: a worker's labels (and its last heartbeat's loads)
// are kept in its session, shown by Workers and handed to the assignor; a registration with a bad label is
// refused as invalid and opens no session.
func TestRegisterLabels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.start(1)
		defer r.run(1)()
		for _, tc := range []struct {
			name   string
			labels map[string]string
			err    string
		}{
			{"bad key", map[string]string{"zo ne": "a"}, `label key "zo ne"`},
			{"bad value", map[string]string{"zone": "a b"}, `label "zone": value "a b"`},
			{"too many", manyLabels(assign.MaxLabels + 1), "exceed the maximum"},
			{"empty key", map[string]string{"": "a"}, `label key ""`},
		} {
			_, err := r.svc.RegisterWith(Registration{Worker: "bad", Capacity: 1, Labels: tc.labels})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want ErrInvalid with %q", tc.name, err, tc.err)
			}
		}
		if _, err := r.svc.RegisterWith(Registration{Worker: "w1", Capacity: 1, Labels: map[string]string{"zone": "a", "rack": "r1"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", Loads: map[string]int64{"t1": 40}}); err != nil {
			t.Fatal(err)
		}
		ws, _, _ := r.svc.Workers()
		if len(ws) != 1 || ws[0].ID != "w1" || assign.FormatLabels(ws[0].Labels) != "rack=r1,zone=a" {
			t.Fatalf("workers %+v", ws)
		}
		_, prev := r.fsm.Assignment()
		r.svc.mu.Lock()
		ts := r.svc.term
		r.svc.mu.Unlock()
		in, _, ok := r.svc.input(ts, prev)
		if !ok || len(in.Workers) != 1 || in.Workers[0].Labels["zone"] != "a" || in.Workers[0].Loads["t1"] != 40 {
			t.Fatalf("planner input %+v", in.Workers)
		}
		// A heartbeat without loads clears them.
		r.beat("w1", nil)
		if in, _, _ := r.svc.input(ts, prev); in.Workers[0].Loads != nil {
			t.Fatalf("loads after a heartbeat without: %v", in.Workers[0].Loads)
		}
		// Registering again with other labels replaces them.
		if _, err := r.svc.RegisterWith(Registration{Worker: "w1", Capacity: 1, Labels: map[string]string{"zone": "b"}}); err != nil {
			t.Fatal(err)
		}
		if ws, _, _ := r.svc.Workers(); assign.FormatLabels(ws[0].Labels) != "zone=b" {
			t.Fatalf("labels after a new registration %v", ws[0].Labels)
		}
	})
}

func manyLabels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

// TestWeightAndFreezeReachThePlanner: a task's weight and the placement
// freeze go into the planner's input, and a freeze or its end plans again.
func TestWeightAndFreezeReachThePlanner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submitTask(state.Task{ID: "heavy", Stateful: true, Weight: 40})
		r.submit("light")
		defer r.establish(1)()
		r.register("w1", 1)
		settle(time.Second)
		input := func() assign.Input {
			_, prev := r.fsm.Assignment()
			r.svc.mu.Lock()
			ts := r.svc.term
			r.svc.mu.Unlock()
			in, _, _ := r.svc.input(ts, prev)
			return in
		}
		in := input()
		weights := map[string]int{}
		for _, task := range in.Tasks {
			weights[task.ID] = task.Weight
		}
		if weights["heavy"] != 40 || weights["light"] != 0 || in.Frozen {
			t.Fatalf("weights %v, frozen %v", weights, in.Frozen)
		}
		for _, frozen := range []bool{true, false} {
			plans := r.svc.plans.Load()
			c := state.Command{Type: state.CmdSetPlacementFrozen, Frozen: frozen}
			if _, err := r.apply(context.Background(), c.Encode()); err != nil {
				t.Fatal(err)
			}
			settle(time.Second)
			if got := r.svc.plans.Load(); got == plans {
				t.Fatalf("no plan after the freeze became %v", frozen)
			}
			if in := input(); in.Frozen != frozen {
				t.Fatalf("planner input frozen %v, want %v", in.Frozen, frozen)
			}
		}
	})
}
