package dispatch

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// Bounds of the assignment watches, so that watchers cannot grow a node's
// memory without bound: a watcher holds at most one message at a time
// (the generations it still has to receive stay in the state machine's
// shared, bounded history), and at most MaxWatchers watch at once.
const (
	// MaxWatchers bounds the concurrent WatchAssignment streams per node.
	MaxWatchers = 10_000
	// watchPage is the most placements and removals one message carries;
	// a larger generation, or full copy, is sent in parts (more), so that
	// neither end holds a large message.
	watchPage = 500
)

// watchMetrics counts the assignment watches.
type watchMetrics struct {
	watchers atomic.Int64
	messages prometheus.Counter
	fullCopy prometheus.Counter
	cutOff   prometheus.Counter
	refused  prometheus.Counter
}

func newWatchMetrics(reg prometheus.Registerer) *watchMetrics {
	m := &watchMetrics{
		messages: prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_watch_messages_total",
			Help: "WatchAssignment messages sent."}),
		fullCopy: prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_watch_full_copies_total",
			Help: "WatchAssignment full copies started (new watchers, and watchers whose generation this node no longer has)."}),
		cutOff: prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_watch_cut_off_total",
			Help: "WatchAssignment streams ended because the watcher fell further behind than the history this node keeps; it resumes from its last generation."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_watch_refused_total",
			Help: "WatchAssignment calls refused because MaxWatchers streams were open."}),
	}
	reg.MustRegister(m.messages, m.fullCopy, m.cutOff, m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xce_watchers", Help: "Open WatchAssignment streams."},
			func() float64 { return float64(m.watchers.Load()) }))
	return m
}

// WatchAssignment streams the assignment: a full copy (or the generations
// after from_generation), then each generation as this node applies it. A
// node behind from_generation sends nothing until it has caught up, so a
// watcher never goes back in time.
func (s *Service) WatchAssignment(ctx context.Context, req *connect.Request[xcev1.WatchAssignmentRequest], stream *connect.ServerStream[xcev1.WatchAssignmentResponse]) error {
	release, err := s.startWatch(ctx, req.Msg.Consistency)
	if err != nil {
		return err
	}
	defer release()
	w := &watcher{s: s, stream: stream, gen: req.Msg.FromGeneration}
	fsm := s.node.FSM()
	full := w.gen == 0
	for {
		var changed <-chan struct{}
		if !full {
			changes, cur, ok, ch := fsm.AssignmentSince(w.gen)
			switch {
			case w.gen > cur:
				// This node is behind the watcher (a STANDBY that has
				// not applied as much): nothing to send until it has
				// caught up, rather than an older copy.
				changed = ch
			case ok:
				if err := w.sendChanges(changes); err != nil {
					return err
				}
				w.gen, changed = cur, ch
			case w.sent:
				// It fell behind the history while this stream served it:
				// it resumes (from a full copy) rather than this node
				// holding its generations.
				s.wm.cutOff.Inc()
				return connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("watcher fell behind this node's history: resume from generation %d", w.gen))
			default:
				full = true
			}
		}
		if full {
			// The channel first: a generation after the copy's closes it.
			changed = fsm.AssignmentChanged()
			gen, err := w.sendFull(fsm)
			if err != nil {
				return err
			}
			w.gen, full = gen, false
		}
		if done, err := s.awaitChange(ctx, changed); done {
			return err
		}
	}
}

// awaitChange waits until changed is closed or the node's view changes;
// done when the stream ends there: the caller went (nil), or the node is
// shutting down (NOT_READY).
func (s *Service) awaitChange(ctx context.Context, changed <-chan struct{}) (done bool, err error) {
	v := s.node.View()
	if v.Stopping {
		return true, s.notReady(v, Decision{Kind: "shutting_down", Reason: "shutting down", RetryAfter: s.timings.Electing})
	}
	select {
	case <-ctx.Done():
		return true, nil
	case <-changed:
	case <-v.Changed():
	}
	return false, nil
}

// startWatch admits one more watch (WatchAssignment or WatchTasks), at
// most MaxWatchers at once, and applies its consistency; release ends it.
func (s *Service) startWatch(ctx context.Context, c xcev1.Consistency) (release func(), err error) {
	if n := s.wm.watchers.Add(1); n > MaxWatchers {
		s.wm.watchers.Add(-1)
		s.wm.refused.Inc()
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("%d watchers already: at most %d per node", n-1, MaxWatchers))
	}
	if err := s.readBarrier(ctx, c); err != nil {
		s.wm.watchers.Add(-1)
		return nil, err
	}
	return func() { s.wm.watchers.Add(-1) }, nil
}

// watcher is one WatchAssignment stream's state.
type watcher struct {
	s      *Service
	stream *connect.ServerStream[xcev1.WatchAssignmentResponse]
	gen    uint64
	sent   bool
	// addrs are the worker addresses this stream has sent.
	addrs map[string]string
}

// WorkerAddrGate is what the watches need from the node besides its state:
// whether worker addresses are written to the log in this term (every
// voter applies them).
type WorkerAddrGate interface {
	WorkerAddrsWritable() error
}

// addrCache is the log's worker addresses, copied once per change for
// every watcher; the map is shared and never modified.
type addrCache struct {
	mu  sync.Mutex
	ver uint64
	m   map[string]string
}

// get returns the log's worker addresses as of now.
func (c *addrCache) get(fsm *state.FSM) map[string]string {
	v := fsm.WorkerAddrVersion()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || c.ver != v {
		c.m, c.ver = fsm.WorkerAddrs()
	}
	return c.m
}

// workerAddrs returns the worker addresses this node knows: the log's, on
// every node. A PRIMARY that may not write them yet (a voter's binary does
// not apply them) adds its sessions' addresses, the only ones it has then.
// The map may be shared: read it only.
func (s *Service) workerAddrs() map[string]string {
	addrs := s.addrs.get(s.node.FSM())
	if s.workers == nil || s.node.WorkerAddrsWritable() == nil {
		return addrs
	}
	own := s.workers.Addrs()
	if len(own) == 0 {
		return addrs
	}
	merged := maps.Clone(addrs)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, own)
	return merged
}

// newAddrs returns the worker addresses this node knows that the stream
// has not sent (all of them for a full copy), and notes them as sent.
func (w *watcher) newAddrs(full bool) map[string]string {
	if full || w.addrs == nil {
		w.addrs = map[string]string{}
	}
	var out map[string]string
	for id, a := range w.s.workerAddrs() {
		if w.addrs[id] != a {
			if out == nil {
				out = map[string]string{}
			}
			out[id], w.addrs[id] = a, a
		}
	}
	return out
}

// send sends the shared part p, with this node's indexes and role and the
// worker addresses the stream has not sent yet.
func (w *watcher) send(p *sharedPart) error {
	commit, applied := w.s.node.Indexes()
	own := &xcev1.WatchAssignmentResponse{AppliedIndex: applied, CommitIndex: commit, Role: xcev1.Role(w.s.node.View().Role)}
	if p.msg.Full || !p.msg.More {
		own.WorkerAddrs = w.newAddrs(p.msg.Full)
	}
	if err := sendShared(w.stream, p, own); err != nil {
		return err
	}
	w.s.wm.messages.Inc()
	w.sent = true
	return nil
}

func (w *watcher) sendChanges(cs []state.GenerationChange) error {
	for _, c := range cs {
		ps, err := w.s.wc.delta(c)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := w.send(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// sendFull sends a full copy at the node's current generation (or later)
// and returns its generation.
func (w *watcher) sendFull(fsm *state.FSM) (uint64, error) {
	w.s.wm.fullCopy.Inc()
	_, ver := fsm.AssignmentGeneration()
	gen, pages, err := w.s.wc.full(ver, fsm.AssignmentCopy)
	if err != nil {
		return 0, err
	}
	for _, p := range pages {
		if err := w.send(p); err != nil {
			return 0, err
		}
	}
	return gen, nil
}

func placementProto(p state.Placement) *xcev1.TaskPlacement {
	return &xcev1.TaskPlacement{TaskId: p.Task, Active: p.Active, Standbys: p.Standbys, Warmups: p.Warmups, Epoch: p.Epoch}
}
