package stopper

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestStopWaitsForEveryGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		var done atomic.Int32
		for i := range 3 {
			s.Go(func() {
				<-s.Stopping()
				time.Sleep(time.Duration(i) * time.Second) // cleanup that takes a while
				done.Add(1)
			})
		}
		s.GoCtx(func(ctx context.Context) {
			<-ctx.Done()
			done.Add(1)
		})
		start := time.Now()
		s.Stop()
		if n := done.Load(); n != 4 {
			t.Fatalf("Stop returned with %d of 4 goroutines done", n)
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Fatalf("Stop took %v, want the slowest goroutine's 2s", d)
		}
	})
}

func TestGoAfterStopRunsNothing(t *testing.T) {
	s := New()
	s.Stop()
	if s.Go(func() { t.Error("ran after Stop") }) {
		t.Fatal("Go after Stop reported true")
	}
	if s.GoCtx(func(context.Context) { t.Error("ran after Stop") }) {
		t.Fatal("GoCtx after Stop reported true")
	}
	s.Stop() // a second Stop returns at once
}

// A goroutine that starts another while the owner stops either gets it
// started (and Stop waits for it) or is refused; nothing outlives Stop.
func TestGoFromAnOwnedGoroutineDuringStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		var started, finished atomic.Int32
		s.Go(func() {
			for {
				ok := s.Go(func() {
					started.Add(1)
					time.Sleep(time.Millisecond)
					finished.Add(1)
				})
				if !ok {
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
		time.Sleep(10 * time.Millisecond)
		s.Stop()
		if started.Load() == 0 || started.Load() != finished.Load() {
			t.Fatalf("started %d, finished %d by the time Stop returned", started.Load(), finished.Load())
		}
	})
}

func TestBeginFromAnOwnedGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		s.Go(func() { s.Begin() })
		select {
		case <-s.Stopping():
		case <-time.After(time.Second):
			t.Fatal("Begin did not close Stopping")
		}
		s.Stop()
	})
}

// Done closes once stopping has begun and the last goroutine returned,
// never before.
func TestDoneAfterTheLastGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New()
		release := make(chan struct{})
		s.Go(func() { <-release })
		s.Begin()
		synctest.Wait()
		select {
		case <-s.Done():
			t.Fatal("Done closed while a goroutine runs")
		default:
		}
		close(release)
		synctest.Wait()
		select {
		case <-s.Done():
		default:
			t.Fatal("Done still open after every goroutine returned")
		}
		s.Stop() // returns at once
	})
}

// A Stopper that never ran anything is done as soon as it begins to stop,
// and not before.
func TestDoneWithNothingRunning(t *testing.T) {
	s := New()
	select {
	case <-s.Done():
		t.Fatal("Done closed before Stop began")
	default:
	}
	s.Begin()
	s.Begin() // a second Begin closes nothing twice
	<-s.Done()
}
