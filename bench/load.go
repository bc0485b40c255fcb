package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xce/xce/client"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// Load configures a run.
type Load struct {
	Endpoints []string
	// TLS and Credentials: how the clients reach the nodes (plaintext
	// without TLS), and the token they send.
	TLS         *tls.Config
	Credentials client.Credentials
	// Clients is the number of concurrent callers, each with its own client id.
	Clients int
	// Duration bounds the run; Ops, when set, bounds the number of calls.
	Duration time.Duration
	Ops      int64
	// Reads is the fraction of calls that are linearizable GetTask.
	Reads float64
	// Rate, when set, paces the calls of all clients together to this
	// many a second (as long as the clients keep up).
	Rate float64
	// OpTimeout is each call's deadline (NOT_READY retried until then).
	OpTimeout time.Duration
	// Progress, when set, is called about once a second.
	Progress func(Progress)
}

// Progress is a running count.
type Progress struct {
	Elapsed              time.Duration
	Ops, Errors, Retries int64
}

// Result sums a run.
type Result struct {
	Ops, Errors, Retries int64
	Elapsed              time.Duration
	// Warmup is what the clients took to find the PRIMARY and open their
	// connections before the run began (see warm); not part of Elapsed,
	// of the calls counted, or of the latencies.
	Warmup time.Duration
	// Latencies of the successful calls, sorted: all of them, and the
	// writes' (SubmitTask) and the reads' (GetTask) apart.
	Latencies, WriteLatencies, ReadLatencies []time.Duration
	// Writes and Reads split Ops by kind.
	Writes, Reads int64
}

// Percentile returns the p-th percentile (0..100) of the latencies.
func (r *Result) Percentile(p float64) time.Duration { return percentile(r.Latencies, p) }

// percentile returns the p-th percentile (0..100) of sorted durations, 0
// for none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

// Run drives the load until ctx ends, Duration passes or Ops calls are made,
// recording every call in h.
func Run(ctx context.Context, l Load, h *History) (*Result, error) {
	if l.Clients <= 0 {
		return nil, errors.New("clients must be positive")
	}
	if l.OpTimeout <= 0 {
		l.OpTimeout = 10 * time.Second
	}
	nonce := fmt.Sprintf("%x", rand.Uint32())
	var ops, errs, retries, budget atomic.Int64
	callers, closeAll, err := newCallers(l, nonce, &retries)
	defer closeAll()
	if err != nil {
		return nil, err
	}
	clients := make([]*client.Client, len(callers))
	for i, c := range callers {
		clients[i] = c.cl
	}
	warmup := warm(ctx, clients, nonce, l.OpTimeout)
	retries.Store(0) // the warm-up's leader hints are not the run's
	if l.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.Duration)
		defer cancel()
	}
	start := time.Now()
	var wg sync.WaitGroup
	stopProgress := make(chan struct{})
	if l.Progress != nil {
		everySecond(&wg, stopProgress, func() {
			l.Progress(Progress{Elapsed: time.Since(start), Ops: ops.Load(), Errors: errs.Load(), Retries: retries.Load()})
		})
	}
	var pace <-chan struct{}
	paceCtx, stopPace := context.WithCancel(ctx)
	defer stopPace()
	if l.Rate > 0 {
		pace = pacer(paceCtx, &wg, l.Rate)
	}
	var workers sync.WaitGroup
	for _, c := range callers {
		c.rng = rand.New(rand.NewPCG(uint64(c.w), uint64(start.UnixNano())))
		workers.Go(func() {
			for seq := 0; ctx.Err() == nil; seq++ {
				if l.Ops > 0 && budget.Add(1) > l.Ops {
					return
				}
				if pace != nil {
					select {
					case <-pace:
					case <-ctx.Done():
						return
					}
				}
				op := c.call(ctx, seq)
				h.Add(op)
				if ctx.Err() != nil && op.Outcome == Unknown {
					// Cut off by the end of the run: the call's fate is
					// unknown, kept as such and not counted.
					return
				}
				ops.Add(1)
				if op.Kind == Get {
					c.getCalls++
				}
				if op.Outcome == Unknown {
					errs.Add(1)
					continue
				}
				if op.Kind == Get {
					c.readLats = append(c.readLats, op.Return.Sub(op.Call))
				} else {
					c.lats = append(c.lats, op.Return.Sub(op.Call))
				}
			}
		})
	}
	workers.Wait()
	stopPace()
	close(stopProgress)
	wg.Wait()
	r := &Result{Ops: ops.Load(), Errors: errs.Load(), Retries: retries.Load(), Elapsed: time.Since(start), Warmup: warmup}
	for _, c := range callers {
		r.WriteLatencies = append(r.WriteLatencies, c.lats...)
		r.ReadLatencies = append(r.ReadLatencies, c.readLats...)
		r.Reads += c.getCalls
	}
	r.Writes = r.Ops - r.Reads
	r.Latencies = append(slices.Clone(r.WriteLatencies), r.ReadLatencies...)
	slices.Sort(r.Latencies)
	slices.Sort(r.WriteLatencies)
	slices.Sort(r.ReadLatencies)
	return r, nil
}

// A caller is one of the run's concurrent clients with what it keeps
// between calls.
type caller struct {
	w       int
	cl      *client.Client
	nonce   string
	reads   float64
	timeout time.Duration
	rng     *rand.Rand
	retries atomic.Int64 // NOT_READY retries of its calls
	last    string       // the last task it created
	// created holds every caller's last created task, published once its
	// creation is acknowledged: a read asks for another caller's, so the
	// check sees whether a read reflects writes acknowledged elsewhere.
	created []atomic.Pointer[string]
	// lats and readLats are its answered writes' and reads' latencies;
	// getCalls counts its reads, answered or not.
	lats, readLats []time.Duration
	getCalls       int64
}

// newCallers makes the run's callers; each counts its retries in its own
// counter and in all. closeAll closes what was made, also on an error.
func newCallers(l Load, nonce string, all *atomic.Int64) (_ []*caller, closeAll func(), _ error) {
	callers := make([]*caller, l.Clients)
	created := make([]atomic.Pointer[string], l.Clients)
	for w := range callers {
		callers[w] = &caller{w: w, nonce: nonce, reads: l.Reads, timeout: l.OpTimeout, created: created}
	}
	cls, closeAll, err := pooledClients(l.Endpoints, l.TLS, l.Credentials, l.Clients,
		func(w int) string { return fmt.Sprintf("bench-%s-%d", nonce, w) },
		func(w int) {
			callers[w].retries.Add(1)
			all.Add(1)
		})
	if err != nil {
		return nil, closeAll, err
	}
	for w, cl := range cls {
		callers[w].cl = cl
	}
	return callers, closeAll, nil
}

// pooledClients makes n clients of the endpoints that share a few pooled
// HTTP clients, client w with the id id(w) and counting its NOT_READY
// retries with onRetry(w). closeAll closes what was made, also on an
// error.
func pooledClients(endpoints []string, tlsCfg *tls.Config, creds client.Credentials, n int,
	id func(w int) string, onRetry func(w int)) (_ []*client.Client, closeAll func(), _ error) {
	pool := make([]*http.Client, 4)
	for i := range pool {
		pool[i] = client.NewHTTPClient(tlsCfg)
	}
	var cls []*client.Client
	closeAll = func() {
		for _, c := range cls {
			c.Close() // its member refresh may be under way
		}
		for _, c := range pool {
			c.CloseIdleConnections()
		}
	}
	for w := range n {
		cl, err := client.New(endpoints, client.Options{
			HTTPClient: pool[w%len(pool)],
			TLS:        tlsCfg, Credentials: creds,
			ClientID: id(w),
			OnRetry:  func(*xcev1.NotReady, error) { onRetry(w) },
		})
		if err != nil {
			return nil, closeAll, err
		}
		cls = append(cls, cl)
	}
	return cls, closeAll, nil
}

// readTarget is the task a read asks for: the last one another caller
// created, or the caller's own.
func (c *caller) readTarget() string {
	if n := len(c.created); n > 1 {
		if id := c.created[(c.w+1+c.rng.IntN(n-1))%n].Load(); id != nil {
			return *id
		}
	}
	return c.last
}

// call makes the caller's seq-th call: a linearizable read, for the Reads
// fraction of calls once it created a task, or the creation of a new task.
// A read asks for the task another caller (picked at random) created last,
// or its own when that one has created none yet.
func (c *caller) call(ctx context.Context, seq int) Op {
	op := Op{Client: c.w}
	before := c.retries.Load()
	octx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	op.Call = time.Now()
	if c.last != "" && c.reads > 0 && c.rng.Float64() < c.reads {
		op.Kind, op.TaskID = Get, c.readTarget()
		r, err := c.cl.Get(octx, op.TaskID, false)
		op.Return = time.Now()
		switch {
		case err == nil:
			op.Outcome, op.Index = OK, r.AppliedIndex
		case errors.Is(err, client.ErrNotFound):
			op.Outcome = NotFound
		}
	} else {
		op.Kind, op.TaskID = Submit, fmt.Sprintf("b%s-%d-%d", c.nonce, c.w, seq)
		r, err := c.cl.Submit(octx, client.Task{ID: op.TaskID})
		op.Return = time.Now()
		switch {
		case err == nil:
			op.Outcome, op.Index = OK, r.Index
			c.last = op.TaskID
			id := op.TaskID
			c.created[c.w].Store(&id)
		case errors.Is(err, client.ErrAlreadyExists):
			op.Outcome = Exists
		}
	}
	op.Retries = int(c.retries.Load() - before)
	return op
}

// warm has every client find the PRIMARY and open its connection (over
// TLS, make its handshake) before the run's clock starts, with a
// linearizable read of an id no call writes: a run measures the steady
// state, not a burst of handshakes and leader hints at its start (paid
// once per connection, and on a small machine by all clients at once). It
// returns how long that took. A read that fails only leaves that client
// cold; its first call in the run pays instead.
func warm(ctx context.Context, clients []*client.Client, nonce string, timeout time.Duration) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			_, _ = c.Get(wctx, "bench-warmup-"+nonce, false)
		})
	}
	wg.Wait()
	return time.Since(start)
}

// everySecond calls report once a second, on a goroutine wg owns, until
// stop is closed: the progress lines of the load and of the prefill.
// pacer hands out rate tokens a second until ctx ends; at most
// pacerBurst wait to be taken, so a run that fell behind does not burst.
func pacer(ctx context.Context, wg *sync.WaitGroup, rate float64) <-chan struct{} {
	every := max(time.Duration(float64(time.Second)/rate), 10*time.Millisecond)
	perTick := rate * every.Seconds()
	out := make(chan struct{}, pacerBurst)
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		owed := 0.0
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			owed = min(owed+perTick, perTick+1)
			for ; owed >= 1; owed-- {
				select {
				case out <- struct{}{}:
				default:
					owed = 0
				}
			}
		}
	})
	return out
}

// pacerBurst bounds the tokens a pacer holds for callers busy elsewhere.
const pacerBurst = 64

func everySecond(wg *sync.WaitGroup, stop <-chan struct{}, report func()) {
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				report()
			}
		}
	})
}
