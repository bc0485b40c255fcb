package placement

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xce/xce/state"
)

// beater is a worker as the primary sees it: it numbers its heartbeats,
// acknowledges the answers it took, and reports the same lags and running
// actives until the test changes them.
type beater struct {
	r       *rig
	id      string
	seq     uint64
	ack     uint64
	lags    map[string]int64
	running []string
}

// join registers worker id and sends its first (numbered) heartbeat: the
// assignor plans for it from then on.
func (r *rig) join(id string, lags map[string]int64) *beater {
	r.t.Helper()
	if _, err := r.svc.Register(id, 1, ""); err != nil {
		r.t.Fatalf("register %s: %v", id, err)
	}
	w := &beater{r: r, id: id, lags: lags}
	w.must(Beat{})
	return w
}

// next numbers b as the worker's next heartbeat, acknowledging the last
// answer taken, with the worker's lags and running actives.
func (w *beater) next(b Beat) Beat {
	w.seq++
	b.Worker, b.Seq, b.AckSeq, b.Lags, b.Running = w.id, w.seq, w.ack, w.lags, w.running
	return b
}

// send sends b and takes its answer.
func (w *beater) send(b Beat) (Answer, error) {
	b = w.next(b)
	a, err := w.r.svc.Beat(context.Background(), b)
	if err == nil {
		w.ack = b.Seq
	}
	return a, err
}

func (w *beater) must(b Beat) Answer {
	w.r.t.Helper()
	a, err := w.send(b)
	if err != nil {
		w.r.t.Fatalf("heartbeat %d of %s: %v", w.seq, w.id, err)
	}
	return a
}

// prompt is must for a heartbeat that must be answered without waiting.
func (w *beater) prompt(b Beat) Answer {
	w.r.t.Helper()
	start := time.Now()
	a := w.must(b)
	if took := time.Since(start); took != 0 {
		w.r.t.Fatalf("heartbeat %d of %s answered after %v, want at once", w.seq, w.id, took)
	}
	return a
}

// call is a heartbeat sent in the background, which the primary may hold.
type call struct {
	seq  uint64
	sent time.Time
	done chan struct{}
	a    Answer
	err  error
	took time.Duration
}

func (w *beater) hold(ctx context.Context, b Beat) *call {
	b = w.next(b)
	c := &call{seq: b.Seq, sent: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.a, c.err = w.r.svc.Beat(ctx, b)
		c.took = time.Since(c.sent)
	}()
	return c
}

// held reports whether the call still waits for its answer once every
// goroutine of the bubble is blocked.
func (c *call) held() bool {
	synctest.Wait()
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// wait waits for the call's answer, which worker w takes, and returns it
// with how long (fake time) it took.
func (w *beater) wait(c *call) (Answer, time.Duration, error) {
	<-c.done
	if c.err == nil {
		w.ack = c.seq
	}
	return c.a, c.took, c.err
}

// mustHold starts a held heartbeat and fails unless the primary holds it.
func (w *beater) mustHold(b Beat) *call {
	w.r.t.Helper()
	c := w.hold(context.Background(), b)
	if !c.held() {
		w.r.t.Fatalf("heartbeat %d of %s answered at once (%+v, %v), want it held", c.seq, w.id, c.a, c.err)
	}
	return c
}

// drain drains worker id, or ends its drain, through the log.
func (r *rig) drain(id string, drained bool) {
	r.t.Helper()
	b, err := state.EncodeDrain(id, drained)
	if err != nil {
		r.t.Fatal(err)
	}
	if res, err := r.apply(context.Background(), b); err != nil || res.Code != state.CodeOK {
		r.t.Fatalf("drain %s %v: %v %+v", id, drained, err, res)
	}
}

func (r *rig) workerState(id string) (WorkerInfo, bool) {
	r.t.Helper()
	ws, _, err := r.svc.Workers()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return w, true
		}
	}
	return WorkerInfo{}, false
}

func (r *rig) drainState(id string) string {
	r.t.Helper()
	w, ok := r.workerState(id)
	if !ok {
		r.t.Fatalf("no session for %s", id)
	}
	return w.DrainState
}

const maxHold = 500 * time.Millisecond // the rig's MaxHold: its heartbeat interval

// oneActive starts a fresh term in which w1, the only worker, runs t0,
// granted, and has had the same answer twice.
func oneActive(t *testing.T) (*rig, *beater, func()) {
	r := newRig(t, 0)
	r.submit("t0")
	revoke := r.establish(1)
	w := r.join("w1", nil)
	settle(200 * time.Millisecond)
	if a := w.must(Beat{}); !slices.Equal(a.Actives, []string{"t0"}) {
		t.Fatalf("w1: %+v, want t0 granted", a)
	}
	w.running = []string{"t0"}
	w.must(Beat{})
	return r, w, revoke
}

// A held heartbeat is answered as soon as a plan commits an assignment
// that changes its answer, not when its wait is over.
func TestHeldHeartbeatAnsweredOnCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w, revoke := oneActive(t)
		defer revoke()
		// A task-set change is planned once a second has passed since
		// the last plan.
		settle(time.Second)
		w.must(Beat{})
		c := w.mustHold(Beat{Wait: maxHold})
		r.submit("t1")
		a, took, err := w.wait(c)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Actives, []string{"t0", "t1"}) || a.Generation != r.gen() || a.Epochs["t1"] == 0 {
			t.Fatalf("answer %+v, want t0 and t1 granted in generation %d", a, r.gen())
		}
		if took > r.svc.cfg.Tick {
			t.Fatalf("answered %v after the hold began, want within the loop's tick (%v)", took, r.svc.cfg.Tick)
		}
	})
}

// A held heartbeat whose answer does not change is answered when its wait
// is over, at most MaxHold (which a registration tells), with the answer it
// had; that answer counts as the last one sent, so the next heartbeat
// acknowledging it is held too.
func TestHeldHeartbeatWaitsWhileNothingChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w, revoke := oneActive(t)
		defer revoke()
		info, err := r.svc.Register("w1", 1, "")
		if err != nil || info.MaxWait != maxHold {
			t.Fatalf("Register: %+v %v, want MaxWait %v", info, err, maxHold)
		}
		w.seq, w.ack = 0, 0
		w.must(Beat{})
		before := w.must(Beat{})
		for _, tc := range []struct{ wait, want time.Duration }{
			{300 * time.Millisecond, 300 * time.Millisecond},
			{10 * time.Second, maxHold},
		} {
			a, took, err := w.wait(w.mustHold(Beat{Wait: tc.wait}))
			if err != nil {
				t.Fatal(err)
			}
			if took != tc.want {
				t.Fatalf("wait %v: answered after %v, want %v", tc.wait, took, tc.want)
			}
			if !sameAnswer(a, before) || a.Generation != before.Generation {
				t.Fatalf("wait %v: answer %+v, want the unchanged %+v", tc.wait, a, before)
			}
		}
	})
}

// Only a numbered heartbeat that asks to wait, acknowledging the last
// answer sent, which it would get again, is held.
func TestHeartbeatsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w, revoke := oneActive(t)
		defer revoke()
		w.prompt(Beat{})
		// Acknowledging an older answer, or none.
		for _, ack := range []uint64{w.ack - 1, 0} {
			w.ack = ack
			w.prompt(Beat{Wait: maxHold})
		}
		w.prompt(Beat{})
		// Not numbered.
		start := time.Now()
		if _, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", AckSeq: w.ack, Wait: maxHold, Running: w.running}); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 0 {
			t.Fatalf("an unnumbered heartbeat was held %v", took)
		}
		// Not asking to wait.
		w.prompt(Beat{})
		// An answer that differs from the last one sent: t1 came since.
		settle(time.Second)
		w.must(Beat{})
		r.submit("t1")
		settle(200 * time.Millisecond)
		if a := w.prompt(Beat{Wait: maxHold}); !slices.Equal(a.Actives, []string{"t0", "t1"}) {
			t.Fatalf("answer %+v, want t1 granted too", a)
		}
	})
}

// A primary configured not to hold answers every heartbeat at once and
// tells workers so.
func TestHoldsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.svc.cfg.MaxHold = -1
		defer r.establish(1)()
		if info, err := r.svc.Register("w1", 1, ""); err != nil || info.MaxWait != 0 {
			t.Fatalf("Register: %+v %v, want MaxWait 0", info, err)
		}
		w := &beater{r: r, id: "w1"}
		for range 3 {
			w.prompt(Beat{Wait: maxHold})
		}
	})
}

// A held heartbeat of worker Y, whose active waits for worker X to stop
// it, is answered with the grant as soon as X reports it stopped.
func TestHeldHeartbeatGrantedWhenPreviousWorkerStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0")
		r.commit(map[string]state.Placement{"t0": {Active: "X", Standbys: []string{"Y"}}})
		r.svc.cfg.Settle = time.Hour // the test moves t0 itself
		defer r.establish(2)()
		x, y := r.join("X", nil), r.join("Y", nil)
		x.running = []string{"t0"}
		// Past session_timeout + grant_margin the term knows who runs what.
		for range 8 {
			x.must(Beat{})
			y.must(Beat{})
			settle(500 * time.Millisecond)
		}
		r.commit(map[string]state.Placement{"t0": {Active: "Y", Standbys: []string{"X"}}})
		if a := y.must(Beat{}); !slices.Equal(a.PendingActives, []string{"t0"}) {
			t.Fatalf("Y while X runs t0: %+v, want t0 pending", a)
		}
		c := y.mustHold(Beat{Wait: maxHold})
		x.must(Beat{}) // still running t0
		if !c.held() {
			t.Fatalf("Y answered while X still runs t0: %+v %v", c.a, c.err)
		}
		x.running = nil
		x.must(Beat{})
		a, took, err := y.wait(c)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(a.Actives, []string{"t0"}) || len(a.PendingActives) != 0 || took != 0 {
			t.Fatalf("Y answered %+v after %v, want t0 granted the moment X reported it stopped", a, took)
		}
	})
}

// A later heartbeat of the session ends a held one with ErrStale, and the
// held one records nothing: the later one's answer is the last sent. A
// stale heartbeat does not end a hold.
func TestLaterHeartbeatSupersedesHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w, revoke := oneActive(t)
		defer revoke()
		c := w.mustHold(Beat{Wait: maxHold})
		if _, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", Seq: c.seq - 1, Running: w.running}); !errors.Is(err, ErrStale) {
			t.Fatalf("a stale heartbeat during a hold: %v, want ErrStale", err)
		}
		if !c.held() {
			t.Fatal("a stale heartbeat ended the hold")
		}
		abandoned := c.seq
		later := w.prompt(Beat{})
		if _, took, err := w.wait(c); !errors.Is(err, ErrStale) || took != 0 {
			t.Fatalf("the superseded heartbeat: %v after %v, want ErrStale at once", err, took)
		}
		// Acknowledging the superseded heartbeat is acknowledging an answer
		// never sent: not held.
		w.ack = abandoned
		w.prompt(Beat{Wait: maxHold})
		// Nor did it change the grants: the same answer again.
		a, took, err := w.wait(w.mustHold(Beat{Wait: maxHold}))
		if err != nil || took != maxHold || !sameAnswer(a, later) {
			t.Fatalf("after the superseded heartbeat: %+v after %v (%v), want %+v after %v", a, took, err, later, maxHold)
		}
	})
}

// A registration ends a held heartbeat of the session with ErrStale, and
// starts the session's answers and numbers afresh.
func TestRegistrationEndsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w, revoke := oneActive(t)
		defer revoke()
		c := w.mustHold(Beat{Wait: maxHold})
		if _, err := r.svc.Register("w1", 1, ""); err != nil {
			t.Fatal(err)
		}
		if _, took, err := w.wait(c); !errors.Is(err, ErrStale) || took != 0 {
			t.Fatalf("held heartbeat after a registration: %v after %v, want ErrStale at once", err, took)
		}
		// A restarted process numbers from 1, and acknowledges an answer of
		// the previous session: not held.
		w.seq = 0
		w.prompt(Beat{Wait: maxHold})
		if _, took, err := w.wait(w.mustHold(Beat{Wait: maxHold})); err != nil || took != maxHold {
			t.Fatalf("the new session's held heartbeat: %v after %v, want an answer after %v", err, took, maxHold)
		}
	})
}

// The term's end ends every held heartbeat with ErrNotServing.
func TestTermEndEndsHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, w1, revoke := oneActive(t)
		w2 := r.join("w2", nil)
		synctest.Wait() // the plan w2's first heartbeat asked for
		w1.must(Beat{})
		w2.must(Beat{})
		c1, c2 := w1.mustHold(Beat{Wait: maxHold}), w2.mustHold(Beat{Wait: maxHold})
		revoke()
		for w, c := range map[*beater]*call{w1: c1, w2: c2} {
			if _, took, err := w.wait(c); !errors.Is(err, ErrNotServing) || took != 0 {
				t.Fatalf("held heartbeat of %s at the term's end: %v after %v, want ErrNotServing at once", w.id, err, took)
			}
		}
	})
}

// A held heartbeat whose caller gives up ends with the context's error and
// records nothing.
func TestContextEndsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, w, revoke := oneActive(t)
		defer revoke()
		ctx, cancel := context.WithCancel(context.Background())
		c := w.hold(ctx, Beat{Wait: maxHold})
		if !c.held() {
			t.Fatal("not held")
		}
		cancel()
		if _, took, err := w.wait(c); !errors.Is(err, context.Canceled) || took != 0 {
			t.Fatalf("cancelled: %v after %v, want context.Canceled at once", err, took)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		c = w.hold(ctx, Beat{Wait: maxHold})
		if _, took, err := w.wait(c); !errors.Is(err, context.DeadlineExceeded) || took != 100*time.Millisecond {
			t.Fatalf("timed out: %v after %v, want context.DeadlineExceeded after 100ms", err, took)
		}
		w.ack = c.seq
		w.prompt(Beat{Wait: maxHold})
	})
}

// Time alone wakes a held heartbeat: a new primary grants an active its
// worker does not report running once the previous primary's leases have
// surely run out (GrantDecision.Next), with nothing else happening.
func TestHeldHeartbeatWakesWhenTimeGrants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submit("t0")
		r.commit(map[string]state.Placement{"t0": {Active: "w1"}})
		r.svc.cfg.Settle = time.Hour
		r.svc.cfg.MaxHold = 2 * time.Second
		start := time.Now()
		defer r.establish(2)()
		w := r.join("w1", nil)
		for range 6 {
			if a := w.must(Beat{}); len(a.Actives) != 0 {
				t.Fatalf("w1 at %v: %+v, want t0 pending", time.Since(start), a)
			}
			settle(500 * time.Millisecond)
		}
		w.must(Beat{})
		a, took, err := w.wait(w.mustHold(Beat{Wait: 2 * time.Second}))
		known := sessionTimeout + sessionTimeout/5
		if err != nil || !slices.Equal(a.Actives, []string{"t0"}) || time.Since(start) != known {
			t.Fatalf("%+v after %v (%v into the term), %v; want t0 granted %v into the term", a, took, time.Since(start), err, known)
		}
	})
}

// pair starts a fresh term in which X runs t0 and Y holds its caught-up
// standby.
func pair(t *testing.T) (r *rig, x, y *beater, revoke func()) {
	r = newRig(t, 1)
	r.submit("t0")
	revoke = r.establish(1)
	caught := map[string]int64{"t0": 0}
	x = r.join("X", caught)
	settle(200 * time.Millisecond)
	y = r.join("Y", caught)
	settle(200 * time.Millisecond)
	if p := r.placement("t0"); p.Active != "X" || !slices.Equal(p.Standbys, []string{"Y"}) {
		t.Fatalf("t0 placed %+v, want X active and a standby on Y", p)
	}
	x.running = []string{"t0"}
	if a := x.must(Beat{}); !slices.Equal(a.Actives, []string{"t0"}) {
		t.Fatalf("X: %+v, want t0 granted", a)
	}
	y.must(Beat{})
	return r, x, y, revoke
}

// A leaving worker is planned as drained: its active moves to the
// caught-up standby. Its session ends, with Left, once it runs and is
// assigned nothing, and the task it ran is granted to the new worker at
// once, without waiting for session_timeout + grant_margin.
func TestLeavingWorkerHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, x, y, revoke := pair(t)
		defer revoke()
		if a := x.must(Beat{Leaving: true}); a.Left {
			t.Fatalf("X left while it runs t0: %+v", a)
		}
		if s := r.drainState("X"); s != DrainLeaving {
			t.Fatalf("X's drain state %q, want %q", s, DrainLeaving)
		}
		synctest.Wait() // the plan its first leaving heartbeat asked for
		if p := r.placement("t0"); p.Active != "Y" {
			t.Fatalf("t0 placed %+v while X leaves, want its active on Y", p)
		}
		if a := y.must(Beat{}); !slices.Equal(a.PendingActives, []string{"t0"}) {
			t.Fatalf("Y while X still runs t0: %+v, want it pending", a)
		}
		if a := x.must(Beat{Leaving: true}); a.Left || len(a.Actives)+len(a.PendingActives) != 0 {
			t.Fatalf("X, assigned nothing but still running t0: %+v, want no active and its session kept", a)
		}
		c := y.mustHold(Beat{Wait: maxHold})
		x.running = nil
		a := x.must(Beat{Leaving: true})
		if !a.Left || len(a.Actives)+len(a.PendingActives)+len(a.Standbys)+len(a.Warmups) != 0 {
			t.Fatalf("X, running and assigned nothing: %+v, want Left and nothing held", a)
		}
		if _, ok := r.workerState("X"); ok {
			t.Fatal("X still has a session after it left")
		}
		// No plan ran since (one ran this instant): the session's end
		// alone answers Y.
		if a, took, err := y.wait(c); err != nil || !slices.Equal(a.Actives, []string{"t0"}) || took != 0 {
			t.Fatalf("Y once X left: %+v after %v (%v), want t0 granted at once", a, took, err)
		}
		if _, err := x.send(Beat{Leaving: true}); !errors.Is(err, ErrUnknownWorker) {
			t.Fatalf("X after it left: %v, want ErrUnknownWorker", err)
		}
	})
}

// A leaving worker that runs nothing but is still assigned an active keeps
// its session until the plan moved it.
func TestLeavingWorkerWaitsForTheAssignment(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, x, _, revoke := pair(t)
		defer revoke()
		x.running = nil
		if a := x.must(Beat{Leaving: true}); a.Left {
			t.Fatalf("X left while t0 is still assigned to it: %+v", a)
		}
		synctest.Wait()
		if p := r.placement("t0"); p.Active != "Y" {
			t.Fatalf("t0 placed %+v, want its active on Y", p)
		}
		if a := x.must(Beat{Leaving: true}); !a.Left {
			t.Fatalf("X once t0 moved: %+v, want Left", a)
		}
	})
}

// leave_now needs leaving and nothing running; refused, it changes
// nothing, not even the session's heartbeat count.
func TestLeaveNowWhileRunningRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, x, y, revoke := pair(t)
		defer revoke()
		gen := r.gen()
		for _, b := range []Beat{{Leaving: true, LeaveNow: true}, {LeaveNow: true}} {
			b = x.next(b)
			if b.LeaveNow && !b.Leaving {
				b.Running = nil
			}
			if _, err := r.svc.Beat(context.Background(), b); !errors.Is(err, ErrInvalid) {
				t.Fatalf("%+v: %v, want ErrInvalid", b, err)
			}
			x.seq-- // not recorded: the same number is taken next
		}
		settle(200 * time.Millisecond)
		if s := r.drainState("X"); s != "" || r.gen() != gen || r.placement("t0").Active != "X" {
			t.Fatalf("after refused leave_now: X %q, generation %d (was %d), t0 %+v", s, r.gen(), gen, r.placement("t0"))
		}
		if a := x.prompt(Beat{}); !slices.Equal(a.Actives, []string{"t0"}) || a.Left {
			t.Fatalf("X after refused leave_now: %+v", a)
		}
		if a := y.prompt(Beat{}); len(a.Actives) != 0 {
			t.Fatalf("Y granted t0 while X runs it: %+v", a)
		}
	})
}

// leave_now ends the session at once, even with actives assigned: the
// next plan moves them, and they are granted at once, without waiting for
// the leaver's lease. The session's end and the commit each wake held
// heartbeats.
func TestLeaveNowHandsOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, x, y, revoke := pair(t)
		defer revoke()
		c := y.mustHold(Beat{Wait: maxHold})
		x.running = nil
		if a := x.must(Beat{Leaving: true, LeaveNow: true}); !a.Left {
			t.Fatalf("leave_now: %+v, want Left", a)
		}
		if _, ok := r.workerState("X"); ok {
			t.Fatal("X still has a session after leave_now")
		}
		a, took, err := y.wait(c)
		if err != nil || !slices.Equal(a.Actives, []string{"t0"}) || took > r.svc.cfg.Tick {
			t.Fatalf("Y: %+v after %v (%v), want t0 granted within a tick of X leaving", a, took, err)
		}
		if p := r.placement("t0"); p.Active != "Y" {
			t.Fatalf("t0 placed %+v", p)
		}
	})
}

// A registration ends leaving: the worker is planned for again.
func TestRegisterResetsLeaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, x, y, revoke := pair(t)
		defer revoke()
		x.must(Beat{Leaving: true})
		synctest.Wait()
		// A task that comes while X leaves gets no copy on it.
		settle(time.Second)
		x.must(Beat{Leaving: true})
		y.must(Beat{})
		r.submit("t1")
		settle(200 * time.Millisecond)
		if p := r.placement("t1"); p.Active != "Y" || len(p.Standbys)+len(p.Warmups) != 0 {
			t.Fatalf("t1 placed %+v while X leaves, want it on Y alone", p)
		}
		if _, err := r.svc.Register("X", 1, ""); err != nil {
			t.Fatal(err)
		}
		if s := r.drainState("X"); s != "" {
			t.Fatalf("X's drain state %q after it registered again, want none", s)
		}
		x.seq, x.running = 0, nil
		x.must(Beat{})
		y.must(Beat{})
		settle(200 * time.Millisecond)
		if a := x.must(Beat{}); len(a.Actives)+len(a.PendingActives) == 0 {
			t.Fatalf("X after it registered again: %+v, want an active of the two (t0 %+v, t1 %+v)", a, r.placement("t0"), r.placement("t1"))
		}
	})
}

// A drain, through the log: the worker is "draining" while actives are
// assigned to it, "drained" once they moved; its answers say so (a held
// heartbeat is answered within a tick of the drain); a leaving worker is
// "leaving" whether drained or not.
func TestDrainStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, x, y, revoke := pair(t)
		defer revoke()
		// Y's standby stays where it is: the drain alone changes Y's
		// answer, and answers it within a tick.
		gen := r.gen()
		c := y.mustHold(Beat{Wait: maxHold})
		r.drain("Y", true)
		if s := r.drainState("Y"); s != DrainDrained {
			t.Fatalf("Y drained with no active: %q, want %q", s, DrainDrained)
		}
		a, took, err := y.wait(c)
		if err != nil || !a.Drained || !slices.Equal(a.Standbys, []string{"t0"}) || took > r.svc.cfg.Tick || r.gen() != gen {
			t.Fatalf("Y's held heartbeat: %+v after %v (%v), generation %d (was %d); want Drained within a tick, nothing moved",
				a, took, err, r.gen(), gen)
		}
		r.drain("Y", false)
		if a := y.must(Beat{}); a.Drained {
			t.Fatalf("Y undrained: %+v", a)
		}
		c = x.mustHold(Beat{Wait: maxHold})
		r.drain("X", true)
		if s := r.drainState("X"); s != DrainDraining {
			t.Fatalf("X drained with t0 assigned: %q, want %q", s, DrainDraining)
		}
		if s := r.drainState("Y"); s != "" {
			t.Fatalf("Y: %q, want none", s)
		}
		a, took, err = x.wait(c)
		if err != nil || !a.Drained || took > r.svc.cfg.Tick {
			t.Fatalf("X's held heartbeat: %+v after %v (%v), want Drained within a tick", a, took, err)
		}
		settle(100 * time.Millisecond)
		if p := r.placement("t0"); p.Active != "Y" {
			t.Fatalf("t0 placed %+v once X was drained, want its active on Y", p)
		}
		if s := r.drainState("X"); s != DrainDrained {
			t.Fatalf("X drained, t0 moved: %q, want %q", s, DrainDrained)
		}
		x.running = nil
		if a := x.must(Beat{}); !a.Drained || len(a.Actives)+len(a.PendingActives) != 0 {
			t.Fatalf("X drained: %+v", a)
		}
		if a := y.must(Beat{}); a.Drained || !slices.Equal(a.Actives, []string{"t0"}) {
			t.Fatalf("Y: %+v, want t0 granted, not drained", a)
		}
		r.drain("X", false)
		if s := r.drainState("X"); s != "" {
			t.Fatalf("X undrained: %q, want none", s)
		}
		if a := x.must(Beat{}); a.Drained {
			t.Fatalf("X undrained: %+v", a)
		}
		y.running = []string{"t0"}
		if a := y.must(Beat{Leaving: true}); a.Left {
			t.Fatalf("Y left while it runs t0: %+v", a)
		}
		if s := r.drainState("Y"); s != DrainLeaving {
			t.Fatalf("Y leaving: %q, want %q", s, DrainLeaving)
		}
		r.drain("Y", true)
		if s := r.drainState("Y"); s != DrainLeaving {
			t.Fatalf("Y leaving and drained: %q, want %q", s, DrainLeaving)
		}
	})
}

// A new worker is planned for once it has reported, not at its
// registration, which does not plan at all.
func TestNewWorkerPlannedAfterItsFirstHeartbeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0")
		defer r.establish(1)()
		if _, err := r.svc.Register("w1", 1, ""); err != nil {
			t.Fatal(err)
		}
		settle(time.Second)
		if r.gen() != 0 {
			t.Fatalf("planned for w1 before it reported: t0 %+v", r.placement("t0"))
		}
		w1 := &beater{r: r, id: "w1"}
		w1.must(Beat{})
		settle(200 * time.Millisecond)
		if p := r.placement("t0"); p.Active != "w1" || len(p.Standbys) != 0 {
			t.Fatalf("t0 placed %+v once w1 reported, want on w1 alone", p)
		}
		plans := r.svc.plansForTest()
		if _, err := r.svc.Register("w2", 1, ""); err != nil {
			t.Fatal(err)
		}
		settle(time.Second)
		w1.must(Beat{})
		settle(time.Second)
		if n := r.svc.plansForTest() - plans; n != 0 || len(r.placement("t0").Standbys) != 0 {
			t.Fatalf("w2's registration: %d plans, t0 %+v; want none before it reports", n, r.placement("t0"))
		}
		w2 := &beater{r: r, id: "w2"}
		w2.must(Beat{})
		settle(200 * time.Millisecond)
		if p := r.placement("t0"); !slices.Equal(p.Standbys, []string{"w2"}) {
			t.Fatalf("t0 placed %+v once w2 reported, want a standby on w2", p)
		}
	})
}
