package placement

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/xce/xce/assign"
)

const replaceDelay = time.Minute

// plannedWorkers returns the workers of the planner's input, by id.
func (r *rig) plannedWorkers() map[string]assign.Worker {
	r.t.Helper()
	_, prev := r.fsm.Assignment()
	r.svc.mu.Lock()
	ts := r.svc.term
	r.svc.mu.Unlock()
	in, _, _ := r.svc.input(ts, prev)
	out := map[string]assign.Worker{}
	for _, w := range in.Workers {
		if _, dup := out[w.ID]; dup {
			r.t.Fatalf("worker %s planned twice", w.ID)
		}
		out[w.ID] = w
	}
	return out
}

// keepBeating heartbeats the workers every 500ms for d.
func (r *rig) keepBeating(d time.Duration, ids ...string) {
	r.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, id := range ids {
			r.beat(id, nil)
		}
		settle(500 * time.Millisecond)
	}
}

// TestAwayWorker: with a replace delay, a worker whose session expires is
// planned as away (capacity 0, its labels, no lags) until it reports again
// or the delay ends; then it is dropped and the assignor plans again.
func TestAwayWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1, func(c *Config) { c.ReplaceDelay = replaceDelay })
		r.submit("t1", "t2")
		defer r.establish(1)()
		if _, err := r.svc.RegisterWith(Registration{Worker: "w1", Capacity: 2, Labels: map[string]string{"zone": "a"}}); err != nil {
			t.Fatal(err)
		}
		r.beat("w1", map[string]int64{"t1": 0})
		r.register("w2", 1)
		settle(time.Second)

		// w1 falls silent: once its session expires it is away.
		r.keepBeating(sessionTimeout+time.Second, "w2")
		ws := r.plannedWorkers()
		w1, ok := ws["w1"]
		if !ok || !w1.Away || w1.Capacity != 0 || w1.Labels["zone"] != "a" || w1.Lags != nil {
			t.Fatalf("w1 after its session expired: %+v (ok %v)", w1, ok)
		}
		if w2 := ws["w2"]; w2.Away || w2.Capacity != 1 {
			t.Fatalf("w2 %+v", w2)
		}
		if got, _, _ := r.svc.Workers(); len(got) != 1 || got[0].ID != "w2" {
			t.Fatalf("sessions %+v", got)
		}
		if away := r.svc.Away(); len(away) != 1 || away[0].ID != "w1" || away[0].Labels["zone"] != "a" ||
			away[0].ReplacedIn <= 0 || away[0].ReplacedIn > replaceDelay {
			t.Fatalf("away %+v", away)
		}

		// It registers again: planned as away until it reports, then live.
		if _, err := r.svc.RegisterWith(Registration{Worker: "w1", Capacity: 2, Labels: map[string]string{"zone": "a"}}); err != nil {
			t.Fatal(err)
		}
		if w1 := r.plannedWorkers()["w1"]; !w1.Away {
			t.Fatalf("w1 registered, not reported yet: %+v", w1)
		}
		r.beat("w1", map[string]int64{"t1": 5})
		if w1 := r.plannedWorkers()["w1"]; w1.Away || w1.Capacity != 2 || w1.Lags["t1"] != 5 {
			t.Fatalf("w1 back: %+v", w1)
		}

		// Silent again: away again, and dropped once the delay ends, which
		// plans again.
		r.keepBeating(sessionTimeout+time.Second, "w2")
		if w1 := r.plannedWorkers()["w1"]; !w1.Away {
			t.Fatalf("w1 silent again: %+v", w1)
		}
		r.keepBeating(replaceDelay-sessionTimeout, "w2")
		plans := r.svc.plans.Load()
		r.keepBeating(2*sessionTimeout, "w2")
		if _, ok := r.plannedWorkers()["w1"]; ok {
			t.Fatal("w1 still planned after its replace delay")
		}
		if r.svc.plans.Load() == plans {
			t.Fatal("no plan when the replace delay ended")
		}
	})
}

// TestNotAway: a worker that never reported is not away, nor any without
// a replace delay; one that leaves gracefully (a planned restart) is.
func TestNotAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1, func(c *Config) { c.ReplaceDelay = replaceDelay })
		r.submit("t1")
		defer r.establish(1)()
		r.register("w1", 1)
		r.register("w2", 1)
		if _, err := r.svc.Register("silent", 1, ""); err != nil {
			t.Fatal(err)
		}
		settle(time.Second)
		if _, err := r.svc.Beat(context.Background(), Beat{Worker: "w1", Leaving: true, LeaveNow: true}); err != nil {
			t.Fatal(err)
		}
		r.keepBeating(sessionTimeout+time.Second, "w2")
		ws := r.plannedWorkers()
		if w1, ok := ws["w1"]; !ok || !w1.Away {
			t.Fatalf("w1 left gracefully and is planned as %+v (planned: %v), want away", w1, ok)
		}
		if _, ok := ws["silent"]; ok {
			t.Fatal("a worker that never reported is away")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, 1)
		r.submit("t1")
		defer r.establish(1)()
		r.register("w1", 1)
		r.register("w2", 1)
		settle(time.Second)
		r.keepBeating(sessionTimeout+time.Second, "w2")
		if _, ok := r.plannedWorkers()["w1"]; ok {
			t.Fatal("away without a replace delay")
		}
	})
}

// TestAwayBound: no more than MaxWorkers workers are away at once; the
// rest are replaced at once.
func TestAwayBound(t *testing.T) {
	r := newRig(t, 0, func(c *Config) { c.ReplaceDelay = replaceDelay })
	ts := &termState{away: map[string]awayWorker{}}
	now := time.Now()
	for i := range MaxWorkers {
		ts.away[string(rune('a'+i%26))+time.Duration(i).String()] = awayWorker{until: now}
	}
	if r.svc.away(ts, &session{id: "one-more", reported: true}, now) {
		t.Fatal("away beyond MaxWorkers")
	}
	if _, ok := ts.away["one-more"]; ok || len(ts.away) != MaxWorkers {
		t.Fatalf("%d away", len(ts.away))
	}
}
