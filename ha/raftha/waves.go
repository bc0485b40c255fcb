package raftha

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/stopper"
	"github.com/xce/xce/state"
)

// maxWave bounds one wave; raft takes at most MaxAppendEntries commands
// off its apply channel per log write, and a batch entry holds at most
// state.MaxBatch.
const maxWave = state.MaxBatch

// maxGather bounds how long a wave waits for the callers of the previous
// one (see waves.gather), whatever the previous wave took.
const maxGather = 10 * time.Millisecond

// applier is what waves needs of raft.
type applier interface {
	Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture
}

// waves hands commands to raft in waves: every command that arrived while
// the previous wave was being committed goes to raft at once, and the next
// wave starts when this one is applied.
//
// Raft's leader writes each batch it takes off its apply channel to its own
// log (a sync of its segment log) and pipelines it to the followers, which
// do the same. Left to itself it starts a new small batch as soon as one
// command arrives, so under concurrent load the disks work through many
// small overlapping commits and each write waits behind others. One wave in
// flight turns that into one commit per node per wave, so concurrent
// writers share syncs; a single writer pays nothing extra.
//
// A wave also waits briefly for the callers the previous wave answered
// (see gather): through the API, a client's next write arrives a fraction
// of a millisecond after its answer, so without waiting the callers split
// into two alternating half-size waves and each write waits for one and a
// half commits.
//
// Once every voter applies batch entries (setBatches), the submits and
// deletes of a wave go to raft as one CmdBatch entry instead of one entry
// each: one log record to encode, store and send per node instead of
// dozens.
type waves struct {
	r       applier
	batches atomic.Bool
	reqs    chan *applyReq
	// stopper owns the loop: Stopping tells it to stop, Done says it has
	// returned.
	stopper *stopper.Stopper
}

type applyReq struct {
	ctx     context.Context
	cmd     []byte
	resp    chan applyResp   // buffered: the wave never blocks on a caller
	f       raft.ApplyFuture // nil when the caller gave up before its wave
	batched bool             // f is a CmdBatch entry's, the command at pos
	pos     int
}

// errBatchResult is a batch entry the FSM did not answer as one.
var errBatchResult = errors.New("batch entry answered without a result per command")

// outcome waits for the request's future, if it has one.
func (q *applyReq) outcome() applyResp {
	if q.f == nil {
		return applyResp{err: q.ctx.Err()}
	}
	if err := q.f.Error(); err != nil {
		return applyResp{err: mapErr(err)}
	}
	if !q.batched {
		return applyResp{val: q.f.Response(), index: q.f.Index()}
	}
	rs, ok := q.f.Response().(state.BatchResult)
	if !ok || q.pos >= len(rs) {
		return applyResp{err: fmt.Errorf("%w: %v", errBatchResult, q.f.Response())}
	}
	return applyResp{val: rs[q.pos], index: q.f.Index()}
}

type applyResp struct {
	val   any
	index uint64
	err   error
}

func newWaves(r applier) *waves {
	w := &waves{r: r, reqs: make(chan *applyReq, maxWave), stopper: stopper.New()}
	w.stopper.Go(w.run)
	return w
}

// apply queues cmd for the next wave and waits for its outcome or ctx. A
// caller that gives up may still see its command applied (an unknown
// outcome, as with any timed-out write); a command whose caller gave up
// before its wave started is not applied.
func (w *waves) apply(ctx context.Context, cmd []byte) (any, uint64, error) {
	q := &applyReq{ctx: ctx, cmd: cmd, resp: make(chan applyResp, 1)}
	select {
	case w.reqs <- q:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-w.stopper.Stopping():
		return nil, 0, ha.ErrShutdown
	}
	select {
	case r := <-q.resp:
		return r.val, r.index, r.err
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	case <-w.stopper.Done():
		// The loop answers every request it took before it ends.
		select {
		case r := <-q.resp:
			return r.val, r.index, r.err
		default:
			return nil, 0, ha.ErrShutdown
		}
	}
}

// setBatches turns batch entries on or off for the waves that follow. On
// only when every voter's binary applies CmdBatch (state.LogFormat 2).
func (w *waves) setBatches(on bool) { w.batches.Store(on) }

// close stops the loop once its current wave is answered; raft must be
// shut down first so that wave cannot wait for a quorum that is gone.
func (w *waves) close() { w.stopper.Stop() }

func (w *waves) run() {
	batch := make([]*applyReq, 0, maxWave)
	want := 0                 // callers expected in this wave
	var last time.Duration    // how long the previous wave took
	timer := time.NewTimer(0) // gather's deadline
	timer.Stop()
	for {
		batch = batch[:0]
		select {
		case q := <-w.reqs:
			batch = append(batch, q)
		case <-w.stopper.Stopping():
			w.refuseQueued()
			return
		}
		batch = w.gather(batch, want, last, timer)
		start := time.Now()
		w.applyWave(batch, w.batches.Load())
		for _, q := range batch {
			if q.f != nil {
				q.f.Error() // wait for the wave's commit
			}
		}
		// The callers about to be answered, and those that queued while
		// the wave was committed, are the ones the next wave can expect;
		// counted before any answer, so no caller counts twice.
		want = min(maxWave, len(batch)+len(w.reqs))
		for _, q := range batch {
			q.resp <- q.outcome()
		}
		last = time.Since(start)
		clear(batch) // drop references to answered requests
	}
}

// applyWave hands raft the wave's commands whose callers still wait: with
// batches, its submits and deletes as one CmdBatch entry (a wave of
// state.MaxBatch of the largest fits its byte limit: persist's
// TestBatchLimits) and the others one by one; without, each one by one.
// Reordering is harmless: the commands of one wave were all in flight at
// once.
func (w *waves) applyWave(batch []*applyReq, batches bool) {
	var group []*applyReq
	for _, q := range batch {
		switch {
		case q.ctx.Err() != nil:
		case batches && state.Batchable(q.cmd):
			group = append(group, q)
		default:
			q.f = w.r.Apply(q.cmd, timeoutOf(q.ctx))
		}
	}
	switch len(group) {
	case 0:
	case 1:
		group[0].f = w.r.Apply(group[0].cmd, timeoutOf(group[0].ctx))
	default:
		cmds := make([][]byte, len(group))
		timeout := timeoutOf(group[0].ctx) // the longest; 0 is none
		for i, q := range group {
			cmds[i] = q.cmd
			if d := timeoutOf(q.ctx); d == 0 || timeout != 0 && d > timeout {
				timeout = d
			}
		}
		f := w.r.Apply(state.EncodeBatch(cmds), timeout)
		for i, q := range group {
			q.f, q.batched, q.pos = f, true, i
		}
	}
}

// gather adds queued commands to batch and, while it holds fewer than
// want, waits for more: until no command has arrived for a quarter of the
// previous wave's duration or half of it has passed since gathering began
// (at most maxGather). A caller alone never waits (want is one, its own
// command); callers that do not come back cost the next wave a short gap
// once, and the wave after expects only those that did.
func (w *waves) gather(batch []*applyReq, want int, last time.Duration, timer *time.Timer) []*applyReq {
drain:
	for len(batch) < maxWave {
		select {
		case q := <-w.reqs:
			batch = append(batch, q)
		default:
			break drain
		}
	}
	if len(batch) >= want {
		return batch
	}
	hard := time.Now().Add(min(last/2, maxGather))
	gap := last / 4
	arm := func() {
		timer.Reset(min(gap, time.Until(hard)))
	}
	arm()
	defer timer.Stop()
	for len(batch) < want {
		select {
		case q := <-w.reqs:
			batch = append(batch, q)
			arm()
		case <-timer.C:
			return batch
		case <-w.stopper.Stopping():
			return batch
		}
	}
	return batch
}

// refuseQueued answers what is still queued when the loop stops.
func (w *waves) refuseQueued() {
	for {
		select {
		case q := <-w.reqs:
			q.resp <- applyResp{err: ha.ErrShutdown}
		default:
			return
		}
	}
}
