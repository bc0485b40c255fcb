package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/delaymgr"
	"github.com/xce/xce/state"
)

// applyTimeout bounds one assignment write; a write that times out is
// retried by a later plan (the generation check makes that safe).
const applyTimeout = 5 * time.Second

// retryAfter spaces plans after a failed write.
const retryAfter = time.Second

// Start opens the term's sessions before the node serves as PRIMARY, so
// that a worker's Register right after the role change is served; Run then
// runs the term (controller.Starter).
func (s *Service) Start(term uint64) error {
	now := time.Now()
	ts := &termState{
		term:        term,
		started:     now,
		settleUntil: now.Add(s.cfg.Settle),
		workers:     make(map[string]*session),
		away:        make(map[string]awayWorker),
		kick:        make(chan struct{}, 1),
		delays:      delaymgr.New(delaymgr.RealClock()),
		changed:     make(chan struct{}),
		done:        make(chan struct{}),
	}
	fresh := false
	if gen, _ := s.fsm.AssignmentGeneration(); gen == 0 {
		// Nothing placed yet: there is no placement a hasty plan could
		// disturb, so plan as soon as workers come; and no earlier primary
		// granted an active, so grants need not wait either.
		ts.settleUntil = now
		fresh = true
	}
	ts.grants = newGrantBook(now, fresh, s.cfg.SessionTimeout, s.cfg.GrantMargin)
	s.mu.Lock()
	old := s.term
	if old == nil {
		s.term = ts
	}
	s.mu.Unlock()
	if old != nil {
		ts.delays.Stop()
		return fmt.Errorf("term %d is still running", old.term)
	}
	s.log.Info().Uint64("term", term).Time("settle_until", ts.settleUntil).Msg("assignor started; waiting for workers to report before planning")
	return nil
}

// Run is the term's loop, after Start: it expires sessions, notices
// task-set changes, and plans when something changed, at most once per
// Tick. When ctx ends (the node leaves PRIMARY) it forgets the term's
// sessions and returns nil.
func (s *Service) Run(ctx context.Context, term uint64) error {
	s.mu.Lock()
	ts := s.term
	s.mu.Unlock()
	if ts == nil || ts.term != term {
		return fmt.Errorf("term %d was not started", term)
	}
	defer func() {
		s.mu.Lock()
		s.term = nil
		close(ts.done)
		s.mu.Unlock()
		ts.delays.Stop()
		s.log.Info().Uint64("term", term).Msg("assignor stopped")
	}()
	s.loop(ctx, ts)
	return nil
}

// loop plans until ctx ends.
func (s *Service) loop(ctx context.Context, ts *termState) {
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()

	var (
		dirty     = true
		taskDirty = false
		settled   = false
		lastPlan  time.Time
		notUntil  time.Time
		taskVer   = s.fsm.TaskVersion()
		drainVer  = s.fsm.DrainVersion()
		frozen    = false // as last planned
		_, asgVer = s.fsm.AssignmentGeneration()
		probe     *delaymgr.Handle
		addrs     addrSync
		// lastPlanTook is how long the last plan took, which spaces the
		// plans caused only by task-set changes.
		lastPlanTook time.Duration
	)
	defer func() {
		if probe != nil {
			probe.Cancel()
		}
	}()
	for {
		now := time.Now()
		if !settled && !now.Before(ts.settleUntil) {
			settled = true
			s.mu.Lock()
			n := len(ts.workers)
			s.mu.Unlock()
			s.log.Info().Int("workers", n).Msg("settled: planning from the workers that reported")
		}
		// Worker events, lag crossings and probes plan at the next tick; a
		// changed task set after a spacing that follows the last plan's
		// cost (Config.taskReplanAfter), so that a stream of submits into
		// a large registry costs at most a plan a second, not ten.
		due := dirty || (taskDirty && now.Sub(lastPlan) >= s.cfg.taskReplanAfter(lastPlanTook))
		if settled && due && !now.Before(notUntil) && now.Sub(lastPlan) >= s.cfg.Tick {
			dirty, taskDirty = false, false
			lastPlan = now
			if f := s.fsm.PlacementFrozen(); f != frozen {
				frozen = f
				s.logFrozen(f)
			}
			followup, retry := s.plan(ctx, ts)
			lastPlanTook = time.Since(now)
			if retry {
				dirty = true
				notUntil = time.Now().Add(retryAfter)
			}
			// A plan that left moves waiting is repeated after the probing
			// interval, in case no lag report crosses the threshold first.
			if probe != nil {
				probe.Cancel()
				probe = nil
			}
			if followup {
				probe = ts.delays.After(s.cfg.Assign.ProbingRebalanceInterval, func() {
					s.log.Info().Msg("probing rebalance due")
					kick(ts)
				})
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-ts.kick:
			dirty = true
		case <-tick.C:
			if s.expire(ts) {
				dirty = true
			}
			s.syncAddrs(ctx, ts, &addrs)
			if v := s.fsm.TaskVersion(); v != taskVer {
				taskVer = v
				taskDirty = true
			}
			// A drain changes the plan and the drained worker's answers;
			// an assignment changed by other means than this loop's
			// plans (a deleted task) changes answers too.
			if s.fsm.PlacementFrozen() != frozen {
				dirty = true
			}
			_, av := s.fsm.AssignmentGeneration()
			if dv := s.fsm.DrainVersion(); dv != drainVer || av != asgVer {
				dirty = dirty || dv != drainVer
				drainVer, asgVer = dv, av
				s.mu.Lock()
				signal(ts)
				s.mu.Unlock()
			}
		}
	}
}

// logFrozen says that the loop plans frozen from now on, or no longer.
func (s *Service) logFrozen(frozen bool) {
	if frozen {
		s.log.Info().Msg("placement frozen: planning for failures only (an active whose worker is gone or drained moves, new tasks are placed, missing standbys are created); nothing moves for balance")
		return
	}
	s.log.Info().Msg("placement unfrozen: planning for balance again")
}

// expire ends the sessions of silent workers, and the replacement delays
// of away workers that did not come back, and reports whether any ended.
// What an ended session held keeps counting for grants until the worker's
// lease has surely run out (SessionTimeout + GrantMargin after it was last
// heard); then it is forgotten. With a ReplaceDelay, a worker whose
// session ends is away until the delay has passed (see away).
func (s *Service) expire(ts *termState) bool {
	now := time.Now()
	var gone, away, replaced []string
	s.mu.Lock()
	for id, w := range ts.workers {
		if now.Sub(w.lastSeen) >= s.cfg.SessionTimeout {
			delete(ts.workers, id)
			gone = append(gone, id)
			ts.grants.expire(id)
			if s.away(ts, w, now) {
				away = append(away, id)
			}
		}
	}
	for id, a := range ts.away {
		if !now.Before(a.until) {
			delete(ts.away, id)
			replaced = append(replaced, id)
		}
	}
	if ts.grants.prune(now) || len(gone) > 0 {
		signal(ts)
	}
	if len(gone) > 0 || len(replaced) > 0 {
		ts.addrsDirty = true
	}
	n := len(ts.workers)
	s.mu.Unlock()
	slices.Sort(gone)
	for _, id := range gone {
		s.log.Warn().Str("worker", id).Dur("session_timeout", s.cfg.SessionTimeout).Int("workers", n).Msg("worker gone: no heartbeat within the session timeout")
	}
	for _, id := range away {
		s.log.Info().Str("worker", id).Time("until", now.Add(s.cfg.ReplaceDelay)).Dur("replace_delay", s.cfg.ReplaceDelay).
			Msg("worker away: its actives move to other copies; its standbys are kept for it until it reports again or the delay ends")
	}
	slices.Sort(replaced)
	for _, id := range replaced {
		s.log.Info().Str("worker", id).Dur("replace_delay", s.cfg.ReplaceDelay).Msg("worker did not come back within its replace delay: replacing its copies")
	}
	return len(gone) > 0 || len(replaced) > 0
}

// away records worker w, whose session has just ended (it expired, or
// the worker left), as away until
// ReplaceDelay has passed, and reports whether it did: not without a
// delay, not for a worker the assignor never planned for (it holds
// nothing), and not beyond MaxWorkers away workers (the worker's copies
// are then replaced at once). Callers hold s.mu.
func (s *Service) away(ts *termState, w *session, now time.Time) bool {
	if s.cfg.ReplaceDelay <= 0 || !w.reported {
		return false
	}
	if _, again := ts.away[w.id]; !again && len(ts.away) >= MaxWorkers {
		return false
	}
	ts.away[w.id] = awayWorker{labels: w.labels, until: now.Add(s.cfg.ReplaceDelay)}
	return true
}

// plan computes the next assignment from the sessions and the committed
// state and writes it when it differs. It reports whether moves wait
// (followup) and whether the write failed and should be retried.
func (s *Service) plan(ctx context.Context, ts *termState) (followup, retry bool) {
	gen, prev := s.fsm.Assignment()
	in, tasks, ok := s.input(ts, prev)
	if !ok {
		return false, false
	}

	start := time.Now()
	s.plans.Add(1)
	res, err := assign.Plan(in)
	if err != nil {
		// Inputs are validated on the way in; this is a bug, not a state
		// to retry quickly.
		s.log.Error().Err(err).Msg("planning failed")
		return false, true
	}
	s.mu.Lock()
	ts.followup = res.Followup
	s.mu.Unlock()
	s.noteWaits(ts, in, res)
	s.noteUnspread(ts, res.Unspread)

	delta := state.AssignmentDelta{Base: gen, Generation: gen + 1}
	for _, id := range slices.Sorted(maps.Keys(res.Assignment)) {
		np := res.Assignment[id]
		op, had := prev[id]
		if had && op.Active == np.Active && slices.Equal(op.Standbys, np.Standbys) && slices.Equal(op.Warmups, np.Warmups) {
			continue
		}
		delta.Set = append(delta.Set, state.Placement{Task: id, Active: np.Active, Standbys: np.Standbys, Warmups: np.Warmups})
	}
	for _, id := range slices.Sorted(maps.Keys(prev)) {
		if _, ok := res.Assignment[id]; !ok {
			delta.Removed = append(delta.Removed, id)
		}
	}
	if len(delta.Set) == 0 && len(delta.Removed) == 0 && s.fsm.DeletedSinceGeneration() == 0 {
		return res.Followup, false
	}
	cmd := state.Command{Type: state.CmdSetAssignment, Assign: delta}
	b := cmd.Encode()
	if len(b) > state.MaxAssignmentBytes {
		// Retrying would produce the same delta: wait for the next trigger.
		s.log.Error().Int("bytes", len(b)).Int("limit", state.MaxAssignmentBytes).Int("changed", len(delta.Set)).
			Msg("the assignment delta is too large for one log entry; not written")
		return res.Followup, false
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	r, err := s.apply(actx, b)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Uint64("generation", delta.Generation).Msg("writing the assignment failed; planning again shortly")
		}
		return res.Followup, true
	case r.Code == state.CodeConflict:
		s.log.Info().Str("why", r.Err).Msg("assignment changed under the plan; planning again")
		return res.Followup, true
	case r.Code != state.CodeOK:
		s.log.Error().Str("err", r.Err).Msg("the log refused the assignment")
		return res.Followup, true
	}
	s.mu.Lock()
	signal(ts)
	s.mu.Unlock()
	ev := s.log.Info().Uint64("generation", delta.Generation).Uint64("index", r.Index).
		Int("tasks", len(tasks)).Int("workers", len(in.Workers)).Int("changed", len(delta.Set)).
		Int("removed", len(delta.Removed)).Int("moves", len(res.Moves)).Bool("followup", res.Followup).
		Dur("plan_time", time.Since(start))
	ev.Msg("assignment committed")
	for _, m := range res.Moves {
		s.log.Debug().Str("task", m.Task).Str("kind", m.Kind).Str("from", m.From).Str("to", m.To).Msg("move")
	}
	return res.Followup, false
}

// input is what the assignor plans from: the workers that reported, with
// their labels and loads, the tasks with their weights, and the committed
// assignment prev. ok is false when there is nowhere to place anything and
// nothing placed to take back: the tasks stay PENDING without a write,
// and without copying the task set (a submit storm re-plans every second).
func (s *Service) input(ts *termState, prev map[string]state.Placement) (in assign.Input, tasks []state.Task, ok bool) {
	in = assign.Input{Config: s.cfg.Assign, Frozen: s.fsm.PlacementFrozen()}
	s.mu.Lock()
	for _, w := range ts.workers {
		if !w.reported {
			continue
		}
		in.Workers = append(in.Workers, assign.Worker{ID: w.id, Capacity: w.capacity, Lags: maps.Clone(w.lags),
			Drained: w.leaving || s.fsm.IsDrained(w.id), Labels: w.labels, Loads: w.loads})
	}
	for id, a := range ts.away {
		if w := ts.workers[id]; w != nil && w.reported {
			continue // back (Beat forgets it; this is belt and braces)
		}
		// It runs nothing and reports no lag: its standbys are kept for
		// it, its actives go to other copies.
		in.Workers = append(in.Workers, assign.Worker{ID: id, Capacity: 0, Labels: a.labels, Away: true,
			Drained: s.fsm.IsDrained(id)})
	}
	s.mu.Unlock()
	if len(in.Workers) == 0 && !anyCopy(prev) {
		return in, nil, false
	}
	tasks, _ = s.fsm.AllTasks()
	in.Tasks = make([]assign.Task, len(tasks))
	for i, t := range tasks {
		// A submit asking for more than the assignor's maximum is refused,
		// but the log format takes larger counts: such a task gets the
		// maximum rather than failing every plan.
		k := min(t.StandbyReplicas, assign.MaxStandbyReplicas)
		in.Tasks[i] = assign.Task{ID: t.ID, Stateful: t.Stateful, StandbyReplicas: int(k), Weight: int(t.Weight)}
	}
	in.Previous = make(assign.Assignment, len(prev))
	for id, p := range prev {
		in.Previous[id] = assign.Placement{Active: p.Active, Standbys: p.Standbys, Warmups: p.Warmups}
	}
	return in, tasks, true
}

// anyCopy reports whether an assignment places any copy on a worker.
func anyCopy(a map[string]state.Placement) bool {
	for _, p := range a {
		if p.Active != "" || len(p.Standbys) > 0 || len(p.Warmups) > 0 {
			return true
		}
	}
	return false
}
