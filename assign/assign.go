// Package assign places stateful and stateless tasks on worker instances with
// standby replicas and warm-ups, in the spirit of Kafka Streams'
// high-availability task assignor (KIP-441).
//
// Plan is a pure, deterministic function: the same Input always gives the same
// Result, whatever the order of Tasks, Workers or map iteration, so that every
// controller node (and every test) computes the same assignment from the same
// replicated facts.
//
// # Vocabulary
//
// A worker is caught up on a task when it reports a lag of at most
// Config.AcceptableRecoveryLag for it (equality counts as caught up). A task
// missing from Worker.Lags means the worker holds no state for it (infinite
// lag). Stateless tasks need no state: every worker is caught up on them.
//
// Every task has one active copy. A stateful task also has standby copies
// (on distinct workers other than the active's) and possibly warm-ups: extra, temporary copies that restore state
// on a worker the balanced target wants to use but that is not caught up yet.
// A worker never holds two copies of one task.
//
// # Balance
//
// Capacity is a relative weight (Kafka's number of stream threads), not a hard
// limit. For a class of N items spread over workers with capacities c(w) and
// total capacity C, a worker's count n(w) is balanced when
//
//	floor(N·c(w)/C) <= n(w) <= ceil(N·c(w)/C).
//
// Because floor(N·c/C)/c >= floor(N/C) and ceil(N·c/C)/c <= ceil(N/C), every
// balanced worker carries between floor(N/C) and ceil(N/C) items per unit of
// capacity, so two workers differ by at most one item per unit of capacity.
// The band (rather than one exact apportionment) is what makes the assignor
// sticky: any placement inside the band is left alone. A worker with capacity
// 0 is drained (its band is [0,0]); when every worker has capacity 0 they all
// count as capacity 1. Three classes are balanced, in this order:
//
//  1. stateful actives (N = number of stateful tasks);
//  2. stateful copies, actives plus standbys (N = the sum over stateful
//     tasks of 1 + the task's standbys);
//  3. total load, every active plus every standby (stateless tasks fill in).
//
// The target reaches class 1 unless moves wait for warm-up slots (then
// Result.Followup is set and later plans continue). Classes 2 and 3 are
// reached when the rule "no worker holds two copies of a task" allows (a
// worker cannot take a standby of a task it already holds, and only
// stateless tasks move in class 3); otherwise the target is locally
// optimal: no single allowed move from a worker above its ceiling (or above
// its floor) to a worker below its ceiling (or below its floor) remains.
//
// # Weights, spread, away workers, freezing, load
//
// Items weigh their task's Weight (at least 1): counts above are sums of
// weights, and each band widens by the class's heaviest weight less one
// on both sides, so that with unit weights nothing changes and with
// weights every worker ends within one task's weight of its share. A
// move is made only when the donor stays at or above its floor and the
// receiver at or below its ceiling. Config.SpreadBy keys come before
// balance: new standbys go to workers adding the most values, a repair
// pass moves standbys to spread (after the actives' balancing, which may
// put an active beside a standby of the same value), and no standby's
// balancing move spreads worse
// (see Shortfall for what cannot be met). Away workers keep their
// standbys (Worker.Away, Config.MinCopies), Input.Frozen handles only
// failures, and BalanceLoad balances the actives by reported load; each
// is described where it is declared, and in docs/design.md, "The
// assignor".
//
// Each stateful task gets min(s, E-1) standbys, s being its own
// Task.StandbyReplicas when above 0 and Config.NumStandbyReplicas otherwise,
// and E the number of workers with capacity above 0: that is "where capacity
// allows".
//
// # Movement
//
// Plan works in these steps:
//
//  1. Where each stateful active can run now: on its previous worker when
//     that one is caught up; otherwise on a caught-up worker (a caught-up
//     previous standby first, then a caught-up warm-up, then any caught-up
//     worker, the least loaded first); when nobody is caught up, on the most
//     caught-up worker (ties: the previous active, then the least loaded,
//     then id order).
//  2. The target actives: that placement moved into the band with the
//     fewest moves (above ceiling to below floor first, then above ceiling
//     to below ceiling, then above floor to below floor). A receiving worker
//     takes first the tasks it is caught up on (those it holds a standby of
//     first: a swap costs nothing), then tasks nobody is caught up on where
//     it is among the most caught up, then a task it is warming up, then a
//     task it holds a lagging standby of, then the highest task of the most
//     loaded donor. A move onto a worker that is not caught up takes one of
//     the Config.MaxWarmupReplicas warm-up slots (none when the worker holds
//     a standby of the task, which restores instead); with no slot left the
//     move is not planned and Result.Followup is set.
//  3. The target standbys: previous standbys stay; when a standby is
//     promoted, the old active's worker takes its slot (a swap); surplus
//     standbys go (lagging, then loaded ones first); missing ones go to a
//     worker that held the active, then to caught-up workers, then to the
//     most caught-up workers with state, then to the least loaded. Then the
//     copies are balanced like the actives; moving a running, caught-up
//     copy onto a worker that is not caught up takes a warm-up slot too.
//     The standbys of a task whose active move waits (step 4) stay put.
//     Last, a new target copy (its worker held no copy of the task in
//     Previous) on a worker that is not caught up moves to the most
//     caught-up eligible worker when every worker stays inside its band in
//     each class the copy counts in (actives for an active, copies for
//     both) and, for an active, a warm-up slot allows: of equally balanced
//     placements, the one with the least to restore, as Kafka Streams picks
//     the most caught-up client. So a new standby or warm-up never lands on
//     a worker with no state while one a little behind would do as well.
//  4. The output is the target, except that a move onto a worker that is not
//     caught up waits: the copy stays where it holds state and the target
//     worker warms up, as a warm-up or, when the target turns the old
//     active into a standby, simply as that standby (roles swapped back).
//     At most MaxWarmupReplicas warm-ups exist; planned ones first, then
//     those already running, then actives before standbys, then by id.
//  5. Stateless tasks stay where they ran, new ones go to the least loaded
//     workers, and then they move to balance the total load.
//
// A warm-up that has caught up is used at once: its worker is a caught-up
// destination, so the next Plan (for example when the lag report crosses
// AcceptableRecoveryLag) moves the copy there without a probing interval.
//
// A round's target depends on where the previous standbys and warm-ups are,
// since they are preferred destinations; fed back its own output, a round
// can pick different but equally good destinations. Plan therefore repeats
// steps 1-5 from its own output (same lags) until nothing changes (at most
// a few rounds) and returns that fixed point, with Moves relative to
// Previous: a controller that re-plans on every event does not flap copies.
package assign

import (
	"fmt"
	"math"
)

// MaxCapacity bounds Worker.Capacity so that capacity arithmetic can never
// overflow; a relative weight never needs more.
const MaxCapacity = 1 << 20

// Move kinds, the values of Move.Kind.
const (
	KindActive  = "active"
	KindStandby = "standby"
	KindWarmup  = "warmup"
)

// Task is a unit of work to place. Only stateful tasks have state to restore,
// so only they get standbys and warm-ups and care about lags.
type Task struct {
	ID       string
	Stateful bool
	// StandbyReplicas, when above 0, replaces Config.NumStandbyReplicas for
	// this task, so that a task whose state is costly to rebuild can keep
	// more caught-up copies than the rest; 0 means the config's value. At
	// most MaxStandbyReplicas; a stateless task ignores it.
	StandbyReplicas int
	// Weight is what the task costs relative to others (0 counts as 1, at
	// most MaxWeight): the balance is by weight over capacity, so a task of
	// weight 10 counts as ten of weight 1 (see the package doc).
	Weight int
}

// Worker is a live worker instance. Capacity is its relative weight (see the
// package doc); Lags maps task id to the worker's reported lag for that task,
// and a task missing from Lags means the worker has no state for it.
//
// A Drained worker (an operator drained it, or it is leaving) runs no
// active and gets no new copy: its actives move to other workers, each as
// soon as one is caught up (a warm-up first otherwise), as they would from a
// worker of capacity 0. Unlike capacity 0, the standbys it holds stay, on top
// of the standbys their tasks get elsewhere (they do not count toward them),
// until it is undrained or gone: they are a caught-up copy to come back to.
type Worker struct {
	ID       string
	Capacity int
	Lags     map[string]int64
	Drained  bool
	// Labels say where the worker runs (zone, rack, host, ...); the
	// copies of a task spread over the values of Config.SpreadBy's keys.
	// A worker without a key counts as having the value "".
	Labels map[string]string
	// Loads maps task id to the load the worker reports for its copy of
	// the task (any unit, the same across workers); used when
	// Config.Balance is BalanceLoad.
	Loads map[string]int64
	// Away marks a worker whose session ended less than the replacement
	// delay ago: it runs nothing (its actives go to other copies at once),
	// but its standbys, and the standby slot of an active it held, are
	// kept for it and not re-created elsewhere, unless fewer than
	// Config.MinCopies copies of a task would be left on live workers.
	Away bool
}

// Placement says where the copies of one task run. Active is "" only when
// there is no worker at all. Standbys and Warmups are sorted by worker id
// (nil when empty) so that placements compare with ==-like equality.
type Placement struct {
	Active   string
	Standbys []string
	Warmups  []string
}

// Assignment maps task id to its placement.
type Assignment map[string]Placement

// Input is everything Plan depends on. Previous is the assignment in force;
// entries for unknown tasks and references to unknown (departed) workers are
// dropped silently, because workers leave and tasks are deleted between plans.
type Input struct {
	Config   Config
	Tasks    []Task
	Workers  []Worker
	Previous Assignment
	// Frozen holds placement still (xce placement freeze): only failures
	// are handled. An active whose worker is gone or drained moves to a
	// copy elsewhere, new tasks are placed, missing standbys are created;
	// no copy moves for balance and no new warm-up starts.
	Frozen bool
}

// Move is one change of one copy of one task between the (cleaned) Previous
// assignment and the new one, so that callers can log, count and apply
// changes without diffing assignments themselves.
//
// Kind is KindActive, KindStandby or KindWarmup. For one task and kind, the
// workers that lost a copy of that kind and those that gained one are each
// sorted by id and paired in order: a pair is a move (From and To set), an
// unpaired gain is an addition (From ""), an unpaired loss a removal (To "").
// An active never disappears while a worker exists, so an active Move always
// has To set; its From is "" for a new task or when the previous active's
// worker left. A standby promoted to active shows as an active move To that
// worker plus a standby move (or removal) From it.
type Move struct {
	Task string
	From string
	To   string
	Kind string
}

// Result is the outcome of one Plan.
type Result struct {
	// Assignment has one entry per input task.
	Assignment Assignment
	// Followup is true when the assignment is not yet balanced because some
	// move waits for a worker to catch up or for a warm-up slot; the caller
	// should plan again after Config.ProbingRebalanceInterval (or as soon as
	// a lag crosses Config.AcceptableRecoveryLag).
	Followup bool
	// Moves lists the changes from the cleaned Previous, sorted by task id,
	// then kind (active, standby, warmup), then From, then To.
	Moves []Move
	// Unspread lists, by task id then key, where a task's copies could
	// not take as many distinct values of a Config.SpreadBy key as the
	// workers offer (see Shortfall).
	Unspread []Shortfall
}

// Shortfall is one task whose copies (active and standbys) in the result
// span fewer distinct values of a spread key than they could: Want is
// min(copies, distinct values among the workers that may hold a copy),
// Have the values they span now. Reason says why: "waits" (the plan has
// moves waiting for warm-ups or warm-up slots, Result.Followup, and later
// plans go on), "frozen" (Input.Frozen), or "blocked" (no allowed move
// spreads them further: a key earlier in Config.SpreadBy would lose a
// value, or the workers that would spread them already hold a copy).
type Shortfall struct {
	Task   string
	Key    string
	Have   int
	Want   int
	Reason string
}

// Plan computes the next assignment. It returns an error, naming the
// offending item, for an invalid config, an empty or duplicate task or worker
// id, a negative or too large StandbyReplicas or Weight, a negative or too
// large capacity, a negative lag or load, or a bad label.
func Plan(in Input) (Result, error) {
	if err := in.Config.Validate(); err != nil {
		return Result{}, fmt.Errorf("assign: invalid config: %w", err)
	}
	if err := validateInput(in); err != nil {
		return Result{}, err
	}
	p := newPlanner(in)
	return p.run(), nil
}

// validateInput checks ids, standby counts, capacities and lags, reporting
// the first problem in input order (and, within one worker's lags, the
// smallest task id) so that the error is deterministic.
func validateInput(in Input) error {
	seenT := make(map[string]struct{}, len(in.Tasks))
	for i, t := range in.Tasks {
		if t.ID == "" {
			return fmt.Errorf("assign: task at index %d: empty id", i)
		}
		if _, dup := seenT[t.ID]; dup {
			return fmt.Errorf("assign: task %q: duplicate id", t.ID)
		}
		seenT[t.ID] = struct{}{}
		if t.StandbyReplicas < 0 {
			return fmt.Errorf("assign: task %q: negative standby replicas %d", t.ID, t.StandbyReplicas)
		}
		if t.StandbyReplicas > MaxStandbyReplicas {
			return fmt.Errorf("assign: task %q: standby replicas %d exceed the maximum %d", t.ID, t.StandbyReplicas, MaxStandbyReplicas)
		}
		if t.Weight < 0 || t.Weight > MaxWeight {
			return fmt.Errorf("assign: task %q: weight %d is outside 0..%d", t.ID, t.Weight, MaxWeight)
		}
	}
	seenW := make(map[string]struct{}, len(in.Workers))
	for i, w := range in.Workers {
		if w.ID == "" {
			return fmt.Errorf("assign: worker at index %d: empty id", i)
		}
		if _, dup := seenW[w.ID]; dup {
			return fmt.Errorf("assign: worker %q: duplicate id", w.ID)
		}
		seenW[w.ID] = struct{}{}
		if w.Capacity < 0 {
			return fmt.Errorf("assign: worker %q: negative capacity %d", w.ID, w.Capacity)
		}
		if w.Capacity > MaxCapacity {
			return fmt.Errorf("assign: worker %q: capacity %d exceeds the maximum %d", w.ID, w.Capacity, MaxCapacity)
		}
		bad, badLag, found := "", int64(0), false
		for id, lag := range w.Lags {
			if lag < 0 && (!found || id < bad) {
				bad, badLag, found = id, lag, true
			}
		}
		if found {
			return fmt.Errorf("assign: worker %q: negative lag %d for task %q", w.ID, badLag, bad)
		}
		bad, badLag, found = "", 0, false
		for id, l := range w.Loads {
			if l < 0 && (!found || id < bad) {
				bad, badLag, found = id, l, true
			}
		}
		if found {
			return fmt.Errorf("assign: worker %q: negative load %d for task %q", w.ID, badLag, bad)
		}
		if err := CheckLabels(w.Labels); err != nil {
			return fmt.Errorf("assign: worker %q: %w", w.ID, err)
		}
	}
	return nil
}

// infLag stands for "no state": a missing lag, and also a reported
// math.MaxInt64, which cannot be told apart from it.
const infLag = math.MaxInt64
