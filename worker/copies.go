package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// Copy is one copy of a task the worker holds.
type Copy struct {
	Task string
	Role Role
	// Epoch is the task epoch when the copy started: it grows each time
	// the task gets a new active worker. An active fences its downstream
	// writes with it; a new epoch for an active is a new Copy.
	Epoch uint64
}

// Handler runs the copies a worker holds.
type Handler interface {
	// Run holds copy c until ctx is cancelled — the copy was taken away or
	// changed role (a new Copy follows), or, for an active, the worker's
	// lease ran out — and returns once it has stopped: an active must
	// write nothing after Run returns. report sets the copy's lag (records
	// behind), sent with the next heartbeat. A Run that returns before
	// ctx is cancelled has failed: the library logs its error and runs
	// the copy again after a backoff.
	Run(ctx context.Context, c Copy, report func(lag int64)) error
}

// Lagger is implemented by a Handler that knows the lag of every task it
// keeps state for, also of tasks it no longer holds (the Simulator). The
// library then sends Lags, called right before each heartbeat, in place of
// what report set: the assignor brings a task back where its state is
// still warm.
type Lagger interface {
	Lags() map[string]int64
}

// Loader is implemented by a Handler that knows what each copy it holds
// costs (records per second, CPU, bytes: any unit, the same on every
// worker). The library sends Loads, called right before each heartbeat,
// as HeartbeatRequest.loads; the assignor balances the actives' loads
// when the cluster runs with assignor.balance: load. A Handler without it
// reports none.
type Loader interface {
	Loads() map[string]int64
}

// ErrFenced is what Fence returns once a copy must not act any more: the
// copy was taken away or changed role, or the worker is stopping.
var ErrFenced = errors.New("the copy may not act any more")

// ErrLeaseExpired is what Fence returns for an active once the worker's
// lease has run out: no heartbeat acknowledged for active_lease_ms. It
// wraps ErrFenced.
var ErrLeaseExpired = fmt.Errorf("%w: the active lease ran out", ErrFenced)

// Causes of a copy's cancellation (context.Cause of its ctx); all wrap
// ErrFenced.
var (
	errTakenAway = fmt.Errorf("%w: the copy was taken away or changed role", ErrFenced)
	errStopping  = fmt.Errorf("%w: the worker is stopping", ErrFenced)
)

type copyKey struct{}

// Fence reports whether the copy whose Run got ctx may still act: nil
// while the worker holds the copy and, for an active, while its lease
// holds; an error wrapping ErrFenced (ErrLeaseExpired for a lease that ran
// out) once it must not. Call it right before every externally visible
// action (a commit, an answer to a client). It checks the latest heartbeat
// answer and the clock, so it says no before ctx is cancelled. An action
// started just inside the lease has the margin between the lease and the
// session timeout to finish; downstream writes are fenced with the epoch
// as well.
func Fence(ctx context.Context) error {
	r, _ := ctx.Value(copyKey{}).(*copyRun)
	if r == nil {
		return fmt.Errorf("%w: not a copy's context", ErrFenced)
	}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); errors.Is(cause, ErrFenced) {
			return cause
		}
		return errStopping
	}
	return r.w.fence(r, time.Now())
}

// copyRun is one Run of a copy.
type copyRun struct {
	w        *Worker
	c        Copy
	started  time.Time
	cancel   context.CancelCauseFunc
	stopping bool          // cancelled; waiting for Run to return
	done     chan struct{} // closed once Run returned
	err      error         // what Run returned (read after done)
}

// retry is a copy whose Run returned on its own, waiting to run again.
type retry struct {
	c  Copy
	at time.Time
	b  backoff.Backoff
}

// answer is what the last acknowledged heartbeat said.
type answer struct {
	known                               bool
	gen                                 uint64
	actives, pending, standbys, warmups []string
	epochs                              map[string]uint64
}

// state is the worker's view of its copies, under Worker.mu.
type state struct {
	resp answer
	// granted are the actives the worker may start: those of the last
	// answer, less those a heartbeat sent since did not list as running
	// (the primary may have granted them elsewhere on hearing that).
	granted map[string]bool
	ackSent time.Time     // send time of the last acknowledged heartbeat
	lease   time.Duration // active_lease_ms of that answer
	lapsed  bool          // the lease ran out and the log said so

	copies  map[string]*copyRun
	lags    map[string]int64 // from report
	retries map[string]*retry
	// closed: the worker is stopping; no copy starts any more.
	closed bool
}

func newState() state {
	return state{granted: map[string]bool{}, copies: map[string]*copyRun{}, lags: map[string]int64{}, retries: map[string]*retry{}}
}

func (s *state) leaseValid(now time.Time) bool {
	return !s.ackSent.IsZero() && now.Sub(s.ackSent) < s.lease
}

// ack takes an acknowledged heartbeat's answer. It reports whether the
// copies changed, and the previous generation.
func (s *state) ack(r *xcev1.HeartbeatResponse, sent time.Time, lease time.Duration) (changed bool, prev uint64) {
	s.ackSent, s.lease = sent, lease
	clear(s.granted)
	for _, t := range r.Actives {
		s.granted[t] = true
	}
	a := answer{known: true, gen: r.Generation, actives: slices.Clone(r.Actives), pending: slices.Clone(r.PendingActives),
		standbys: slices.Clone(r.Standbys), warmups: slices.Clone(r.Warmups), epochs: maps.Clone(r.Epochs)}
	o := s.resp
	changed = !o.known || o.gen != a.gen || !slices.Equal(o.actives, a.actives) || !slices.Equal(o.pending, a.pending) ||
		!slices.Equal(o.standbys, a.standbys) || !slices.Equal(o.warmups, a.warmups) || !maps.Equal(o.epochs, a.epochs)
	prev = o.gen
	s.resp = a
	return changed, prev
}

// sent returns the running actives for a heartbeat about to go, sorted,
// and withdraws every grant of an active not among them.
func (s *state) sent() []string {
	var running []string
	isRunning := func(t string) bool {
		r := s.copies[t]
		if r == nil || r.c.Role != Active {
			return false
		}
		select {
		case <-r.done:
			return false // its Run returned; reconcile has yet to forget it
		default:
			return true
		}
	}
	for t := range s.copies {
		if isRunning(t) {
			running = append(running, t)
		}
	}
	for t := range s.granted {
		if !isRunning(t) {
			delete(s.granted, t)
		}
	}
	slices.Sort(running)
	return running
}

func (s *state) reportedLags() map[string]int64 { return maps.Clone(s.lags) }

// wanted is the copy of every task the worker should hold: granted actives
// while the lease holds; pending actives as standbys until granted; then
// standbys and warm-ups. A task in several lists takes the first of
// active, pending, standby, warm-up; a granted active the lease does not
// cover gets no copy.
func wanted(a answer, granted map[string]bool, leaseValid bool) map[string]Copy {
	want := map[string]Copy{}
	put := func(ts []string, r Role) {
		for _, t := range ts {
			want[t] = Copy{Task: t, Role: r, Epoch: a.epochs[t]}
		}
	}
	put(a.warmups, Warmup)
	put(a.standbys, Standby)
	put(a.pending, Standby)
	for _, t := range a.actives {
		switch {
		case !granted[t]:
		case leaseValid:
			want[t] = Copy{Task: t, Role: Active, Epoch: a.epochs[t]}
		default:
			delete(want, t)
		}
	}
	return want
}

// keeps reports whether a running copy r still is the wanted copy c: the
// same role, and for an active the same epoch. A standby or warm-up keeps
// running across epochs (the epoch fences only an active's writes).
func keeps(r, c Copy) bool {
	return r.Role == c.Role && (r.Role != Active || r.Epoch == c.Epoch)
}

func (w *Worker) fence(r *copyRun, now time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.st
	select {
	case <-r.done:
		return errTakenAway
	default:
	}
	if s.copies[r.c.Task] != r || r.stopping {
		return errTakenAway
	}
	c, ok := wanted(s.resp, s.granted, true)[r.c.Task]
	if !ok || !keeps(r.c, c) {
		return errTakenAway
	}
	if r.c.Role == Active && !s.leaseValid(now) {
		return ErrLeaseExpired
	}
	return nil
}

// supervise starts and stops copies until ctx ends or the protocol loop
// fails; once ctx ends, a worker registered with a primary that hands
// actives over leaves (leave). Then it stops every copy and waits for
// each Run to return. It returns the protocol loop's error and whether
// that loop has returned.
func (w *Worker) supervise(ctx context.Context, perr <-chan error) (error, bool) {
	err, done, _ := w.superviseUntil(ctx.Done(), perr, time.Time{})
	if !done && w.handsOver.Load() && w.cfg.DrainTimeout > 0 {
		err, done = w.leave(perr)
	}
	w.mu.Lock()
	w.st.closed = true // nothing starts from here on
	w.mu.Unlock()
	w.stopCopies(func(*copyRun) bool { return true }, errStopping)
	return err, done
}

// superviseUntil starts and stops copies until stop is closed, the
// protocol loop returns (its error, done), or until passes (timedOut; zero:
// never).
func (w *Worker) superviseUntil(stop <-chan struct{}, perr <-chan error, until time.Time) (err error, done, timedOut bool) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := w.reconcile(time.Now())
		if !until.IsZero() && (next.IsZero() || until.Before(next)) {
			next = until
		}
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-stop:
			return nil, false, false
		case err = <-perr:
			return err, true, false
		case <-w.wake:
		case <-timer.C:
			if !until.IsZero() && !time.Now().Before(until) {
				return nil, false, true
			}
		}
	}
}

// leaveNowWait bounds the wait for the primary's answer to a worker that
// leaves now.
const leaveNowWait = 5 * time.Second

// leave hands the actives over: the worker tells the primary it is
// leaving, runs its actives until the primary moves each elsewhere (and
// says each stopped at once), and returns once the primary has ended its
// session. Past Config.DrainTimeout it stops the actives left, tells the
// primary it leaves now (so they are granted elsewhere at once) and
// returns.
func (w *Worker) leave(perr <-chan error) (error, bool) {
	w.log.Info("leaving: handing the actives over to other workers before stopping",
		"actives", w.activeTasks(), "drain_timeout", w.cfg.DrainTimeout)
	w.leaving.Store(true)
	w.urge()
	start := time.Now()
	err, done, timedOut := w.superviseUntil(w.left, perr, start.Add(w.cfg.DrainTimeout))
	if !timedOut {
		if !done {
			w.log.Info("every active handed over", "took", time.Since(start))
		}
		return err, done
	}
	w.log.Warn("the drain deadline passed: stopping the actives not handed over; the primary gives them to other workers at once",
		"actives", w.activeTasks(), "drain_timeout", w.cfg.DrainTimeout)
	w.stopCopies(func(r *copyRun) bool { return r.c.Role == Active }, errStopping)
	w.leaveNow.Store(true)
	w.urge()
	err, done, _ = w.superviseUntil(w.left, perr, time.Now().Add(leaveNowWait))
	return err, done
}

// settle starts the actives the last answer granted whose previous copy
// (a standby, a warm-up, an active of an older epoch) is still stopping,
// waiting at most d for those copies to return: the next heartbeat must
// list the actives as running, or it withdraws their grants until its own
// answer (state.sent).
func (w *Worker) settle(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		w.reconcile(time.Now())
		if !w.awaitingStart() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-w.returned:
		case <-t.C:
			return
		}
	}
}

// want is wanted for the worker's state: a leaving worker starts no active
// (nor an active's new epoch), and holds one granted now as a standby until
// the primary moves it elsewhere. Callers hold w.mu.
func (w *Worker) want(leaseValid bool) map[string]Copy {
	s := &w.st
	want := wanted(s.resp, s.granted, leaseValid)
	if w.leaving.Load() {
		// Granted or not (a heartbeat that did not list it withdrew the
		// grant), an active it does not run as such is a standby here:
		// its copy keeps running across answers.
		for _, t := range s.resp.actives {
			if c, ok := want[t]; ok && c.Role == Active {
				if r := s.copies[t]; r != nil && keeps(r.c, c) {
					continue
				}
			}
			want[t] = Copy{Task: t, Role: Standby, Epoch: s.resp.epochs[t]}
		}
	}
	return want
}

// awaitingStart reports whether a granted active waits for another copy
// of its task to stop before it starts.
func (w *Worker) awaitingStart() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.st
	for t, c := range w.want(s.leaseValid(time.Now())) {
		if r := s.copies[t]; c.Role == Active && r != nil && !keeps(r.c, c) {
			return true
		}
	}
	return false
}

// activeTasks lists the actives the worker runs.
func (w *Worker) activeTasks() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.st.sent()
}

// stopCopies cancels every copy that which selects and waits for their
// Runs to return.
func (w *Worker) stopCopies(which func(*copyRun) bool, cause error) {
	w.mu.Lock()
	var runs []*copyRun
	for _, r := range w.st.copies {
		if which(r) {
			runs = append(runs, r)
			r.stopping = true
			r.cancel(cause)
		}
	}
	w.mu.Unlock()
	for _, r := range runs {
		<-r.done
	}
	w.mu.Lock()
	for _, r := range runs {
		if w.st.copies[r.c.Task] == r {
			delete(w.st.copies, r.c.Task)
		}
	}
	w.mu.Unlock()
}

// reconcile brings the running copies toward the wanted ones at now: it
// forgets copies whose Run returned, cancels those no longer wanted as
// they are, and starts the wanted ones not running (a task's next copy
// only once the previous Run returned). It returns when it must run again
// at the latest (the lease's end, a retry), zero for no deadline.
func (w *Worker) reconcile(now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &w.st
	if s.closed {
		return time.Time{}
	}
	for _, t := range slices.Sorted(maps.Keys(s.copies)) {
		r := s.copies[t]
		select {
		case <-r.done:
		default:
			continue
		}
		delete(s.copies, t)
		if r.stopping {
			w.log.Debug("copy stopped", "task", t, "role", r.c.Role.String())
			continue
		}
		rt := s.retries[t]
		if rt == nil || rt.c != r.c {
			rt = &retry{c: r.c, b: backoff.Backoff{Min: time.Second, Max: 30 * time.Second}}
			s.retries[t] = rt
		}
		if now.Sub(r.started) >= time.Minute {
			rt.b.Reset()
		}
		wait := rt.b.Next()
		rt.at = now.Add(wait)
		w.log.Warn("a copy's Run returned before it was stopped", errAttr(r.err), "task", t, "role", r.c.Role.String(), "retry_in", wait)
	}

	valid := s.leaseValid(now)
	want := w.want(valid)
	if !valid && !s.lapsed && len(s.granted) > 0 {
		s.lapsed = true
		w.log.Warn("the active lease ran out: stopping every active until a heartbeat is acknowledged",
			"last_acknowledged_send", s.ackSent, "active_lease", s.lease)
	}
	if valid && s.lapsed {
		s.lapsed = false
		w.log.Info("a heartbeat was acknowledged: the active lease holds again")
	}

	for _, t := range slices.Sorted(maps.Keys(s.copies)) {
		r := s.copies[t]
		if r.stopping {
			continue
		}
		c, ok := want[t]
		if ok && keeps(r.c, c) {
			continue
		}
		cause := errTakenAway
		if r.c.Role == Active && !valid && s.granted[t] {
			cause = ErrLeaseExpired
		}
		r.stopping = true
		r.cancel(cause)
		w.log.Info("stopping a copy", "task", t, "role", r.c.Role.String(), "epoch", r.c.Epoch, "why", cause.Error())
	}
	for t := range s.lags {
		if _, ok := want[t]; !ok && s.copies[t] == nil {
			delete(s.lags, t)
		}
	}
	var next time.Time
	earliest := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for t, rt := range s.retries {
		// An active whose grant waits for the next answer keeps its
		// backoff; a copy the answer changed or dropped starts afresh.
		c, ok := want[t]
		if (ok && c != rt.c) || (!ok && (rt.c.Role != Active || !slices.Contains(s.resp.actives, t))) {
			delete(s.retries, t)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(want)) {
		if s.copies[t] != nil {
			continue
		}
		if rt := s.retries[t]; rt != nil && now.Before(rt.at) {
			earliest(rt.at)
			continue
		}
		w.start(want[t], now)
	}
	for _, r := range s.copies {
		if r.c.Role == Active && !r.stopping {
			earliest(s.ackSent.Add(s.lease))
			break
		}
	}
	return next
}

// start runs copy c in its own goroutine (under w.mu). The goroutine is
// owned by the copy's record: stopCopies cancels it and waits for it.
func (w *Worker) start(c Copy, now time.Time) {
	r := &copyRun{w: w, c: c, started: now, done: make(chan struct{})}
	cctx, cancel := context.WithCancelCause(context.WithValue(w.life, copyKey{}, r))
	r.cancel = cancel
	w.st.copies[c.Task] = r
	w.log.Info("starting a copy", "task", c.Task, "role", c.Role.String(), "epoch", c.Epoch)
	report := func(lag int64) {
		w.mu.Lock()
		defer w.mu.Unlock()
		select {
		case <-r.done:
			return // a report after Run returned is not the copy's any more
		default:
		}
		if w.st.copies[c.Task] == r {
			w.st.lags[c.Task] = lag
		}
	}
	go func() {
		err := w.h.Run(cctx, c, report)
		w.mu.Lock()
		r.err = err
		close(r.done)
		w.mu.Unlock()
		cancel(nil)
		if c.Role == Active {
			// The primary may grant it elsewhere once it hears.
			w.urge()
		}
		select {
		case w.returned <- struct{}{}:
		default:
		}
		w.poke()
	}()
}
