package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xce/xce/client"
)

// Prefill loads a registry of Tasks tasks before a measured run, as fast
// as the cluster takes them, so that the run measures a registry of that
// size. Its calls are not recorded: only the measured run's history is
// checked (its final read sees the prefilled tasks too, which no check
// looks at).
type Prefill struct {
	Endpoints   []string
	TLS         *tls.Config
	Credentials client.Credentials
	// Tasks is how many tasks to create; Clients how many submit at once.
	Tasks   int
	Clients int
	// Prefix starts every task id (PrefillID); it differs from the
	// measured run's ids, which start with "b".
	Prefix string
	// OpTimeout is each attempt's deadline (NOT_READY retried until then);
	// a task whose attempt ran out is submitted again with the same
	// request id.
	OpTimeout time.Duration
	// Progress, when set, is called about once a second.
	Progress func(Progress)

	// submit, when set, replaces the call to the cluster (the accounting's
	// tests); w is the submitter.
	submit func(ctx context.Context, w int, id, requestID string) error
}

// PrefillResult sums a prefill; Bench reports it as "prefill".
type PrefillResult struct {
	Tasks     int64   `json:"tasks"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
	// Errors are attempts that failed without an answer and were made
	// again; Retries are NOT_READY answers the client retried.
	Errors  int64 `json:"errors"`
	Retries int64 `json:"not_ready_retries"`
	// Nodes are the nodes' sizes once the prefill is in.
	NodeStats []NodeStats `json:"node_stats,omitempty"`
}

// DefaultPrefillClients is how many submitters a prefill uses unless told:
// enough that batching on the primary, not the round trips, sets the pace.
const DefaultPrefillClients = 256

// PrefillID is the id of the prefill's i-th task. Its request id is the
// same string: unique per task, and kept across the task's attempts, so a
// repeated attempt that reaches the primary after the first one applied
// gets the first one's answer rather than a second task.
func PrefillID(prefix string, i int64) string { return prefix + "-" + strconv.FormatInt(i, 10) }

// permanent reports whether a submit failed for a reason another attempt
// cannot cure.
func permanent(err error) bool {
	for _, e := range []error{client.ErrInvalid, client.ErrUnauthenticated, client.ErrPermissionDenied,
		client.ErrBadCertificate, client.ErrPlaintextToTLS, client.ErrNoEndpoints} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// RunPrefill creates p.Tasks tasks, PrefillID(p.Prefix, 0) onwards, each
// once: the submitters take the next index from a shared counter and
// submit it until it is acknowledged (or found already there, which for
// ids only this prefill makes means an earlier attempt applied). ctx ending
// stops it early with what is in; a permanent refusal (bad credentials,
// invalid id) stops it with an error.
func RunPrefill(ctx context.Context, p Prefill) (*PrefillResult, error) {
	switch {
	case p.Tasks < 0:
		return nil, errors.New("prefill tasks must not be negative")
	case p.Clients <= 0:
		return nil, errors.New("prefill clients must be positive")
	}
	if p.Prefix == "" {
		p.Prefix = fmt.Sprintf("p%x", rand.Uint32())
	}
	if p.OpTimeout <= 0 {
		p.OpTimeout = 10 * time.Second
	}
	clients := min(p.Clients, max(p.Tasks, 1))
	var done, errs, retries atomic.Int64
	submit := p.submit
	if submit == nil {
		cls, closeAll, err := pooledClients(p.Endpoints, p.TLS, p.Credentials, clients,
			func(w int) string { return fmt.Sprintf("prefill-%s-%d", p.Prefix, w) },
			func(int) { retries.Add(1) })
		defer closeAll()
		if err != nil {
			return nil, err
		}
		submit = func(ctx context.Context, w int, id, requestID string) error {
			_, err := cls[w].SubmitWithID(ctx, client.Task{ID: id}, requestID)
			return err
		}
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var failOnce sync.Once
	var fail error
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	stopProgress := make(chan struct{})
	if p.Progress != nil {
		everySecond(&wg, stopProgress, func() {
			p.Progress(Progress{Elapsed: time.Since(start), Ops: done.Load(), Errors: errs.Load(), Retries: retries.Load()})
		})
	}
	var workers sync.WaitGroup
	for w := range clients {
		workers.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(p.Tasks) {
					return
				}
				id := PrefillID(p.Prefix, i)
				for ctx.Err() == nil {
					octx, cancel := context.WithTimeout(ctx, p.OpTimeout)
					err := submit(octx, w, id, id)
					cancel()
					if err == nil || errors.Is(err, client.ErrAlreadyExists) {
						done.Add(1)
						break
					}
					if permanent(err) {
						failOnce.Do(func() { fail = fmt.Errorf("prefill: submit %s: %w", id, err) })
						stop()
						return
					}
					if ctx.Err() == nil {
						errs.Add(1)
					}
				}
			}
		})
	}
	workers.Wait()
	close(stopProgress)
	wg.Wait()
	if fail != nil {
		return nil, fail
	}
	el := time.Since(start)
	r := &PrefillResult{Tasks: done.Load(), Seconds: el.Seconds(), Errors: errs.Load(), Retries: retries.Load()}
	if el > 0 {
		r.PerSecond = float64(r.Tasks) / el.Seconds()
	}
	return r, nil
}
