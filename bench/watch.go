package bench

import (
	"connectrpc.com/connect"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xce/xce/client"
)

// WatchResult is what the run's assignment watchers saw (Options.Watchers):
// how long after its commit each generation reached each watcher, how many
// streams broke, and what an idle watcher costs the nodes.
type WatchResult struct {
	Watchers int `json:"watchers"`
	// OpenSeconds is what opening every watcher took (each had its first
	// message, the full copy), before the run.
	OpenSeconds float64 `json:"open_seconds"`
	// Generations is how many distinct generations the watchers received
	// (full copies aside); Messages counts every update delivered, full
	// copies included; Deliveries the generations received, each by each
	// watcher, that the delivery figures cover.
	Generations int   `json:"generations"`
	Messages    int64 `json:"messages"`
	Deliveries  int   `json:"deliveries"`
	// DeliveryMs: p50, p99 and max of a delivery's delay, from the
	// earliest time any node reported applying the generation (the
	// PRIMARY's, right after the commit) to the watcher's receiving it.
	DeliveryMs map[string]float64 `json:"delivery_ms"`
	// Reconnects counts the streams that broke and were resumed, CutOff
	// those of them a node cut off for falling behind its history, and
	// Resyncs the full copies a watcher got after its first.
	Reconnects int64 `json:"reconnects"`
	CutOff     int64 `json:"cut_off"`
	Resyncs    int64 `json:"resyncs"`
	// Failed counts the watches that ended with an error; Behind those
	// that had not reached the last generation any watcher had when the
	// bench stopped waiting for them.
	Failed int `json:"failed"`
	Behind int `json:"behind"`
	// Nodes are each node's share of the watchers and their deliveries.
	Nodes []WatchNode `json:"nodes"`
	// Memory is what the idle watchers cost the nodes.
	Memory *WatchMemory `json:"memory,omitempty"`
}

// WatchNode is one node's share: its id and role when the watchers
// opened, how many it served, and their deliveries (a STANDBY's include
// its lag behind the PRIMARY).
type WatchNode struct {
	Endpoint   string             `json:"endpoint"`
	ID         string             `json:"id,omitempty"`
	Role       string             `json:"role,omitempty"`
	Watchers   int                `json:"watchers"`
	Deliveries int                `json:"deliveries"`
	DeliveryMs map[string]float64 `json:"delivery_ms"`
}

// watchOpenConcurrency bounds the watches being opened at once, so that
// opening thousands is not a burst of connections and full copies.
const watchOpenConcurrency = 64

// delivery is one generation as one watcher received it: its apply time
// on the serving node and its receipt here, in Unix nanoseconds.
type delivery struct {
	gen           uint64
	applied, recv int64
}

// watcher is one assignment watch. Its goroutine owns every field but
// the atomics until it has set done.
type watcher struct {
	gen    atomic.Uint64
	opened atomic.Bool
	done   atomic.Bool

	got                []delivery
	messages, fulls    int64
	reconnects, cutOff int64
	err                error
	endpoint           string
	releaseOnce        sync.Once
	releaseSlot        func()
}

// watchSet is the run's watchers, spread over the endpoints, each on its
// own pinned client; stop ends them.
type watchSet struct {
	clients  []*client.Client
	watchers []*watcher
	// nodes are the endpoints, in order, with their watchers' count;
	// watcher i watches on nodes[i % len(nodes)].
	nodes  []WatchNode
	opened time.Duration
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// openWatchers opens n STALE watches, watcher i on endpoint i modulo their
// number (so every node serves some, the PRIMARY included), and returns
// once each has had its first message. Every watch runs on its own
// goroutine until stop.
func openWatchers(ctx context.Context, endpoints []string, opts client.Options, n int, timeout time.Duration) (*watchSet, error) {
	wctx, cancel := context.WithCancel(context.Background())
	s := &watchSet{cancel: cancel}
	opts.Pinned = true
	opts.ConnectOptions = append(opts.ConnectOptions, connect.WithCodec(skimCodec{}))
	for _, ep := range endpoints {
		cl, err := client.New([]string{ep}, opts)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.clients = append(s.clients, cl)
		s.nodes = append(s.nodes, WatchNode{Endpoint: ep})
	}
	start := time.Now()
	slots := make(chan struct{}, watchOpenConcurrency)
	for i := range n {
		w := &watcher{endpoint: endpoints[i%len(endpoints)]}
		s.nodes[i%len(s.nodes)].Watchers++
		s.watchers = append(s.watchers, w)
		cl := s.clients[i%len(s.clients)]
		s.wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-wctx.Done():
				w.done.Store(true)
				return
			}
			w.releaseSlot = func() { <-slots }
			defer w.release()
			w.err = cl.WatchAssignmentBreaks(wctx, 0, true, w.receive, w.broke)
			w.done.Store(true)
		})
	}
	if err := s.waitOpen(ctx, timeout); err != nil {
		s.stop()
		return nil, err
	}
	s.opened = time.Since(start)
	return s, nil
}

// receive is the watch's callback: it notes the update and its receipt.
func (w *watcher) receive(u client.AssignmentUpdate) error {
	now := time.Now().UnixNano()
	w.messages++
	if u.Full {
		w.fulls++
	}
	if !u.AppliedAt.IsZero() {
		w.got = append(w.got, delivery{gen: u.Generation, applied: u.AppliedAt.UnixNano(), recv: now})
	}
	w.gen.Store(u.Generation)
	if !w.opened.Load() {
		w.opened.Store(true)
		w.release()
	}
	return nil
}

// broke notes a stream that ended and is being resumed.
func (w *watcher) broke(err error) {
	w.reconnects++
	if client.IsWatchCutOff(err) {
		w.cutOff++
	}
}

// release gives the watcher's opening slot back, once.
func (w *watcher) release() {
	w.releaseOnce.Do(func() {
		if w.releaseSlot != nil {
			w.releaseSlot()
		}
	})
}

// waitOpen polls until every watcher has had its first message; a watch
// that ended meanwhile fails it.
func (s *watchSet) waitOpen(ctx context.Context, timeout time.Duration) error {
	open := 0
	err := pollUntil(ctx, timeout, func() (bool, error) {
		open = 0
		for _, w := range s.watchers {
			if w.opened.Load() {
				open++
			} else if w.done.Load() {
				return false, fmt.Errorf("a watcher on %s ended before its first message: %v", w.endpoint, w.err)
			}
		}
		return open == len(s.watchers), nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%d of %d watchers open after %v", open, len(s.watchers), timeout)
	}
	return err
}

// settle waits, up to timeout or until ctx ends, until every watch still
// running has the highest generation any watcher has: the generations
// the run made have then reached every watcher, and none is counted
// half-delivered.
func (s *watchSet) settle(ctx context.Context, timeout time.Duration) {
	_ = pollUntil(ctx, timeout, func() (bool, error) {
		top := s.top()
		for _, w := range s.watchers {
			if !w.done.Load() && w.gen.Load() < top {
				return false, nil
			}
		}
		return true, nil
	})
}

// top is the highest generation any watcher has.
func (s *watchSet) top() uint64 {
	var top uint64
	for _, w := range s.watchers {
		top = max(top, w.gen.Load())
	}
	return top
}

// stop ends every watch, waits for their goroutines and closes the
// clients.
func (s *watchSet) stop() {
	s.cancel()
	s.wg.Wait()
	for _, cl := range s.clients {
		cl.Close()
	}
}

// result sums the watchers' records; call it after stop.
func (s *watchSet) result() *WatchResult {
	out := &WatchResult{Watchers: len(s.watchers), OpenSeconds: s.opened.Seconds()}
	top := s.top()
	earliest := map[uint64]int64{}
	for _, w := range s.watchers {
		out.Messages += w.messages
		out.Reconnects += w.reconnects
		out.CutOff += w.cutOff
		out.Resyncs += max(w.fulls-1, 0)
		if w.err != nil {
			out.Failed++
		}
		if w.gen.Load() < top {
			out.Behind++
		}
		for _, d := range w.got {
			if e, ok := earliest[d.gen]; !ok || d.applied < e {
				earliest[d.gen] = d.applied
			}
		}
	}
	var all []time.Duration
	byNode := make([][]time.Duration, len(s.nodes))
	for i, w := range s.watchers {
		for _, d := range w.got {
			lat := time.Duration(d.recv - earliest[d.gen])
			all = append(all, lat)
			byNode[i%len(s.nodes)] = append(byNode[i%len(s.nodes)], lat)
		}
	}
	out.Generations, out.Deliveries, out.DeliveryMs = len(earliest), len(all), deliveryMs(all)
	for i, n := range s.nodes {
		n.Deliveries, n.DeliveryMs = len(byNode[i]), deliveryMs(byNode[i])
		out.Nodes = append(out.Nodes, n)
	}
	return out
}

// deliveryMs sorts delays and gives their p50, p99 and max.
func deliveryMs(lats []time.Duration) map[string]float64 {
	slices.Sort(lats)
	return map[string]float64{"p50": ms(percentile(lats, 50)), "p99": ms(percentile(lats, 99)), "max": ms(percentile(lats, 100))}
}

// err is the first error a watch ended with, nil if none did.
func (s *watchSet) err() error {
	var errs []error
	for _, w := range s.watchers {
		if w.err != nil {
			errs = append(errs, fmt.Errorf("watcher on %s: %w", w.endpoint, w.err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d watches failed, the first: %w", len(errs), errs[0])
}

// pollUntil calls check every 20 ms until it reports done (nil) or
// fails (its error), or until ctx ends or timeout passes (the context's
// error).
func pollUntil(ctx context.Context, timeout time.Duration, check func() (done bool, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok, err := check(); err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// PrintWatch writes the watchers' figures.
func PrintWatch(w io.Writer, r *WatchResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "watchers %d opened in %.2fs: generations %d, messages %d, deliveries %d\n",
		r.Watchers, r.OpenSeconds, r.Generations, r.Messages, r.Deliveries)
	fmt.Fprintf(w, "watch delivery after commit ms  p50 %.2f  p99 %.2f  max %.2f   reconnects %d (cut off %d)  resyncs %d  failed %d  behind %d\n",
		r.DeliveryMs["p50"], r.DeliveryMs["p99"], r.DeliveryMs["max"], r.Reconnects, r.CutOff, r.Resyncs, r.Failed, r.Behind)
	for _, n := range r.Nodes {
		fmt.Fprintf(w, "  %-4s %-8s %s  %d watchers  delivery ms  p50 %.2f  p99 %.2f  max %.2f\n",
			n.ID, n.Role, n.Endpoint, n.Watchers, n.DeliveryMs["p50"], n.DeliveryMs["p99"], n.DeliveryMs["max"])
	}
	PrintWatchMemory(w, r.Memory)
}
