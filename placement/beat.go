package placement

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Beat is one heartbeat of a worker (docs/design.md, "At most one active",
// and "Draining and leaving").
type Beat struct {
	Worker string
	// Seq numbers the worker's heartbeats, 1, 2, 3… for its process's life
	// (0: not numbered).
	Seq  uint64
	Lags map[string]int64
	// Loads is the load the worker reports for each copy it holds (any
	// unit, the same across workers); optional, bounded like Lags. The
	// assignor balances it with assign.BalanceLoad.
	Loads   map[string]int64
	Facts   []Fact
	Running []string
	// Wait asks the primary to hold the answer, for up to Wait (at most
	// Config.MaxHold), while it is the same as the answer the heartbeat
	// numbered AckSeq got: the worker then learns of a change within a
	// round trip of it. Only a numbered heartbeat is held.
	Wait   time.Duration
	AckSeq uint64
	// Leaving: the worker is stopping; its actives move to other workers
	// and its session ends once it runs and is assigned none. LeaveNow: it
	// stopped every active (Running is empty) and leaves at once.
	Leaving, LeaveNow bool
}

// validate checks a heartbeat's fields, each error wrapping ErrInvalid.
// checkPerTask checks a heartbeat's per-task numbers (lags, loads): at
// most MaxLags, valid task ids, nothing negative.
func checkPerTask(field, what string, m map[string]int64) error {
	if len(m) > MaxLags {
		return fmt.Errorf("%w: %d %s (at most %d)", ErrInvalid, len(m), field, MaxLags)
	}
	for _, t := range slices.Sorted(maps.Keys(m)) {
		if !validID(t) {
			return fmt.Errorf("%w: %s: task id %q", ErrInvalid, field, t)
		}
		if m[t] < 0 {
			return fmt.Errorf("%w: %s: negative %s %d for task %q", ErrInvalid, field, what, m[t], t)
		}
	}
	return nil
}

func (b *Beat) validate() error {
	if !validID(b.Worker) {
		return fmt.Errorf("%w: worker_id %q: must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalid, b.Worker)
	}
	if err := checkPerTask("lags", "lag", b.Lags); err != nil {
		return err
	}
	if err := checkPerTask("loads", "load", b.Loads); err != nil {
		return err
	}
	if len(b.Running) > MaxLags {
		return fmt.Errorf("%w: %d running tasks (at most %d)", ErrInvalid, len(b.Running), MaxLags)
	}
	for _, t := range b.Running {
		if !validID(t) {
			return fmt.Errorf("%w: running: task id %q", ErrInvalid, t)
		}
	}
	if b.LeaveNow && (!b.Leaving || len(b.Running) > 0) {
		return fmt.Errorf("%w: leave_now needs leaving and nothing running (%d running)", ErrInvalid, len(b.Running))
	}
	if len(b.Facts) > MaxFacts {
		return fmt.Errorf("%w: %d facts (at most %d)", ErrInvalid, len(b.Facts), MaxFacts)
	}
	for i, f := range b.Facts {
		if len(f.Text) > MaxFactText {
			return fmt.Errorf("%w: facts[%d]: text longer than %d bytes", ErrInvalid, i, MaxFactText)
		}
		switch f.Kind {
		case FactNotify:
		case FactUpdate, FactSetPendingReason, FactClearPendingReason:
			if !validID(f.Task) {
				return fmt.Errorf("%w: facts[%d]: task_id %q", ErrInvalid, i, f.Task)
			}
		default:
			return fmt.Errorf("%w: facts[%d]: unknown kind %d", ErrInvalid, i, f.Kind)
		}
	}
	return nil
}

// Heartbeat renews a session, records the worker's lags, facts and the
// actives it runs, and answers with the worker's copies in the committed
// assignment, its assigned actives split into granted and pending.
func (s *Service) Heartbeat(id string, lags map[string]int64, facts []Fact, running []string) (Answer, error) {
	return s.HeartbeatSeq(id, 0, lags, facts, running)
}

// HeartbeatSeq is Heartbeat for the heartbeat numbered seq of its session
// (0: not numbered): one numbered at or below the last processed is
// refused with ErrStale and changes nothing.
func (s *Service) HeartbeatSeq(id string, seq uint64, lags map[string]int64, facts []Fact, running []string) (Answer, error) {
	return s.Beat(context.Background(), Beat{Worker: id, Seq: seq, Lags: lags, Facts: facts, Running: running})
}

// Beat processes one heartbeat: it renews the session, records the lags,
// facts and running actives, notes a worker that is leaving, and answers
// with the worker's copies, holding the answer while it would not change
// when the heartbeat asks (Beat.Wait). A leaving worker that runs and is
// assigned no active (or leaves now) gets Answer.Left, its session ended.
// ctx ends a held heartbeat (ctx.Err()); a heartbeat superseded by a later
// one of its session while held returns ErrStale.
func (s *Service) Beat(ctx context.Context, b Beat) (Answer, error) {
	if err := b.validate(); err != nil {
		return Answer{}, err
	}
	s.mu.Lock()
	ts, err := s.current()
	if err != nil {
		s.mu.Unlock()
		return Answer{}, err
	}
	w, ok := ts.workers[b.Worker]
	if !ok {
		s.mu.Unlock()
		return Answer{}, fmt.Errorf("%w: worker %q has no session with this primary", ErrUnknownWorker, b.Worker)
	}
	if b.Seq != 0 {
		if b.Seq <= w.seq {
			s.mu.Unlock()
			return Answer{}, fmt.Errorf("%w: worker %q sent heartbeat %d after %d", ErrStale, b.Worker, b.Seq, w.seq)
		}
		w.seq = b.Seq
		if w.held != nil {
			// The heartbeat held before this one is abandoned.
			close(w.held)
			w.held = nil
		}
	}
	now := time.Now()
	w.lastSeen = now
	crossed := s.crossed(w.lags, b.Lags)
	w.lags = maps.Clone(b.Lags)
	if w.lags == nil {
		w.lags = map[string]int64{}
	}
	w.loads = nil
	if len(b.Loads) > 0 {
		w.loads = maps.Clone(b.Loads)
	}
	s.recordFacts(w, b.Facts)
	first := !w.reported
	w.reported = true
	_, wasAway := ts.away[w.id]
	if first {
		// Back within its replace delay: planned as live from now on.
		delete(ts.away, w.id)
	}
	startsLeaving := b.Leaving && !w.leaving
	w.leaving = w.leaving || b.Leaving
	c, epochs := s.copiesAndEpochs(w.id)
	if b.Leaving && (b.LeaveNow || len(b.Running) == 0 && len(c.Actives) == 0) {
		s.leave(ts, w, now, b.LeaveNow, c)
		s.mu.Unlock()
		kick(ts)
		return Answer{Copies: Copies{Generation: c.Generation}, Left: true}, nil
	}
	d, released := ts.grants.report(w.id, now, b.Running, c.Actives)
	if released {
		signal(ts)
	}
	a := s.answer(w, c, epochs, d)
	if b.Seq != 0 && b.Wait > 0 && s.cfg.MaxHold > 0 && b.AckSeq != 0 && b.AckSeq == w.answeredSeq && sameAnswer(a, w.answered) {
		a, err = s.hold(ctx, ts, w, b.Seq, a, d.Next, min(b.Wait, s.cfg.MaxHold))
	}
	if err == nil && b.Seq != 0 {
		w.answered, w.answeredSeq = a, b.Seq
	}
	s.mu.Unlock()
	if startsLeaving {
		s.log.Info().Str("worker", w.id).Strs("actives", c.Actives).Msg("worker leaving: its actives move to other workers, each once a copy there has caught up")
	}
	if first && wasAway {
		s.log.Info().Str("worker", w.id).Msg("worker back within its replace delay: no longer away")
	}
	if startsLeaving || crossed != "" || first {
		if crossed != "" {
			s.log.Debug().Str("worker", w.id).Str("task", crossed).Msg("a lag crossed the acceptable recovery lag: planning")
		}
		kick(ts)
	}
	return a, err
}

// recordFacts keeps a heartbeat's facts in its session. Callers hold s.mu.
func (s *Service) recordFacts(w *session, facts []Fact) {
	for _, f := range facts {
		switch f.Kind {
		case FactNotify:
			w.notice = f.Text
		case FactUpdate:
			if _, exists := s.fsm.Task(f.Task); exists {
				w.updates[f.Task] = f.Text
			}
		case FactSetPendingReason:
			if _, exists := s.fsm.Task(f.Task); exists {
				w.pending[f.Task] = f.Text
			}
		case FactClearPendingReason:
			delete(w.pending, f.Task)
		}
	}
}

// leave ends a leaving worker's session: it runs no active (it said so),
// so what it held may be granted elsewhere at once, and the next plan
// places its copies elsewhere. Callers hold s.mu.
func (s *Service) leave(ts *termState, w *session, now time.Time, early bool, c Copies) {
	ts.grants.leave(w.id, now)
	delete(ts.workers, w.id)
	ts.addrsDirty = true
	signal(ts)
	ev := s.log.Info().Str("worker", w.id).Int("workers", len(ts.workers))
	if s.away(ts, w, now) {
		// A planned restart: its standbys are kept for it.
		ev = ev.Time("away_until", now.Add(s.cfg.ReplaceDelay))
	}
	if early && len(c.Actives) > 0 {
		// Its drain deadline passed first: the tasks it still had go to
		// the best candidates the next plan finds, from where they are.
		ev = s.log.Warn().Str("worker", w.id).Int("workers", len(ts.workers)).Strs("actives_not_handed_over", c.Actives)
	}
	ev.Msg("worker left")
}

// answer builds a heartbeat's answer from the worker's copies, the epochs
// of the assignment they come from, and the decision on its actives.
// Callers hold s.mu.
func (s *Service) answer(w *session, c Copies, epochs map[string]uint64, d GrantDecision) Answer {
	a := Answer{Copies: c, Epochs: map[string]uint64{}, ActiveLease: s.cfg.ActiveLease(), Drained: s.fsm.IsDrained(w.id)}
	a.Actives = nil
	for _, t := range c.Actives {
		if d.Granted[t] {
			a.Actives = append(a.Actives, t)
		} else {
			a.PendingActives = append(a.PendingActives, t)
		}
	}
	for _, l := range [][]string{c.Actives, c.Standbys, c.Warmups} {
		for _, t := range l {
			a.Epochs[t] = epochs[t]
		}
	}
	return a
}

// sameAnswer reports whether two answers tell a worker the same: the
// generation aside, which changes with every other worker's moves too.
func sameAnswer(a, b Answer) bool {
	return slices.Equal(a.Actives, b.Actives) && slices.Equal(a.PendingActives, b.PendingActives) &&
		slices.Equal(a.Standbys, b.Standbys) && slices.Equal(a.Warmups, b.Warmups) &&
		maps.Equal(a.Epochs, b.Epochs) && a.ActiveLease == b.ActiveLease && a.Left == b.Left && a.Drained == b.Drained
}

// hold waits until the answer of worker w's heartbeat seq differs from a,
// for at most wait, deciding its grants again whenever something changed
// (signal) or time alone can grant one (next), and returns the answer then.
// Callers hold s.mu; it is released while waiting. A later heartbeat of the
// session or a registration ends the wait with ErrStale, the term's end
// with ErrNotServing, ctx with its error.
func (s *Service) hold(ctx context.Context, ts *termState, w *session, seq uint64, a Answer, next time.Time, wait time.Duration) (Answer, error) {
	deadline := time.Now().Add(wait)
	stop := make(chan struct{})
	w.held = stop
	defer func() {
		if w.held == stop {
			w.held = nil
		}
	}()
	for {
		wake := deadline
		if !next.IsZero() && next.Before(wake) {
			wake = next
		}
		changed := ts.changed
		s.mu.Unlock()
		timer := time.NewTimer(time.Until(wake))
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-stop:
			err = fmt.Errorf("%w: worker %q sent a later heartbeat", ErrStale, w.id)
		case <-ts.done:
			err = ErrNotServing
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
		s.mu.Lock()
		switch {
		case err != nil:
			return Answer{}, err
		case s.term != ts:
			return Answer{}, ErrNotServing
		case ts.workers[w.id] != w || w.seq != seq:
			return Answer{}, fmt.Errorf("%w: worker %q registered or sent a later heartbeat", ErrStale, w.id)
		}
		now := time.Now()
		c, epochs := s.copiesAndEpochs(w.id)
		d, released := ts.grants.decide(w.id, now, c.Actives)
		if released {
			signal(ts)
		}
		b := s.answer(w, c, epochs, d)
		if !sameAnswer(a, b) || !now.Before(deadline) {
			return b, nil
		}
		next = d.Next
	}
}

// signal wakes every heartbeat held in the term: something happened that
// may change an answer (an assignment, a grant book that let a task go, a
// drain). Callers hold s.mu.
func signal(ts *termState) {
	close(ts.changed)
	ts.changed = make(chan struct{})
}

// crossed returns a task whose caught-up state differs between two lag
// reports ("" when none does).
func (s *Service) crossed(before, after map[string]int64) string {
	limit := s.cfg.Assign.AcceptableRecoveryLag
	up := func(m map[string]int64, t string) bool {
		l, ok := m[t]
		return ok && l <= limit
	}
	for t := range after {
		if up(before, t) != up(after, t) {
			return t
		}
	}
	for t := range before {
		if up(before, t) != up(after, t) {
			return t
		}
	}
	return ""
}
