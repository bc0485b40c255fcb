package placement

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xce/xce/state"
)

// The grant rule, case by case. T = 10s, M = 2s: a holder blocks a task for
// 12s after it was last heard; a new primary vouches only for
// self-reported tasks during its first 12s.
func TestGrantRule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	holds := func(ts ...string) map[string]bool {
		m := map[string]bool{}
		for _, t := range ts {
			m[t] = true
		}
		return m
	}
	for _, tc := range []struct {
		name    string
		now     float64
		fresh   bool
		workers map[string]GrantWorker
		want    []string          // granted
		waiting map[string]string // task -> reason
		next    float64           // -1: zero
	}{
		{
			name: "fresh cluster: granted at once", now: 1, fresh: true,
			workers: map[string]GrantWorker{"A": {Heard: at(1)}},
			want:    []string{"t"}, next: -1,
		},
		{
			name: "new primary: an active nobody reports waits for the term to know",
			now:  5, workers: map[string]GrantWorker{"A": {Heard: at(5)}},
			waiting: map[string]string{"t": WaitTerm}, next: 12,
		},
		{
			name: "new primary: the worker that runs it keeps it",
			now:  5, workers: map[string]GrantWorker{"A": {Heard: at(5), Holds: holds("t")}},
			want: []string{"t"}, next: -1,
		},
		{
			name: "the term knows who runs what after T + M",
			now:  12, workers: map[string]GrantWorker{"A": {Heard: at(12)}},
			want: []string{"t"}, next: -1,
		},
		{
			name: "moved: the previous worker still runs it",
			now:  20, workers: map[string]GrantWorker{"A": {Heard: at(20)}, "X": {Heard: at(19), Holds: holds("t")}},
			waiting: map[string]string{"t": WaitHolder}, next: 31,
		},
		{
			name: "moved: the previous worker reported it stopped",
			now:  20, workers: map[string]GrantWorker{"A": {Heard: at(20)}, "X": {Heard: at(19), Holds: holds("u")}},
			want: []string{"t"}, next: -1,
		},
		{
			name: "moved: the previous worker silent, just before T + M",
			now:  30.999, workers: map[string]GrantWorker{"A": {Heard: at(30)}, "X": {Heard: at(19), Holds: holds("t")}},
			waiting: map[string]string{"t": WaitHolder}, next: 31,
		},
		{
			name: "moved: the previous worker silent for T + M",
			now:  31, workers: map[string]GrantWorker{"A": {Heard: at(30)}, "X": {Heard: at(19), Holds: holds("t")}},
			want: []string{"t"}, next: -1,
		},
		{
			name: "two previous holders: the later one decides",
			now:  25, workers: map[string]GrantWorker{"A": {Heard: at(25)},
				"X": {Heard: at(14), Holds: holds("t")}, "Y": {Heard: at(20), Holds: holds("t")}},
			waiting: map[string]string{"t": WaitHolder}, next: 32,
		},
		{
			name: "new primary: self-held, but another also reports it",
			now:  5, workers: map[string]GrantWorker{"A": {Heard: at(5), Holds: holds("t")}, "X": {Heard: at(4), Holds: holds("t")}},
			waiting: map[string]string{"t": WaitHolder}, next: 16,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := GrantInput{
				Now: at(tc.now), TermStart: t0, Fresh: tc.fresh, SessionTimeout: 10 * time.Second, Margin: 2 * time.Second,
				Actives: map[string]string{"t": "A"}, Holders: map[string][]string{}, Workers: tc.workers,
			}
			for _, id := range slices.Sorted(maps.Keys(tc.workers)) {
				for task := range tc.workers[id].Holds {
					in.Holders[task] = append(in.Holders[task], id)
				}
			}
			d := grants(in)
			if got := slices.Sorted(maps.Keys(d.Granted)); !slices.Equal(got, tc.want) {
				t.Errorf("granted %v, want %v", got, tc.want)
			}
			if tc.waiting == nil {
				tc.waiting = map[string]string{}
			}
			if !maps.Equal(d.Waiting, tc.waiting) {
				t.Errorf("waiting %v, want %v", d.Waiting, tc.waiting)
			}
			var next time.Time
			if tc.next >= 0 {
				next = at(tc.next)
			}
			if !d.Next.Equal(next) {
				t.Errorf("next %v, want %v", d.Next.Sub(t0), next.Sub(t0))
			}
		})
	}
}

// Next is the earliest of the instants the waiting tasks wait for, and an
// active with no worker waits for no instant.
func TestGrantNextIsTheEarliest(t *testing.T) {
	t0 := time.Unix(1000, 0)
	in := GrantInput{
		Now: t0.Add(20 * time.Second), TermStart: t0, SessionTimeout: 10 * time.Second, Margin: 2 * time.Second,
		Actives: map[string]string{"a": "A", "b": "A", "c": ""},
		Holders: map[string][]string{"a": {"X"}, "b": {"Y"}},
		Workers: map[string]GrantWorker{
			"A": {Heard: t0.Add(20 * time.Second)},
			"X": {Heard: t0.Add(15 * time.Second), Holds: map[string]bool{"a": true}},
			"Y": {Heard: t0.Add(10 * time.Second), Holds: map[string]bool{"b": true}},
		},
	}
	d := grants(in)
	if len(d.Granted) != 0 || d.Waiting["c"] != WaitNoOne || !d.Next.Equal(t0.Add(22*time.Second)) {
		t.Fatalf("%+v", d)
	}
}

// beatRunning heartbeats with a running report.
func (r *rig) beatRunning(id string, running ...string) Answer {
	r.t.Helper()
	a, err := r.svc.Heartbeat(id, nil, nil, running)
	if err != nil {
		r.t.Fatalf("heartbeat %s: %v", id, err)
	}
	return a
}

// A moved active is pending on its new worker until the previous worker
// reports it stopped; the answer carries epochs and the lease.
func TestMovedActiveWaitsForItsPreviousWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0")
		r.commit(map[string]state.Placement{"t0": {Active: "w1", Standbys: []string{"w2"}}})
		// The loop, settling all along, plans nothing: the test moves the
		// active itself, once the term knows who runs what.
		r.svc.cfg.Settle = time.Hour
		defer r.establish(1)()
		r.register("w1", 1)
		r.register("w2", 1)
		if a := r.beatRunning("w1", "t0"); !slices.Equal(a.Actives, []string{"t0"}) || len(a.PendingActives) != 0 {
			t.Fatalf("w1, running t0 it is assigned, got %+v", a)
		}
		for range 40 {
			r.beatRunning("w1", "t0")
			r.beatRunning("w2")
			settle(100 * time.Millisecond)
		}
		r.commit(map[string]state.Placement{"t0": {Active: "w2", Standbys: []string{"w1"}}})
		a := r.beatRunning("w2")
		if len(a.Actives) != 0 || !slices.Equal(a.PendingActives, []string{"t0"}) {
			t.Fatalf("w2 while w1 runs t0: %+v, want t0 pending", a)
		}
		if _, ok := a.Epochs["t0"]; !ok || a.ActiveLease != sessionTimeout-sessionTimeout/5 {
			t.Fatalf("epochs %v lease %s", a.Epochs, a.ActiveLease)
		}
		if a := r.beatRunning("w1", "t0"); len(a.Actives) != 0 || !slices.Equal(a.Standbys, []string{"t0"}) {
			t.Fatalf("w1 after the move: %+v, want t0 as standby only", a)
		}
		if a := r.beatRunning("w2"); len(a.Actives) != 0 {
			t.Fatalf("w2 granted t0 while w1 still reports it running: %+v", a)
		}
		r.beatRunning("w1")
		if a := r.beatRunning("w2"); !slices.Equal(a.Actives, []string{"t0"}) || len(a.PendingActives) != 0 {
			t.Fatalf("w2 once w1 stopped t0: %+v, want it granted", a)
		}
	})
}

// A previous worker that goes silent holds its actives until
// session_timeout + grant_margin after it was last heard, even when it
// registers again in between, until it reports.
func TestSilentPreviousWorkerBlocksUntilItsLeaseRanOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0")
		r.commit(map[string]state.Placement{"t0": {Active: "w1", Standbys: []string{"w2"}}})
		r.svc.cfg.Settle = time.Millisecond
		defer r.establish(1)()
		r.register("w1", 1)
		r.register("w2", 1)
		caught := map[string]int64{"t0": 0}
		if a := r.beatRunning("w1", "t0"); !slices.Equal(a.Actives, []string{"t0"}) {
			t.Fatalf("w1: %+v", a)
		}
		last := time.Now()
		expiry := sessionTimeout + sessionTimeout/5
		for time.Since(last) < expiry {
			a, err := r.svc.Heartbeat("w2", caught, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Actives) != 0 {
				t.Fatalf("w2 granted t0 %v after w1 was last heard, before %v", time.Since(last), expiry)
			}
			settle(100 * time.Millisecond)
		}
		if p := r.placement("t0"); p.Active != "w2" {
			t.Fatalf("t0 placed %+v after w1 expired", p)
		}
		a, _ := r.svc.Heartbeat("w2", caught, nil, nil)
		if !slices.Equal(a.Actives, []string{"t0"}) {
			t.Fatalf("w2 at %v after w1 was last heard: %+v, want t0 granted", time.Since(last), a)
		}
	})
}

// A worker that comes back after its session expired still holds, for
// grants, what it held, until it reports.
func TestReturningWorkerHoldsUntilItReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t0")
		r.commit(map[string]state.Placement{"t0": {Active: "w1", Standbys: []string{"w2"}}})
		r.svc.cfg.Settle = time.Millisecond
		defer r.establish(1)()
		r.register("w1", 1)
		r.register("w2", 1)
		caught := map[string]int64{"t0": 0}
		for range 10 {
			r.beatRunning("w1", "t0")
			r.svc.Heartbeat("w2", caught, nil, nil)
			settle(100 * time.Millisecond)
		}
		// w1, last heard at 0.9 s, expires at 3.9 s; its lease has surely
		// run out at 4.5 s; the term knows who runs what from 3.6 s.
		for range 33 {
			r.svc.Heartbeat("w2", caught, nil, nil)
			settle(100 * time.Millisecond)
		}
		if p := r.placement("t0"); p.Active != "w2" {
			t.Fatalf("t0 placed %+v after w1 expired", p)
		}
		if _, err := r.svc.Register("w1", 1, ""); err != nil {
			t.Fatal(err)
		}
		if a, _ := r.svc.Heartbeat("w2", caught, nil, nil); len(a.Actives) != 0 {
			t.Fatalf("w2 granted t0 while w1, back, has not reported: %+v", a)
		}
		r.beatRunning("w1")
		if a, _ := r.svc.Heartbeat("w2", caught, nil, nil); !slices.Equal(a.Actives, []string{"t0"}) {
			t.Fatalf("w2 once w1 reported: %+v", a)
		}
	})
}

// A new primary grants at once the actives their workers report running,
// and the others only once the previous primary's leases have run out.
func TestNewPrimaryGrantsOnlyWhatItCanVouchFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		r.submit("t0", "t1")
		r.commit(map[string]state.Placement{"t0": {Active: "w1"}, "t1": {Active: "w2"}})
		defer r.establish(2)()
		start := time.Now()
		r.register("w1", 1)
		r.register("w2", 1)
		if a := r.beatRunning("w1", "t0"); !slices.Equal(a.Actives, []string{"t0"}) {
			t.Fatalf("w1 reports t0 running: %+v, want it granted at once", a)
		}
		known := sessionTimeout + sessionTimeout/5
		for time.Since(start) < known {
			if a := r.beatRunning("w2"); len(a.Actives) != 0 || !slices.Equal(a.PendingActives, []string{"t1"}) {
				t.Fatalf("w2 at %v into the term: %+v, want t1 pending", time.Since(start), a)
			}
			r.beatRunning("w1", "t0")
			settle(100 * time.Millisecond)
		}
		if a := r.beatRunning("w2"); !slices.Equal(a.Actives, []string{"t1"}) {
			t.Fatalf("w2 after %v: %+v, want t1 granted", time.Since(start), a)
		}
	})
}

// A numbered heartbeat that arrives after a later one of its session (one
// the worker gave up on) is refused and changes nothing: its running report
// is older than what the primary already heard.
func TestStaleHeartbeatRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 0)
		revoke := r.establish(1)
		defer revoke()
		r.register("w1", 1)
		if _, err := r.svc.HeartbeatSeq("w1", 2, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		for _, seq := range []uint64{1, 2} {
			if _, err := r.svc.HeartbeatSeq("w1", seq, nil, nil, []string{"t1"}); !errors.Is(err, ErrStale) {
				t.Fatalf("heartbeat %d after 2: %v, want ErrStale", seq, err)
			}
		}
		if _, err := r.svc.HeartbeatSeq("w1", 3, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		// A new registration starts the numbers again.
		r.register("w1", 1)
		if _, err := r.svc.HeartbeatSeq("w1", 1, nil, nil, nil); err != nil {
			t.Fatalf("first heartbeat of a new session: %v", err)
		}
	})
}
