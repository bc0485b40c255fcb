// Package stopper gives background goroutines one owner.
//
// A Stopper starts goroutines with Go, tells them to stop by closing
// Stopping (and cancelling Context), and waits for every one of them in
// Stop. Once Stop has begun it refuses new work: Go reports false and does
// not run the function, so a goroutine that starts another one while the
// owner stops cannot leak it. The zero Stopper is not usable; call New.
package stopper

import (
	"context"
	"sync"
)

// A Stopper owns a set of goroutines. Its methods are safe for concurrent
// use, from inside the goroutines it owns as well.
type Stopper struct {
	ctx    context.Context
	cancel context.CancelFunc
	// done is closed once stopping has begun and no goroutine runs.
	done chan struct{}

	mu       sync.Mutex
	stopping bool
	running  int
}

// New returns a Stopper that owns no goroutine yet.
func New() *Stopper {
	ctx, cancel := context.WithCancel(context.Background())
	return &Stopper{ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// Go runs f in a new goroutine that Stop waits for, and reports true; once
// Stop has begun it runs nothing and reports false.
func (s *Stopper) Go(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.running++
	go func() {
		defer s.finish()
		f()
	}()
	return true
}

// finish counts a goroutine out; the last one out after Begin closes done.
func (s *Stopper) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running--
	if s.stopping && s.running == 0 {
		close(s.done)
	}
}

// GoCtx is Go for a function that stops when its context ends; the
// context is cancelled when Stop begins.
func (s *Stopper) GoCtx(f func(ctx context.Context)) bool {
	return s.Go(func() { f(s.ctx) })
}

// Stopping is closed when Stop begins.
func (s *Stopper) Stopping() <-chan struct{} { return s.ctx.Done() }

// Context is cancelled when Stop begins.
func (s *Stopper) Context() context.Context { return s.ctx }

// Done is closed once Stop has begun and every goroutine it started has
// returned: what Stop waits for, as a channel to select on.
func (s *Stopper) Done() <-chan struct{} { return s.done }

// Stop refuses new work, closes Stopping and waits until every goroutine
// it started has returned. It may be called more than once and from
// several goroutines; each call returns once all of them have returned. It
// must not be called from a goroutine the Stopper owns (it would wait for
// itself); such a goroutine calls Begin instead and returns.
func (s *Stopper) Stop() {
	s.Begin()
	<-s.done
}

// Begin starts to stop without waiting: it refuses new work and closes
// Stopping. A goroutine the Stopper owns may call it.
func (s *Stopper) Begin() {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		if s.running == 0 {
			close(s.done)
		}
	}
	s.mu.Unlock()
	s.cancel()
}
