package client

import (
	"context"
	"sync"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// Route is where a task's active copy runs, as a Router knows it.
type Route struct {
	// Worker is the active's worker id ("" while the task has no active).
	Worker string
	// Addr is the worker's client address, as it registered it ("" when
	// the worker gave none or the router has not learnt it yet).
	Addr string
	// Epoch is the task's epoch: it grows each time the task gets a new
	// active, so a caller can refuse an answer from an older active.
	Epoch uint64
	// Role is the copy's role: "active".
	Role string
	// Standbys are the task's standby workers.
	Standbys []string
}

// Router keeps the routing table (each task's active worker, its address
// and epoch) from the controller's assignment watch, and answers Lookup
// from memory, without a call. It follows failovers and reconnects, and
// while no node is reachable it keeps answering from its last table, then
// Stale reports true. Close stops it.
type Router struct {
	mu      sync.RWMutex
	tasks   map[string]*xcev1.TaskPlacement
	addrs   map[string]string
	gen     uint64
	stale   bool
	ready   chan struct{}
	changed chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// NewRouter starts a Router on c; stale lets STANDBYs serve it (their
// tables may be behind the PRIMARY's, and they know no worker address).
func NewRouter(c *Client, stale bool) *Router {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Router{tasks: map[string]*xcev1.TaskPlacement{}, addrs: map[string]string{}, stale: true,
		ready: make(chan struct{}), changed: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = c.watchAssignment(ctx, 0, stale, r.apply, func(error) {
			r.mu.Lock()
			r.stale = true
			r.mu.Unlock()
		})
	}()
	return r
}

// apply brings the table to one more generation.
func (r *Router) apply(u AssignmentUpdate) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if u.Full {
		clear(r.tasks)
	}
	for _, p := range u.Tasks {
		r.tasks[p.TaskId] = p
	}
	for _, id := range u.Removed {
		delete(r.tasks, id)
	}
	for id, a := range u.WorkerAddrs {
		r.addrs[id] = a
	}
	r.gen, r.stale = u.Generation, false
	if !isClosed(r.ready) {
		close(r.ready)
	}
	close(r.changed)
	r.changed = make(chan struct{})
	return nil
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Ready is closed once the router has its first table.
func (r *Router) Ready() <-chan struct{} { return r.ready }

// Lookup answers where task's active runs, from memory; ok is false for a
// task the table does not have.
func (r *Router) Lookup(task string) (Route, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.tasks[task]
	if !ok {
		return Route{}, false
	}
	return Route{Worker: p.Active, Addr: r.addrs[p.Active], Epoch: p.Epoch, Role: "active", Standbys: p.Standbys}, true
}

// Changed returns a channel closed at the next change of the table.
func (r *Router) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

// Generation is the assignment generation the table is at, and whether it
// is stale: the router is not connected to a node that serves it, and
// answers from its last table.
func (r *Router) Generation() (gen uint64, stale bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gen, r.stale
}

// Close stops the router and waits for its watch to end.
func (r *Router) Close() error {
	r.cancel()
	<-r.done
	return r.err
}
