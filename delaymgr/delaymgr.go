// Package delaymgr runs millisecond one-shot and periodic timers with
// cancellation on an injected clock.
//
// It exists so that an event loop (for example a Raft controller) can
// schedule short re-checks such as "re-evaluate write quorum at T" without
// creating one goroutine or one runtime timer per request. A single owner
// goroutine keeps all tasks in a heap ordered by due time and drives one
// Timer from the Clock. Callbacks run on that goroutine, serially, so they
// must be short; typically they post an event to a channel.
package delaymgr

import (
	"container/heap"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the time source, injected so that tests can run on fake time;
// tests use RealClock inside testing/synctest bubbles or a fake.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is the subset of *time.Timer the Manager needs, abstracted so a fake
// Clock can supply its own. Implementations must follow Go 1.23+ semantics:
// after Stop or Reset returns, no stale value is received from C. The Manager
// nevertheless tolerates spurious wake-ups.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// RealClock returns a Clock backed by package time, for production use and
// for tests running inside testing/synctest bubbles (where time is fake).
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Handle states. A task goes pending -> running -> (pending again if
// periodic | done), or to cancelled from pending or running.
const (
	statePending = iota
	stateRunning
	stateCancelled
	stateDone
)

// Handle identifies one scheduled task so that it can be cancelled; it is
// returned by After and Every.
type Handle struct {
	m      *Manager
	f      func()
	period time.Duration // 0 for one-shot

	mu    sync.Mutex // guards state; the commit point of Cancel's guarantee
	state int

	// Owned by the Manager's goroutine.
	due   time.Time
	seq   uint64
	index int // position in the heap, -1 when not in it
}

// Cancel prevents the callback from starting again: after Cancel returns, f
// will not start (a callback that has already started may finish). It never
// blocks on the callback, so it is safe to call more than once, after the
// task fired, from inside the callback itself, and concurrently.
func (h *Handle) Cancel() {
	if h == nil {
		return
	}
	if h.cancel() == statePending {
		// Let the owner drop it from the heap now instead of at its due time.
		h.m.post(op{h: h, cancel: true})
	}
}

// cancel marks h cancelled and returns the state it had before.
func (h *Handle) cancel() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev := h.state
	if prev == statePending || prev == stateRunning {
		h.state = stateCancelled
	}
	return prev
}

// Stopped reports whether the task will never start again, so callers can
// tell a live handle from a finished one: it was cancelled (directly or by
// Manager.Stop), or it is a one-shot that has already run.
func (h *Handle) Stopped() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state == stateCancelled || h.state == stateDone
}

// Manager schedules callbacks on one owner goroutine so that many timers cost
// one goroutine and one Timer. Create it with New and release it with Stop.
type Manager struct {
	clock Clock
	seq   atomic.Uint64

	mu      sync.Mutex
	inbox   []op // requests for the owner goroutine
	stopped bool

	wake chan struct{} // capacity 1: "inbox is non-empty"
	quit chan struct{} // closed by Stop
	done chan struct{} // closed when the owner goroutine returns

	// Owned by the owner goroutine.
	spare []op
	tasks taskHeap
}

// op is a request from another goroutine to the owner. Requests go through
// a mutex-guarded inbox plus a non-blocking wake channel rather than a
// blocking channel send, so that After, Every and Cancel never block and can
// be called from inside callbacks (which run on the owner goroutine).
type op struct {
	h      *Handle
	cancel bool
}

// New starts a Manager with exactly one goroutine that owns the timer heap;
// a nil clock means RealClock. Call Stop to release the goroutine.
func New(clock Clock) *Manager {
	if clock == nil {
		clock = RealClock()
	}
	m := &Manager{
		clock: clock,
		wake:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go m.run()
	return m
}

// After schedules f to run once after d, rounded up to whole milliseconds;
// d <= 0 means as soon as possible. After Stop, the returned Handle never
// fires.
func (m *Manager) After(d time.Duration, f func()) *Handle {
	return m.schedule(d, 0, f)
}

// Every schedules f to run every d (rounded up to whole milliseconds), first
// after d. Periods are measured from the previous due time, so there is no
// drift; periods missed because callbacks were slow are skipped, not burst.
// It panics if d <= 0, which is a programming error.
func (m *Manager) Every(d time.Duration, f func()) *Handle {
	if d <= 0 {
		panic(fmt.Sprintf("delaymgr: Every called with non-positive period %v", d))
	}
	return m.schedule(d, roundUp(d), f)
}

func (m *Manager) schedule(d, period time.Duration, f func()) *Handle {
	if f == nil {
		panic("delaymgr: nil callback")
	}
	h := &Handle{m: m, f: f, period: period, index: -1}
	h.due = m.clock.Now().Add(roundUp(d))
	if !m.post(op{h: h}) {
		h.state = stateCancelled // Manager stopped: never fires.
	}
	return h
}

// post queues o for the owner goroutine; it reports false if m is stopped.
func (m *Manager) post(o op) bool {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return false
	}
	if !o.cancel {
		o.h.seq = m.seq.Add(1) // under mu: sequence matches inbox order
	}
	m.inbox = append(m.inbox, o)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
	return true
}

// Stop cancels every pending task, stops the owner goroutine and waits until
// it, and any callback it is running, has returned, so that nothing leaks.
// It is idempotent. It must not be called from a callback (it would wait for
// itself).
func (m *Manager) Stop() {
	m.mu.Lock()
	if !m.stopped {
		m.stopped = true
		close(m.quit)
	}
	m.mu.Unlock()
	<-m.done
}

// run is the owner goroutine: the only code that touches the heap.
func (m *Manager) run() {
	defer close(m.done)
	timer := m.clock.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var armed bool
	var armedAt time.Time
	for {
		// (Re-)arm the timer for the earliest task if it changed.
		if len(m.tasks) == 0 {
			if armed {
				timer.Stop()
				armed = false
			}
		} else if due := m.tasks[0].due; !armed || !due.Equal(armedAt) {
			timer.Reset(due.Sub(m.clock.Now()))
			armed, armedAt = true, due
		}
		select {
		case <-m.quit:
			m.shutdown()
			return
		case <-m.wake:
			m.drain()
		case <-timer.C():
			armed = false
			m.fireDue()
		}
	}
}

// drain applies queued add and cancel requests to the heap.
func (m *Manager) drain() {
	m.mu.Lock()
	ops := m.inbox
	m.inbox = m.spare
	m.mu.Unlock()
	for _, o := range ops {
		switch {
		case !o.cancel:
			heap.Push(&m.tasks, o.h)
		case o.h.index >= 0:
			heap.Remove(&m.tasks, o.h.index)
		}
	}
	clear(ops) // drop references to handles
	m.spare = ops[:0]
}

// fireDue runs, in due order, every task whose due time has passed.
func (m *Manager) fireDue() {
	for len(m.tasks) > 0 {
		select {
		case <-m.quit:
			return // Stop wins over tasks not yet started.
		default:
		}
		h := m.tasks[0]
		if h.due.After(m.clock.Now()) {
			return
		}
		heap.Pop(&m.tasks)
		m.fire(h)
	}
}

// fire runs h's callback unless it was cancelled, then reschedules it if it
// is periodic and still live.
func (m *Manager) fire(h *Handle) {
	h.mu.Lock()
	if h.state != statePending {
		h.mu.Unlock()
		return // cancelled
	}
	h.state = stateRunning
	h.mu.Unlock()

	h.f()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateRunning {
		return // cancelled while running (possibly by itself)
	}
	if h.period == 0 {
		h.state = stateDone
		return
	}
	h.state = statePending
	next := h.due.Add(h.period)
	if now := m.clock.Now(); next.Before(now) {
		// Fell behind: skip to the first period boundary not in the past.
		k := (now.Sub(h.due) + h.period - 1) / h.period
		next = h.due.Add(k * h.period)
	}
	h.due = next
	h.seq = m.seq.Add(1)
	heap.Push(&m.tasks, h)
}

// shutdown cancels every task still queued or in the heap.
func (m *Manager) shutdown() {
	m.mu.Lock()
	ops := m.inbox // stopped is set, so nothing more is appended
	m.inbox = nil
	m.mu.Unlock()
	for _, o := range ops {
		o.h.cancel()
	}
	for _, h := range m.tasks {
		h.cancel()
		h.index = -1
	}
	m.tasks = nil
}

// roundUp rounds d up to a whole number of milliseconds; d <= 0 gives 0.
func roundUp(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d > math.MaxInt64-time.Millisecond {
		return math.MaxInt64 / time.Millisecond * time.Millisecond
	}
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// taskHeap orders tasks by due time, then by scheduling sequence.
type taskHeap []*Handle

func (q taskHeap) Len() int { return len(q) }
func (q taskHeap) Less(i, j int) bool {
	if !q[i].due.Equal(q[j].due) {
		return q[i].due.Before(q[j].due)
	}
	return q[i].seq < q[j].seq
}
func (q taskHeap) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}
func (q *taskHeap) Push(x any) {
	h := x.(*Handle)
	h.index = len(*q)
	*q = append(*q, h)
}
func (q *taskHeap) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.index = -1
	*q = old[:len(old)-1]
	return h
}
