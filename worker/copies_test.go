package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

func TestWanted(t *testing.T) {
	a := answer{
		actives: []string{"a", "b"}, pending: []string{"p"}, standbys: []string{"s", "p"}, warmups: []string{"w", "s"},
		epochs: map[string]uint64{"a": 3, "b": 1, "p": 7, "s": 2, "w": 9},
	}
	all := map[string]bool{"a": true, "b": true}
	for _, tc := range []struct {
		name    string
		granted map[string]bool
		valid   bool
		want    map[string]Copy
	}{
		{"granted within the lease", all, true, map[string]Copy{
			"a": {"a", Active, 3}, "b": {"b", Active, 1}, "p": {"p", Standby, 7}, "s": {"s", Standby, 2}, "w": {"w", Warmup, 9}}},
		{"lease ran out: no actives, the rest stays", all, false, map[string]Copy{
			"p": {"p", Standby, 7}, "s": {"s", Standby, 2}, "w": {"w", Warmup, 9}}},
		{"a grant withdrawn until the next answer", map[string]bool{"b": true}, true, map[string]Copy{
			"b": {"b", Active, 1}, "p": {"p", Standby, 7}, "s": {"s", Standby, 2}, "w": {"w", Warmup, 9}}},
		{"nothing granted, no answer", nil, true, map[string]Copy{
			"p": {"p", Standby, 7}, "s": {"s", Standby, 2}, "w": {"w", Warmup, 9}}},
	} {
		if got := wanted(a, tc.granted, tc.valid); !maps.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := wanted(answer{}, nil, true); len(got) != 0 {
		t.Errorf("no answer: %v", got)
	}
	for _, tc := range []struct {
		run, want Copy
		keep      bool
	}{
		{Copy{"a", Active, 1}, Copy{"a", Active, 1}, true},
		{Copy{"a", Active, 1}, Copy{"a", Active, 2}, false},
		{Copy{"a", Active, 1}, Copy{"a", Standby, 1}, false},
		{Copy{"a", Standby, 1}, Copy{"a", Standby, 2}, true},
		{Copy{"a", Warmup, 1}, Copy{"a", Standby, 1}, false},
	} {
		if got := keeps(tc.run, tc.want); got != tc.keep {
			t.Errorf("keeps(%v, %v) = %v", tc.run, tc.want, got)
		}
	}
}

// run is one call of recorder.Run.
type run struct {
	c          Copy
	ctx        context.Context
	start, end time.Duration
	ended      bool
	cause      error // context.Cause when ctx ended
	fence      error // Fence once ctx ended
}

// recorder is a Handler that records every Run on fake time. An active
// takes stopActive to stop once cancelled, any other copy stopStandby; a
// task in fail returns an error at once that many times; a task in failIn
// returns an error after that long, once.
type recorder struct {
	t0          time.Time
	stopActive  time.Duration
	stopStandby time.Duration

	mu     sync.Mutex
	runs   []*run
	fail   map[string]int
	failIn map[string]time.Duration
}

func newRecorder() *recorder {
	return &recorder{t0: time.Now(), fail: map[string]int{}, failIn: map[string]time.Duration{}}
}

func (r *recorder) Run(ctx context.Context, c Copy, report func(int64)) error {
	report(0)
	r.mu.Lock()
	x := &run{c: c, ctx: ctx, start: time.Since(r.t0)}
	r.runs = append(r.runs, x)
	if r.fail[c.Task] > 0 {
		r.fail[c.Task]--
		x.end, x.ended = x.start, true
		r.mu.Unlock()
		return errors.New("broken")
	}
	failIn, fails := r.failIn[c.Task]
	delete(r.failIn, c.Task)
	r.mu.Unlock()
	if fails {
		t := time.NewTimer(failIn)
		defer t.Stop()
		select {
		case <-t.C:
			r.mu.Lock()
			x.end, x.ended = time.Since(r.t0), true
			r.mu.Unlock()
			return errors.New("broken")
		case <-ctx.Done():
		}
	}
	<-ctx.Done()
	cause, fence := context.Cause(ctx), Fence(ctx)
	// Stopping takes a while; Run has not returned.
	if c.Role == Active {
		time.Sleep(r.stopActive)
	} else {
		time.Sleep(r.stopStandby)
	}
	r.mu.Lock()
	x.cause, x.fence, x.end, x.ended = cause, fence, time.Since(r.t0), true
	r.mu.Unlock()
	return nil
}

// snapshot returns a copy of every run so far.
func (r *recorder) snapshot() []run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]run, len(r.runs))
	for i, x := range r.runs {
		out[i] = *x
	}
	// Copies started together start in any order.
	slices.SortStableFunc(out, func(a, b run) int {
		if a.start != b.start {
			return int(a.start - b.start)
		}
		return strings.Compare(a.c.Task, b.c.Task)
	})
	return out
}

func (x run) String() string {
	end := "running"
	if x.ended {
		end = fmt.Sprintf("ended %v", x.end)
	}
	return fmt.Sprintf("%s/%s/%d from %v, %s", x.c.Task, x.c.Role, x.c.Epoch, x.start, end)
}

func wantRuns(t *testing.T, r *recorder, want ...string) []run {
	t.Helper()
	runs := r.snapshot()
	var got []string
	for _, x := range runs {
		got = append(got, x.String())
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("runs:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	return runs
}

// runningAt returns the running list of every heartbeat, as "at: list".
func runningAt(f *fakeController) []string {
	var out []string
	for _, hb := range f.all() {
		out = append(out, fmt.Sprintf("%v:%s", hb.at, strings.Join(hb.req.Running, ",")))
	}
	return out
}

// TestLease: heartbeats stop being acknowledged; the active is cancelled
// when active_lease_ms has passed since the send time of the last
// acknowledged heartbeat (Fence says no from then on, not before), the log
// says so once, and the active runs again, as a new Run, once a heartbeat
// is acknowledged again. A standby is not bounded by the lease.
func TestLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"a"}, Standbys: []string{"s"},
			Epochs: map[string]uint64{"a": 4, "s": 2}, ActiveLeaseMs: 3000})
		r := newRecorder()
		stop := startHandler(t, f, Config{ID: "w1", Capacity: 1}, r)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		runs := wantRuns(t, r, "a/active/4 from 0s, running", "s/standby/2 from 0s, running")
		if err := Fence(runs[0].ctx); err != nil {
			t.Fatalf("Fence of a granted active within its lease: %v", err)
		}
		// The heartbeat sent at 2s is the last one acknowledged.
		f.setNotReady(1 << 30)
		time.Sleep(5*time.Second - 2500*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		wantRuns(t, r, "a/active/4 from 0s, running", "s/standby/2 from 0s, running")
		if err := Fence(runs[0].ctx); err != nil {
			t.Fatalf("Fence just inside the lease: %v", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		runs = wantRuns(t, r, "a/active/4 from 0s, ended 5s", "s/standby/2 from 0s, running")
		if !errors.Is(runs[0].cause, ErrLeaseExpired) || !errors.Is(runs[0].fence, ErrLeaseExpired) || !errors.Is(runs[0].fence, ErrFenced) {
			t.Fatalf("cause %v, fence %v; want ErrLeaseExpired", runs[0].cause, runs[0].fence)
		}

		// Acknowledged again from 7s: the heartbeat in flight since 3s is
		// answered (the client retries with a jitter), but its send time
		// is past the lease; the next one, sent at once, renews it. It did
		// not list a as running, so the worker starts a only on its
		// answer, and lists it from then on.
		time.Sleep(2 * time.Second)
		f.setNotReady(0)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		runs = r.snapshot()
		if len(runs) != 3 || runs[2].c != (Copy{"a", Active, 4}) || runs[2].ended || runs[2].start < 7*time.Second {
			t.Fatalf("runs %v, want a/active/4 again after 7s", runs)
		}
		// Until 2s: a runs. The heartbeat sent at 3s (a still ran) is
		// abandoned when a stops at 5s, for one sent at once saying so;
		// once the controller answers again (7s) that one's answer
		// restarts a, and a runs from then on.
		var got []string
		for _, hb := range f.all() {
			got = append(got, strings.Join(hb.req.Running, ","))
			if len(got) == 5 && hb.at != runs[2].start {
				t.Errorf("the lease renewed at %v, a restarted at %v", hb.at, runs[2].start)
			}
		}
		if want := []string{"", "a", "a", "", "a", "a", "a"}; !slices.Equal(got, want) {
			t.Errorf("heartbeats list as running %q, want %q", got, want)
		}
		if n := strings.Count(f.logs.String(), "the active lease ran out: stopping every active"); n != 1 {
			t.Errorf("the log says %d times that the lease ran out, want once:\n%s", n, f.logs.String())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for _, x := range r.snapshot() {
			if !x.ended {
				t.Errorf("%v: still running after Run returned", x)
			}
		}
	})
}

// TestRoleChange: an active that becomes a standby is cancelled; the
// standby starts only once the active's Run returned, and heartbeats list
// the task as running until then.
func TestRoleChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"a"}, Epochs: map[string]uint64{"a": 1}, ActiveLeaseMs: 3000})
		r := newRecorder()
		r.stopActive = 2500 * time.Millisecond
		stop := startHandler(t, f, Config{ID: "w1", Capacity: 1}, r)
		time.Sleep(500 * time.Millisecond)
		f.answer(&xcev1.HeartbeatResponse{Generation: 2, Standbys: []string{"a"}, Epochs: map[string]uint64{"a": 2}, ActiveLeaseMs: 3000})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		// Cancelled on the answer at 1s, still stopping.
		runs := wantRuns(t, r, "a/active/1 from 0s, running")
		if err := Fence(runs[0].ctx); !errors.Is(err, ErrFenced) || errors.Is(err, ErrLeaseExpired) {
			t.Fatalf("Fence of an active taken away: %v", err)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		runs = wantRuns(t, r, "a/active/1 from 0s, ended 3.5s", "a/standby/2 from 3.5s, running")
		if errors.Is(runs[0].cause, ErrLeaseExpired) || !errors.Is(runs[0].cause, ErrFenced) {
			t.Errorf("cause %v", runs[0].cause)
		}
		// The active's Run returned at 3.5s: the worker says so at once.
		got := runningAt(f)
		want := []string{"0s:", "1s:a", "2s:a", "3s:a", "3.5s:", "4.5s:"}
		if !slices.Equal(got, want) {
			t.Errorf("heartbeats (at:running) %v, want %v", got, want)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPendingActives: an active assigned but not granted is held as a
// standby, and becomes an active (a new Copy, after the standby's Run
// returned) once granted; an active's new epoch is a new Copy too.
func TestPendingActives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, PendingActives: []string{"p"}, Epochs: map[string]uint64{"p": 5}, ActiveLeaseMs: 3000})
		r := newRecorder()
		stop := startHandler(t, f, Config{ID: "w1", Capacity: 1}, r)
		time.Sleep(1500 * time.Millisecond)
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"p"}, Epochs: map[string]uint64{"p": 5}, ActiveLeaseMs: 3000})
		time.Sleep(2 * time.Second)
		f.answer(&xcev1.HeartbeatResponse{Generation: 3, Actives: []string{"p"}, Epochs: map[string]uint64{"p": 6}, ActiveLeaseMs: 3000})
		time.Sleep(time.Second)
		synctest.Wait()
		wantRuns(t, r, "p/standby/5 from 0s, ended 2s", "p/active/5 from 2s, ended 4s", "p/active/6 from 4s, running")
		// At 4s the new epoch's answer stops p's active of epoch 5; the
		// worker says so at once, with p of epoch 6 running.
		got := runningAt(f)
		want := []string{"0s:", "1s:", "2s:", "3s:p", "4s:p", "4s:p"}
		if !slices.Equal(got, want) {
			t.Errorf("heartbeats (at:running) %v, want %v", got, want)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestReregistration: a new primary knows no session; the worker registers
// again at once and its active runs on, uninterrupted, since the lease
// holds. If the new primary does not grant the active yet, the worker holds
// it as a standby.
func TestReregistration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1000)
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"a"}, Epochs: map[string]uint64{"a": 1}, ActiveLeaseMs: 3000})
		r := newRecorder()
		stop := startHandler(t, f, Config{ID: "w1", Capacity: 1}, r)
		time.Sleep(1500 * time.Millisecond)
		f.failover()
		time.Sleep(time.Second)
		synctest.Wait()
		if f.registered() != 2 {
			t.Fatalf("%d registrations, want 2", f.registered())
		}
		wantRuns(t, r, "a/active/1 from 0s, running")
		f.failover()
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, PendingActives: []string{"a"}, Epochs: map[string]uint64{"a": 1}, ActiveLeaseMs: 3000})
		time.Sleep(time.Second)
		synctest.Wait()
		if f.registered() != 3 {
			t.Fatalf("%d registrations, want 3", f.registered())
		}
		wantRuns(t, r, "a/active/1 from 0s, ended 3s", "a/standby/1 from 3s, running")
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCopyFails: a Run that returns on its own is run again after a
// backoff; an active only while granted: once a heartbeat went that did
// not list it as running, the primary may have granted it elsewhere on
// hearing that, so it waits for the answer.
func TestCopyFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeController(1250)
		f.delay = 500 * time.Millisecond
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"a"}, Standbys: []string{"s"},
			Epochs: map[string]uint64{"a": 1, "s": 1}, ActiveLeaseMs: 3000})
		r := newRecorder()
		r.fail["a"], r.fail["s"] = 1, 2
		stop := startHandler(t, f, Config{ID: "w1", Capacity: 1}, r)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		// Both start on the first answer (0.5s) and fail. s: again after
		// 1s, then after 2s more. a stopped: the worker says so at once
		// (0.5s); that heartbeat, which does not list a, is answered at
		// 1s and grants a again; a's retry is due at 1.5s, with no
		// heartbeat in flight, and it starts then.
		wantRuns(t, r, "a/active/1 from 500ms, ended 500ms", "s/standby/1 from 500ms, ended 500ms",
			"a/active/1 from 1.5s, running", "s/standby/1 from 1.5s, ended 1.5s", "s/standby/1 from 3.5s, running")
		got := runningAt(f)
		want := []string{"0s:", "500ms:", "1.75s:a", "3s:a"}
		if !slices.Equal(got, want) {
			t.Errorf("heartbeats (at:running) %v, want %v", got, want)
		}
		if !strings.Contains(f.logs.String(), "a copy's Run returned before it was stopped") {
			t.Errorf("log:\n%s", f.logs.String())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}
