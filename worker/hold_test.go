package worker

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// beats returns every heartbeat f received, as heartbeat.String shows it.
func beats(f *fakeController) []string {
	var out []string
	for _, hb := range f.all() {
		out = append(out, hb.String())
	}
	return out
}

// wantBeats fails unless f received exactly the heartbeats want.
func wantBeats(t *testing.T, f *fakeController, want ...string) {
	t.Helper()
	if got := beats(f); !slices.Equal(got, want) {
		t.Fatalf("heartbeats:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// checkBeats checks what every heartbeat f received must satisfy: seqs
// grow (one abandoned before it reached f leaves a gap), or stay for the
// client's next attempt at one given up; wait_ms is at most the
// controller's max_wait_ms and the interval, 0 when it holds none or the
// worker leaves now; a worker that leaves now runs no active; only a
// controller that holds heartbeats hears of leaving; no storm.
func checkBeats(t *testing.T, f *fakeController) {
	t.Helper()
	all := f.all()
	for i, hb := range all {
		r := hb.req
		if i > 0 && r.Seq <= all[i-1].req.Seq && (r.Seq != all[i-1].req.Seq || !all[i-1].abandoned) {
			t.Errorf("heartbeat %v follows #%d", hb, all[i-1].req.Seq)
		}
		if r.WaitMs > min(f.maxWaitMs, f.intervalMs) || (r.LeaveNow && r.WaitMs != 0) {
			t.Errorf("heartbeat %v: wait_ms %d (max_wait_ms %d, interval %dms)", hb, r.WaitMs, f.maxWaitMs, f.intervalMs)
		}
		if r.LeaveNow && (!r.Leaving || len(r.Running) > 0) {
			t.Errorf("heartbeat %v leaves now but is not leaving or runs actives", hb)
		}
		if f.maxWaitMs == 0 && r.Leaving {
			t.Errorf("heartbeat %v: leaving, to a controller that does not hand actives over", hb)
		}
	}
	f.mu.Lock()
	storm := f.storm
	f.mu.Unlock()
	if storm {
		t.Errorf("a heartbeat storm: %d heartbeats from %v to %v, more than %d at one instant",
			len(all), all[0].at, all[len(all)-1].at, stormBeats)
	}
}

// workerGoroutines returns the stacks of the goroutines, other than the
// caller's, that run the worker's code, the client's, a handler's or the
// fake controller's.
func workerGoroutines() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, f := range []string{"worker.(*Worker)", "worker.(*recorder)", "worker.(*fakeController)", "xce/client."} {
			if strings.Contains(g, f) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}

// wantReturned waits until at and fails unless run's Run returned nil
// then, with no copy running and no goroutine left behind.
func wantReturned(t *testing.T, run *workerRun, r *recorder, at time.Duration) {
	t.Helper()
	time.Sleep(at - time.Since(r.t0))
	synctest.Wait()
	if !run.returned() {
		t.Fatalf("Run has not returned at %v", time.Since(r.t0))
	}
	if run.err != nil || run.at != at {
		t.Errorf("Run returned %v at %v, want nil at %v", run.err, run.at, at)
	}
	for _, x := range r.snapshot() {
		if !x.ended || x.end > run.at {
			t.Errorf("%v: Run returned at %v", x, run.at)
		}
	}
	if gs := workerGoroutines(); len(gs) > 0 {
		t.Errorf("goroutines left after Run returned:\n%s", strings.Join(gs, "\n\n"))
	}
}

// TestHeldHeartbeats: with a controller that holds heartbeats, each goes
// with wait_ms = min(max_wait_ms, interval) and the seq of the last answer
// acted on, the next one as soon as one is answered, so a quiet worker
// sends one a wait and a change reaches it at once. A registration starts
// acknowledged_seq again from 0.
func TestHeldHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		r := newRecorder()
		run := runHandler(t, f, Config{ID: "w1", Capacity: 1, DrainTimeout: -1}, r)
		time.Sleep(2500 * time.Millisecond)
		// The heartbeat held since 2s is answered now, and a starts.
		f.answer(&xcev1.HeartbeatResponse{Generation: 2, Actives: []string{"a"}, Epochs: map[string]uint64{"a": 1}, ActiveLeaseMs: 5000})
		synctest.Wait()
		wantRuns(t, r, "a/active/1 from 2.5s, running")
		time.Sleep(2700 * time.Millisecond)
		// A new primary: the held heartbeat is refused, the worker
		// registers again and acknowledges nothing of the new session
		// (its first heartbeat is not held), and a runs on.
		f.failover()
		time.Sleep(1800 * time.Millisecond)
		synctest.Wait()
		wantBeats(t, f,
			"0s #1 ack=0 wait=1000 run=",
			"0s #2 ack=1 wait=1000 run=",
			"1s #3 ack=2 wait=1000 run=",
			"2s #4 ack=3 wait=1000 run=",
			"2.5s #5 ack=4 wait=1000 run=a",
			"3.5s #6 ack=5 wait=1000 run=a",
			"4.5s #7 ack=6 wait=1000 run=a refused",
			"5.2s #8 ack=0 wait=1000 run=a",
			"5.2s #9 ack=8 wait=1000 run=a",
			"6.2s #10 ack=9 wait=1000 run=a in-flight")
		if f.registered() != 2 {
			t.Errorf("%d registrations, want 2", f.registered())
		}
		// Quiet: one heartbeat a wait, however long.
		time.Sleep(time.Minute)
		synctest.Wait()
		if hb, n := f.last(t); n != 70 || hb.at != 66200*time.Millisecond {
			t.Errorf("%d heartbeats by 67s, the last at %v; want 70, the last at 66.2s", n, hb.at)
		}
		wantRuns(t, r, "a/active/1 from 2.5s, running")
		checkBeats(t, f)
		run.cancel()
		wantReturned(t, run, r, 67*time.Second)
	})
	synctest.Test(t, func(t *testing.T) {
		// A controller that holds for less than the interval holds each
		// heartbeat that long.
		f := newHoldingController(1000, 300)
		r := newRecorder()
		run := runHandler(t, f, Config{ID: "w1", Capacity: 1, DrainTimeout: -1}, r)
		time.Sleep(time.Second)
		synctest.Wait()
		wantBeats(t, f,
			"0s #1 ack=0 wait=300 run=",
			"0s #2 ack=1 wait=300 run=",
			"300ms #3 ack=2 wait=300 run=",
			"600ms #4 ack=3 wait=300 run=",
			"900ms #5 ack=4 wait=300 run= in-flight")
		checkBeats(t, f)
		run.cancel()
		wantReturned(t, run, r, time.Second)
	})
}

// TestUrgentHeartbeats: when an active's Run returns, taken away or
// failed, the worker abandons the heartbeat held and says so in a new one
// at once; it lists only the actives whose Run has not returned.
func TestUrgentHeartbeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		f.answer(&xcev1.HeartbeatResponse{Generation: 1, Actives: []string{"a", "b"}, Standbys: []string{"s"},
			Epochs: map[string]uint64{"a": 1, "b": 1, "s": 1}, ActiveLeaseMs: 5000})
		r := newRecorder()
		r.stopActive = 300 * time.Millisecond
		r.failIn["b"] = 3200 * time.Millisecond
		run := runHandler(t, f, Config{ID: "w1", Capacity: 1, DrainTimeout: -1}, r)
		time.Sleep(1500 * time.Millisecond)
		// a moves away: it stops at 1.8s, and the heartbeat held since
		// 1.5s (it lists a, still stopping) gives way to one without a.
		f.answer(&xcev1.HeartbeatResponse{Generation: 2, Actives: []string{"b"}, Standbys: []string{"s"},
			Epochs: map[string]uint64{"b": 1, "s": 1}, ActiveLeaseMs: 5000})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// b fails at 3.2s: said at once. Its grant waits for the answer
		// to that heartbeat (held: the same as before), at 4.2s, when its
		// retry is due too.
		wantRuns(t, r, "a/active/1 from 0s, ended 1.8s", "b/active/1 from 0s, ended 3.2s", "s/standby/1 from 0s, running",
			"b/active/1 from 4.2s, running")
		wantBeats(t, f,
			"0s #1 ack=0 wait=1000 run=",
			"0s #2 ack=1 wait=1000 run=a,b",
			"1s #3 ack=2 wait=1000 run=a,b",
			"1.5s #4 ack=3 wait=1000 run=a,b abandoned",
			"1.8s #5 ack=3 wait=1000 run=b",
			"2.8s #6 ack=5 wait=1000 run=b abandoned",
			"3.2s #7 ack=5 wait=1000 run=",
			"4.2s #8 ack=7 wait=1000 run=b in-flight")
		checkBeats(t, f)
		run.cancel()
		wantReturned(t, run, r, 4800*time.Millisecond)
	})
}

// TestSettle: an active granted while the standby of its task is still
// stopping starts once the standby returned, before the next heartbeat,
// which lists it as running and so keeps its grant. The worker waits at
// most the interval: past it the heartbeat goes without the active, and
// the active starts on the answer that grants it again.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name        string
		stopStandby time.Duration
		runs        []string
		beats       []string
	}{
		{"within the interval", 400 * time.Millisecond,
			[]string{"p/standby/5 from 0s, ended 1.9s", "p/active/5 from 1.9s, running"},
			[]string{"1.9s #4 ack=3 wait=1000 run=p", "2.9s #5 ack=4 wait=1000 run=p", "3.9s #6 ack=5 wait=1000 run=p in-flight"}},
		{"slower than the interval", 1500 * time.Millisecond,
			[]string{"p/standby/5 from 0s, ended 3s", "p/active/5 from 3.5s, running"},
			[]string{"2.5s #4 ack=3 wait=1000 run=", "3.5s #5 ack=4 wait=1000 run=p in-flight"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newHoldingController(1000, 5000)
				f.answer(&xcev1.HeartbeatResponse{Generation: 1, Standbys: []string{"p"}, Epochs: map[string]uint64{"p": 5}, ActiveLeaseMs: 5000})
				r := newRecorder()
				r.stopStandby = tc.stopStandby
				run := runHandler(t, f, Config{ID: "w1", Capacity: 1, DrainTimeout: -1}, r)
				time.Sleep(1500 * time.Millisecond)
				f.answer(&xcev1.HeartbeatResponse{Generation: 2, Actives: []string{"p"}, Epochs: map[string]uint64{"p": 5}, ActiveLeaseMs: 5000})
				time.Sleep(2500 * time.Millisecond)
				synctest.Wait()
				wantRuns(t, r, tc.runs...)
				wantBeats(t, f, append([]string{
					"0s #1 ack=0 wait=1000 run=",
					"0s #2 ack=1 wait=1000 run=",
					"1s #3 ack=2 wait=1000 run="}, tc.beats...)...)
				checkBeats(t, f)
				run.cancel()
				wantReturned(t, run, r, 4*time.Second)
			})
		})
	}
}
