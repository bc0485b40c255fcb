package controller

import (
	"context"
	"fmt"
	"sync"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/state"
)

// Apply replicates an encoded command through raft and returns the FSM's
// result. The caller (the gate) has checked the role; raft checks it again.
func (n *Node) Apply(ctx context.Context, cmd []byte) (state.Result, error) {
	b := n.backend.Load()
	if b == nil {
		return state.Result{}, ha.ErrNotLeader
	}
	resp, _, err := b.Apply(ctx, cmd)
	if err != nil {
		return state.Result{}, err
	}
	r, ok := resp.(state.Result)
	if !ok {
		return state.Result{}, fmt.Errorf("unexpected FSM response %T", resp)
	}
	return r, nil
}

// ReadBarrier makes the next FSM read linearizable: it confirms leadership
// with a quorum after the call began and waits until the FSM has applied
// everything committed before that. Concurrent callers share one round
// (read-index batching), so reads under load do not each cost a round trip.
func (n *Node) ReadBarrier(ctx context.Context) error {
	b := n.backend.Load()
	if b == nil {
		return ha.ErrNotLeader
	}
	return n.reads.wait(ctx, n, b)
}

// readBatch is one round of leadership confirmation shared by every reader
// that joined before it started.
type readBatch struct {
	done chan struct{}
	err  error
}

type readBatcher struct {
	mu      sync.Mutex
	next    *readBatch // collecting readers, not started
	running bool
}

func (rb *readBatcher) wait(ctx context.Context, n *Node, b ha.Backend) error {
	rb.mu.Lock()
	if rb.next == nil {
		rb.next = &readBatch{done: make(chan struct{})}
	}
	batch := rb.next
	if !rb.running {
		rb.next = nil
		rb.running = n.stopper.Go(func() { rb.run(n, b, batch) })
		if !rb.running {
			// The node is stopping: no round starts.
			batch.err = ha.ErrShutdown
			close(batch.done)
		}
	}
	rb.mu.Unlock()
	select {
	case <-batch.done:
		return batch.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run confirms leadership for batch, then for whatever batch gathered
// meanwhile, until none is waiting.
func (rb *readBatcher) run(n *Node, b ha.Backend, batch *readBatch) {
	for batch != nil {
		commit := b.CommitIndex()
		err := b.VerifyLeader(context.Background())
		if err == nil {
			err = n.fsm.WaitApplied(n.stopper.Stopping(), commit)
		}
		batch.err = err
		close(batch.done)
		rb.mu.Lock()
		batch = rb.next
		rb.next = nil
		if batch == nil {
			rb.running = false
		}
		rb.mu.Unlock()
	}
}
