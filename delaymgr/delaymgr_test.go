package delaymgr

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// recorder collects callback events; callbacks run on the owner goroutine
// while the test reads from its own, hence the mutex.
type recorder struct {
	mu     sync.Mutex
	start  time.Time
	events []string
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

// add records name at the current fake offset from start.
func (r *recorder) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf("%s@%v", name, time.Since(r.start)))
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// advance sleeps d of fake time and waits for the bubble to settle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func TestAfterFiresOnceAtRoundedInstant(t *testing.T) {
	for _, tc := range []struct {
		d, want time.Duration
	}{
		{-5 * time.Millisecond, 0},
		{0, 0},
		{time.Microsecond, time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{1500 * time.Microsecond, 2 * time.Millisecond},
		{time.Second, time.Second},
	} {
		t.Run(tc.d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := New(nil)
				defer m.Stop()
				start := time.Now()
				var runs atomic.Int32
				var at atomic.Value
				h := m.After(tc.d, func() {
					runs.Add(1)
					at.Store(time.Now())
				})
				synctest.Wait()
				if tc.want > 0 {
					advance(tc.want - time.Nanosecond)
					if n := runs.Load(); n != 0 {
						t.Fatalf("fired %d times before %v", n, tc.want)
					}
				}
				advance(time.Hour)
				if n := runs.Load(); n != 1 {
					t.Fatalf("fired %d times, want 1", n)
				}
				if got, want := at.Load().(time.Time), start.Add(tc.want); !got.Equal(want) {
					t.Errorf("fired at +%v, want +%v", got.Sub(start), tc.want)
				}
				if !h.Stopped() {
					t.Error("Stopped() = false after a one-shot fired")
				}
			})
		})
	}
}

func TestOrderingAndTies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		r := newRecorder()
		m.After(30*time.Millisecond, func() { r.add("c") })
		m.After(10*time.Millisecond, func() { r.add("a1") })
		m.After(20*time.Millisecond, func() { r.add("b") })
		m.After(9500*time.Microsecond, func() { r.add("a2") }) // rounds to 10ms
		m.After(10*time.Millisecond, func() { r.add("a3") })
		m.After(0, func() { r.add("now") })
		advance(time.Second)
		want := []string{"now@0s", "a1@10ms", "a2@10ms", "a3@10ms", "b@20ms", "c@30ms"}
		if got := r.get(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestAfterFromCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		r := newRecorder()
		m.After(10*time.Millisecond, func() {
			r.add("outer")
			m.After(5*time.Millisecond, func() { r.add("inner") })
			m.After(0, func() { r.add("asap") })
		})
		advance(time.Second)
		want := []string{"outer@10ms", "asap@10ms", "inner@15ms"}
		if got := r.get(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestEveryNoDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		r := newRecorder()
		h := m.Every(10*time.Millisecond, func() {
			r.add("tick")
			time.Sleep(3 * time.Millisecond) // work must not shift later periods
		})
		advance(55 * time.Millisecond)
		h.Cancel()
		advance(time.Second)
		want := []string{"tick@10ms", "tick@20ms", "tick@30ms", "tick@40ms", "tick@50ms"}
		if got := r.get(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		if !h.Stopped() {
			t.Error("Stopped() = false after Cancel")
		}
	})
}

func TestEverySlowCallbackSkipsPeriods(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		r := newRecorder()
		var n atomic.Int32
		h := m.Every(10*time.Millisecond, func() {
			r.add("tick")
			if n.Add(1) == 1 {
				time.Sleep(25 * time.Millisecond) // misses the 20ms and 30ms periods
			}
		})
		m.After(35*time.Millisecond, func() { r.add("other") }) // queued behind the slow callback
		advance(65 * time.Millisecond)
		h.Cancel()
		want := []string{"tick@10ms", "other@35ms", "tick@40ms", "tick@50ms", "tick@60ms"}
		if got := r.get(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestEveryPanicsOnNonPositivePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		for _, d := range []time.Duration{0, -time.Millisecond} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("Every(%v) did not panic", d)
					}
				}()
				m.Every(d, func() {})
			}()
		}
	})
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		r := newRecorder()

		// Before firing, and twice.
		h1 := m.After(10*time.Millisecond, func() { r.add("h1") })
		// After firing.
		h2 := m.After(5*time.Millisecond, func() { r.add("h2") })
		// Periodic, cancelled from outside after two runs.
		h3 := m.Every(4*time.Millisecond, func() { r.add("h3") })
		// Periodic, cancelling itself on its third run.
		var self atomic.Pointer[Handle]
		var n4 atomic.Int32
		self.Store(m.Every(7*time.Millisecond, func() {
			r.add("h4")
			if n4.Add(1) == 3 {
				self.Load().Cancel()
				self.Load().Cancel()
			}
		}))
		// One-shot cancelling itself.
		var self5 atomic.Pointer[Handle]
		self5.Store(m.After(1*time.Millisecond, func() {
			r.add("h5")
			self5.Load().Cancel()
		}))

		advance(2 * time.Millisecond)
		h1.Cancel()
		h1.Cancel()
		advance(7 * time.Millisecond) // now 9ms
		h2.Cancel()
		h3.Cancel()
		advance(time.Second)

		want := []string{"h5@1ms", "h3@4ms", "h2@5ms", "h4@7ms", "h3@8ms", "h4@14ms", "h4@21ms"}
		if got := r.get(); !slices.Equal(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
		for i, h := range []*Handle{h1, h2, h3, self.Load(), self5.Load()} {
			if !h.Stopped() {
				t.Errorf("handle %d: Stopped() = false", i+1)
			}
		}
		if len(m.tasks) != 0 { // owner is idle (bubble settled), so this read is safe
			t.Errorf("%d tasks left in the heap", len(m.tasks))
		}
	})
}

// TestCancelRace cancels many handles, from two goroutines each, at exactly
// the instant they are due. Cancel's guarantee is checked at its commit point:
// when Cancel finds the task still pending, its callback must never start
// again (the callback checks the flag the canceller sets once Cancel
// returned); a one-shot either is cancelled or runs, exactly once, and a
// periodic task runs at most once (its due run) and never again.
// (A callback may start a few instructions after the commit that a
// concurrent Cancel observed as "running"; so the flag is set only for a
// Cancel that won.)
func TestCancelRace(t *testing.T) {
	const (
		iterations = 200
		n          = 32
		due        = 10 * time.Millisecond
	)
	for range iterations {
		synctest.Test(t, func(t *testing.T) {
			m := New(nil)
			var (
				handles        [n]*Handle
				runs           [n]atomic.Int32
				cancelReturned [n]atomic.Bool
				won            [n]atomic.Int32
			)
			for i := range n {
				f := func() {
					if cancelReturned[i].Load() {
						t.Errorf("handle %d: callback started after Cancel returned", i)
					}
					runs[i].Add(1)
				}
				if i%2 == 0 {
					handles[i] = m.After(due, f)
				} else {
					handles[i] = m.Every(due, f)
				}
			}
			var wg sync.WaitGroup
			for i := range 2 * n {
				wg.Go(func() {
					h := handles[i%n]
					time.Sleep(due) // fake time: race Cancel against the timer firing
					if h.cancel() == statePending {
						won[i%n].Add(1)
						cancelReturned[i%n].Store(true)
					}
					h.Cancel() // the public path, concurrently with the above
				})
			}
			wg.Wait()
			advance(10 * due) // a periodic task must not run again
			m.Stop()
			for i := range n {
				w, r := won[i].Load(), runs[i].Load()
				switch {
				case w > 1:
					t.Errorf("handle %d: %d cancels found it pending", i, w)
				case i%2 == 0 && w+r != 1: // one-shot: cancelled xor ran
					t.Errorf("handle %d (After): won = %d, runs = %d; want exactly one", i, w, r)
				case i%2 == 1 && (r > 1 || w+r == 0): // periodic: at most the due run
					t.Errorf("handle %d (Every): won = %d, runs = %d", i, w, r)
				}
			}
		})
	}
}

func TestConcurrentCancelManyGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		defer m.Stop()
		var runs atomic.Int32
		h := m.Every(time.Millisecond, func() { runs.Add(1) })
		advance(3 * time.Millisecond)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(h.Cancel)
		}
		wg.Wait()
		advance(time.Second)
		if got := runs.Load(); got != 3 {
			t.Errorf("runs = %d, want 3", got)
		}
	})
}

func TestStopWaitsForCallbackAndCancelsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New(nil)
		start := time.Now()
		var finished, pendingRan atomic.Bool
		m.After(10*time.Millisecond, func() {
			time.Sleep(50 * time.Millisecond) // fake time: a callback that runs long
			finished.Store(true)
		})
		pending := m.After(10*time.Millisecond, func() { pendingRan.Store(true) }) // same instant, queued behind
		later := m.Every(30*time.Millisecond, func() { pendingRan.Store(true) })
		advance(20 * time.Millisecond)

		var wg sync.WaitGroup
		wg.Go(m.Stop) // concurrent Stop calls both wait
		m.Stop()
		if !finished.Load() {
			t.Error("Stop returned before the running callback finished")
		}
		if got := time.Since(start); got != 60*time.Millisecond {
			t.Errorf("Stop returned at +%v, want +60ms", got)
		}
		wg.Wait()
		m.Stop() // idempotent

		// After Stop: scheduling neither blocks nor fires.
		var ran atomic.Bool
		h1 := m.After(0, func() { ran.Store(true) })
		h2 := m.Every(time.Millisecond, func() { ran.Store(true) })
		h1.Cancel()
		advance(time.Second)
		if ran.Load() || pendingRan.Load() {
			t.Error("a task fired after Stop")
		}
		for i, h := range []*Handle{pending, later, h1, h2} {
			if !h.Stopped() {
				t.Errorf("handle %d: Stopped() = false after Stop", i)
			}
		}
		// Returning from the bubble with the owner goroutine alive would fail
		// the test, so reaching here also shows Stop left no goroutine behind.
	})
}

func TestRoundUp(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{-1, 0}, {0, 0}, {1, time.Millisecond}, {time.Millisecond, time.Millisecond},
		{time.Millisecond + 1, 2 * time.Millisecond}, {1<<63 - 1, (1<<63 - 1) / time.Millisecond * time.Millisecond},
	} {
		if got := roundUp(tc.in); got != tc.want {
			t.Errorf("roundUp(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func BenchmarkAfterCancel(b *testing.B) {
	m := New(nil)
	defer m.Stop()
	f := func() {}
	for b.Loop() {
		m.After(time.Hour, f).Cancel()
	}
}
