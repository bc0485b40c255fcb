package worker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// leaveAnswer is an answer with lease 5s and epoch 1 for every task.
func leaveAnswer(gen uint64, actives, pending, standbys []string) *xcev1.HeartbeatResponse {
	epochs := map[string]uint64{}
	for _, l := range [][]string{actives, pending, standbys} {
		for _, t := range l {
			epochs[t] = 1
		}
	}
	return &xcev1.HeartbeatResponse{Generation: gen, Actives: actives, PendingActives: pending, Standbys: standbys,
		Epochs: epochs, ActiveLeaseMs: 5000}
}

// startLeaving runs a worker with handler r against f, whose answer is
// first, and cancels its context at 2.5s.
func startLeaving(t *testing.T, f *fakeController, first *xcev1.HeartbeatResponse, r *recorder, drain time.Duration) *workerRun {
	t.Helper()
	f.answer(first)
	run := runHandler(t, f, Config{ID: "w1", Capacity: 1, DrainTimeout: drain}, r)
	time.Sleep(2500 * time.Millisecond)
	run.cancel()
	synctest.Wait()
	if run.returned() {
		t.Fatalf("Run returned %v at once, with copies to stop", run.err)
	}
	return run
}

// leavingWorker runs a worker with actives a and b and standby s against
// a controller that holds heartbeats for up to 5s (the interval is 1s),
// and cancels its context at 2.5s. An active takes 200ms to stop, a
// standby 100ms.
func leavingWorker(t *testing.T, f *fakeController, drain time.Duration) (*workerRun, *recorder) {
	t.Helper()
	r := newRecorder()
	r.stopActive, r.stopStandby = 200*time.Millisecond, 100*time.Millisecond
	return startLeaving(t, f, leaveAnswer(1, []string{"a", "b"}, nil, []string{"s"}), r, drain), r
}

// beatsUntilLeaving are the heartbeats of leavingWorker up to the one that
// says it leaves, at 2.5s, abandoning the one held since 2s.
var beatsUntilLeaving = []string{
	"0s #1 ack=0 wait=1000 run=",
	"0s #2 ack=1 wait=1000 run=a,b",
	"1s #3 ack=2 wait=1000 run=a,b",
	"2s #4 ack=3 wait=1000 run=a,b abandoned",
}

// TestLeaveHandsOver: once Run's context ends, the actives run on and
// every heartbeat, sent at once, says the worker leaves; the answers move
// the actives away, and the worker stops each and says so at once. Once
// it runs no active and is assigned none, the answer says left and Run
// stops the standbys and returns nil. Through a failover, the worker
// registers again, acknowledges nothing of the new session, and goes on
// leaving with it.
func TestLeaveHandsOver(t *testing.T) {
	for _, tc := range []struct {
		name     string
		failover bool
		beats    []string
		runs     []string
		returns  time.Duration
	}{
		{"moved away", false, []string{
			"2.5s #5 ack=3 wait=1000 run=a,b leaving",
			"3s #6 ack=5 wait=1000 run=a,b leaving abandoned",
			"3.2s #7 ack=5 wait=1000 run=b leaving",
			"4s #8 ack=7 wait=1000 run=b leaving abandoned",
			"4.2s #9 ack=7 wait=1000 run= leaving left",
		}, []string{
			"a/active/1 from 0s, ended 3.2s", "b/active/1 from 0s, ended 4.2s", "s/standby/1 from 0s, ended 4.3s",
			"a/standby/1 from 3.2s, ended 4.3s",
		}, 4300 * time.Millisecond},
		{"through a failover", true, []string{
			"2.5s #5 ack=3 wait=1000 run=a,b leaving refused",
			"3s #6 ack=0 wait=1000 run=a,b leaving",
			"3s #7 ack=6 wait=1000 run=a,b leaving",
			"3.5s #8 ack=7 wait=1000 run=a,b leaving abandoned",
			"3.7s #9 ack=7 wait=1000 run=b leaving",
			"4.5s #10 ack=9 wait=1000 run=b leaving abandoned",
			"4.7s #11 ack=9 wait=1000 run= leaving left",
		}, []string{
			"a/active/1 from 0s, ended 3.7s", "b/active/1 from 0s, ended 4.7s", "s/standby/1 from 0s, ended 4.8s",
			"a/standby/1 from 3.7s, ended 4.8s",
		}, 4800 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newHoldingController(1000, 5000)
				run, r := leavingWorker(t, f, 0)
				time.Sleep(500 * time.Millisecond)
				if tc.failover {
					f.failover()
					time.Sleep(500 * time.Millisecond)
				}
				f.answer(leaveAnswer(2, []string{"b"}, nil, []string{"s", "a"})) // a moves away; a standby stays
				time.Sleep(time.Second)
				f.answer(leaveAnswer(3, nil, nil, []string{"s", "a"})) // b moves away
				wantReturned(t, run, r, tc.returns)
				wantBeats(t, f, slices.Concat(beatsUntilLeaving, tc.beats)...)
				wantRuns(t, r, tc.runs...)
				if want := map[bool]int{false: 1, true: 2}[tc.failover]; f.registered() != want {
					t.Errorf("%d registrations, want %d", f.registered(), want)
				}
				checkBeats(t, f)
			})
		})
	}
}

// TestLeaveWithoutActives: a leaving worker that runs and is assigned no
// active gets left on the heartbeat that says it leaves, and Run returns
// once it stopped its standbys.
func TestLeaveWithoutActives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		r := newRecorder()
		r.stopStandby = 100 * time.Millisecond
		run := startLeaving(t, f, leaveAnswer(1, nil, nil, []string{"s"}), r, 0)
		wantReturned(t, run, r, 2600*time.Millisecond)
		wantBeats(t, f,
			"0s #1 ack=0 wait=1000 run=",
			"0s #2 ack=1 wait=1000 run=",
			"1s #3 ack=2 wait=1000 run=",
			"2s #4 ack=3 wait=1000 run= abandoned",
			"2.5s #5 ack=3 wait=1000 run= leaving left")
		wantRuns(t, r, "s/standby/1 from 0s, ended 2.6s")
	})
}

// grantWhileLeaving runs a worker with handler r against f that runs
// actives and standbys, and holds pending active c as a standby; it
// cancels its context at 2.5s and, at 3s, grants it c and moves active
// moved (if any) away, leaving it a standby there.
func grantWhileLeaving(t *testing.T, f *fakeController, r *recorder, actives, standbys []string, moved string) *workerRun {
	t.Helper()
	run := startLeaving(t, f, leaveAnswer(1, actives, []string{"c"}, standbys), r, 0)
	time.Sleep(500 * time.Millisecond)
	then := append(slices.DeleteFunc(slices.Clone(actives), func(t string) bool { return t == moved }), "c")
	if moved != "" {
		standbys = append(slices.Clone(standbys), moved)
	}
	f.answer(leaveAnswer(2, then, nil, standbys))
	return run
}

// TestLeaveStartsNoActive: a leaving worker holds an active granted to it
// as a standby (the one it ran keeps running), and lists it as running in
// no heartbeat; it hands over the actives it runs as before.
func TestLeaveStartsNoActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		r := newRecorder()
		r.stopActive = 200 * time.Millisecond
		run := grantWhileLeaving(t, f, r, []string{"a"}, nil, "")
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		wantRuns(t, r, "a/active/1 from 0s, running", "c/standby/1 from 0s, running")
		f.answer(leaveAnswer(3, nil, nil, []string{"c"})) // a moves away
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if !run.returned() || run.err != nil {
			t.Fatalf("Run: returned %v, error %v; want nil once every active is handed over", run.returned(), run.err)
		}
		// When a stops depends on when the answer that moves it comes.
		runs := r.snapshot()
		if len(runs) != 2 || runs[0].c != (Copy{"a", Active, 1}) || runs[1].c != (Copy{"c", Standby, 1}) ||
			runs[0].end < 5700*time.Millisecond || runs[0].end != run.at || runs[1].end != run.at {
			t.Errorf("runs %v, Run returned at %v; want a's active and c's standby ended when Run returned", runs, run.at)
		}
		for _, hb := range f.all() {
			if slices.Contains(hb.req.Running, "c") || hb.req.Leaving != (hb.at >= 2500*time.Millisecond) {
				t.Errorf("heartbeat %v", hb)
			}
		}
		checkBeats(t, f)
	})
}

// TestLeaveKeepsAGrantedStandby: the standby a leaving worker holds for an
// active granted to it keeps running while the heartbeats go without it
// (they list only actives), whatever else the worker does meanwhile.
func TestLeaveKeepsAGrantedStandby(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		r := newRecorder()
		r.failIn["s"] = 4500 * time.Millisecond // a copy's return makes the worker reconcile
		grantWhileLeaving(t, f, r, []string{"a"}, []string{"s"}, "")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		wantRuns(t, r, "a/active/1 from 0s, running", "c/standby/1 from 0s, running", "s/standby/1 from 0s, ended 4.5s",
			"s/standby/1 from 5.5s, running")
		checkBeats(t, f)
	})
}

// TestLeaveSaysAtOnceWithAGrantHeld: an answer that grants a leaving
// worker an active it holds as a standby, and moves another away, does not
// hold up the heartbeat that says the other stopped.
func TestLeaveSaysAtOnceWithAGrantHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		r := newRecorder()
		r.stopActive = 200 * time.Millisecond
		grantWhileLeaving(t, f, r, []string{"a", "b"}, nil, "a")
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		wantRuns(t, r, "a/active/1 from 0s, ended 3.2s", "b/active/1 from 0s, running", "c/standby/1 from 0s, running",
			"a/standby/1 from 3.2s, running")
		wantBeats(t, f, append(slices.Clone(beatsUntilLeaving),
			"2.5s #5 ack=3 wait=1000 run=a,b leaving",
			"3s #6 ack=5 wait=1000 run=a,b leaving abandoned",
			"3.2s #7 ack=5 wait=1000 run=b leaving in-flight")...)
		checkBeats(t, f)
	})
}

// wantStoppedAtDeadline checks the runs of leavingWorker whose actives
// stopped at the drain deadline, returning at at: no active started since.
// (Their grants hold until a heartbeat goes without them, so the worker
// may start a standby of each before it leaves.)
func wantStoppedAtDeadline(t *testing.T, r *recorder, at time.Duration) {
	t.Helper()
	runs := r.snapshot()
	if len(runs) < 3 || runs[0].c.Task != "a" || runs[1].c.Task != "b" || runs[2].c.Task != "s" {
		t.Fatalf("runs %v", runs)
	}
	for _, x := range runs[:2] {
		if x.end != at || !errors.Is(x.cause, ErrFenced) {
			t.Errorf("%v: cause %v; want stopped at the deadline, returning at %v", x, x.cause, at)
		}
	}
	for _, x := range runs[3:] {
		if x.c.Role == Active {
			t.Errorf("%v: an active started while leaving", x)
		}
	}
}

// TestLeaveDeadline: the answers keep the actives. Past DrainTimeout the
// worker stops them, says it leaves now with nothing running, and Run
// returns once the answer says left; without that answer, 5s later.
func TestLeaveDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		leaves leavePolicy
		// returns is when Run returns: the actives stop at 7.2s, the
		// standby 100ms after the worker stops it.
		returns time.Duration
	}{
		{"left", leftAsPrimary, 7300 * time.Millisecond},
		{"no answer", leftHang, 12300 * time.Millisecond},
		// Answered without left, and so assigned a and b still, the
		// heartbeats that leave now must not go back to back
		// (checkBeats; TestLeaveNowPaced).
		{"never left", leftNever, 12300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newHoldingController(1000, 5000)
				f.leaves = tc.leaves
				run, r := leavingWorker(t, f, 4500*time.Millisecond)
				time.Sleep(4499 * time.Millisecond)
				synctest.Wait()
				wantRuns(t, r, "a/active/1 from 0s, running", "b/active/1 from 0s, running", "s/standby/1 from 0s, running")
				wantReturned(t, run, r, tc.returns)
				wantStoppedAtDeadline(t, r, 7200*time.Millisecond)
				all := beats(f)
				want := append(slices.Clone(beatsUntilLeaving),
					"2.5s #5 ack=3 wait=1000 run=a,b leaving",
					"3.5s #6 ack=5 wait=1000 run=a,b leaving",
					"4.5s #7 ack=6 wait=1000 run=a,b leaving",
					"5.5s #8 ack=7 wait=1000 run=a,b leaving",
					"6.5s #9 ack=8 wait=1000 run=a,b leaving abandoned")
				if len(all) < len(want) || !slices.Equal(all[:len(want)], want) {
					t.Fatalf("heartbeats:\n  %s\nwant first:\n  %s", strings.Join(all, "\n  "), strings.Join(want, "\n  "))
				}
				// Once the actives stopped (7.2s), heartbeats that may
				// still list one of them are abandoned for the next.
				var leaveNow []heartbeat
				for _, hb := range f.all()[len(want):] {
					if hb.at < 7200*time.Millisecond {
						t.Errorf("heartbeat %v before the actives stopped", hb)
					}
					if hb.req.LeaveNow {
						leaveNow = append(leaveNow, hb)
					} else if !hb.abandoned || !hb.req.Leaving || len(leaveNow) > 0 {
						t.Errorf("heartbeat %v, before it leaves now", hb)
					}
				}
				if len(leaveNow) == 0 {
					t.Fatalf("no heartbeat leaves now:\n  %s", strings.Join(all, "\n  "))
				}
				first := leaveNow[0]
				if first.at != 7200*time.Millisecond {
					t.Errorf("heartbeats that leave now: %v; want the first at 7.2s", leaveNow)
				}
				switch tc.leaves {
				case leftAsPrimary:
					if len(leaveNow) != 1 || !first.left {
						t.Errorf("heartbeats that leave now: %v; want one, answered left", leaveNow)
					}
				case leftHang:
					// The client tries again after each attempt timeout,
					// the worker once the call's timeout passed.
					last := leaveNow[len(leaveNow)-1]
					for _, hb := range leaveNow {
						if hb.answered {
							t.Errorf("heartbeat %v answered", hb)
						}
					}
					if last.end != run.at {
						t.Errorf("heartbeats that leave now: %v; want the last given up as Run returned", leaveNow)
					}
				}
				checkBeats(t, f)
			})
		})
	}
}

// TestLeaveDeadlineDefault: DrainTimeout 0 is 30s.
func TestLeaveDeadlineDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		run, r := leavingWorker(t, f, 0)
		wantReturned(t, run, r, 32800*time.Millisecond)
		wantStoppedAtDeadline(t, r, 32700*time.Millisecond)
		if hb, _ := f.last(t); hb.String() != fmt.Sprintf("32.7s #%d ack=%d wait=0 run= leaving leave_now left", hb.req.Seq, hb.req.AcknowledgedSeq) {
			t.Errorf("last heartbeat %v; want one that leaves now at 32.7s, answered left", hb)
		}
		checkBeats(t, f)
	})
}

// TestNoLeave: with DrainTimeout < 0, with a controller that does not hold
// heartbeats (an older primary), or before the worker registered, Run
// stops every copy at once when its context ends, and no heartbeat says
// leaving.
func TestNoLeave(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxWaitMs uint32
		drain     time.Duration
		notReady  bool
		returns   time.Duration
	}{
		{"DrainTimeout < 0", 5000, -time.Nanosecond, false, 2700 * time.Millisecond},
		{"a controller that holds no heartbeat", 0, 0, false, 2700 * time.Millisecond},
		{"not registered", 5000, 0, true, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newHoldingController(1000, tc.maxWaitMs)
				f.answer(leaveAnswer(1, []string{"a"}, nil, []string{"s"}))
				if tc.notReady {
					f.setNotReady(1 << 30)
				}
				r := newRecorder()
				r.stopActive = 200 * time.Millisecond
				run := runHandler(t, f, Config{ID: "w1", Capacity: 1, DrainTimeout: tc.drain}, r)
				time.Sleep(2500 * time.Millisecond)
				run.cancel()
				wantReturned(t, run, r, tc.returns)
				want := []string{"a/active/1 from 0s, ended 2.7s", "s/standby/1 from 0s, ended 2.5s"}
				if tc.notReady {
					want = nil
				}
				wantRuns(t, r, want...)
				for _, hb := range f.all() {
					if hb.req.Leaving || hb.at > 2700*time.Millisecond || (hb.at >= 2500*time.Millisecond && len(hb.req.Running) > 0) {
						t.Errorf("heartbeat %v", hb)
					}
				}
				if tc.maxWaitMs == 0 {
					// One heartbeat an interval, as before.
					wantBeats(t, f, slices.Concat([]string{
						"0s #1 ack=0 wait=0 run=",
						"1s #2 ack=1 wait=0 run=a",
						"2s #3 ack=2 wait=0 run=a",
					}, beats(f)[3:])...)
				}
				checkBeats(t, f)
			})
		})
	}
}

// TestRunErrorsOnlyOnRefusal: with a controller that holds heartbeats as
// with one that does not, Run returns an error when the controller refuses
// the registration, and nil however it leaves (the tests above).
func TestRunErrorsOnlyOnRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		run := runHandler(t, f, Config{ID: "w1", Capacity: 5000}, newRecorder())
		synctest.Wait()
		if !run.returned() || run.err == nil || !strings.Contains(run.err.Error(), "capacity") {
			t.Fatalf("Run: returned %v, error %v; want the controller's refusal", run.returned(), run.err)
		}
	})
}

// TestLeaveNowPaced: a leaving worker whose heartbeat that leaves now is
// answered without left (it is assigned no active) does not send the next
// one at once, again and again, until its wait for left ends.
func TestLeaveNowPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHoldingController(1000, 5000)
		f.leaves = leftNever
		run, r := leavingWorker(t, f, 4500*time.Millisecond)
		time.Sleep(4600 * time.Millisecond) // the actives stop from 7s
		f.answer(leaveAnswer(2, nil, nil, []string{"s"}))
		wantReturned(t, run, r, 12300*time.Millisecond)
		checkBeats(t, f)
		if _, n := f.last(t); n > 20 {
			t.Errorf("%d heartbeats", n)
		}
	})
}
