package kafkaha

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/kafkaerr"
	"github.com/xce/xce/internal/stopper"
	"github.com/xce/xce/state"
)

// maxBatch bounds the writes of one transaction.
const maxBatch = 500

// op is one write (or the hand-over) waiting for the holder's writer.
type op struct {
	cmd     []byte
	release bool
	// barrier: commit cmd but leave applying it to the tailer (see Barrier).
	barrier bool
	done    chan opResult
}

type opResult struct {
	resp  any
	index uint64
	err   error
}

// holder is this member's tenure of the role: a transactional client whose
// epoch is the fence, and the one goroutine (own) that uses it and closes
// it.
type holder struct {
	b     *Backend
	cl    *kgo.Client
	term  uint64
	epoch int16
	ops   chan *op
	// life owns the holder's goroutine. Its Stopping closes when the tenure
	// ends (shutdown), and its Context, under which the writer commits, is
	// cancelled with it, so that a transaction in flight does not hold
	// shutdown up.
	life *stopper.Stopper
	// begin closes when the writer may run (start).
	begin chan struct{}
	// exit closes once the holder's goroutine has returned, the writer
	// run or not: after that nothing answers an op left in ops.
	exit chan struct{}
	// barrierMu (a one-slot semaphore) runs one Barrier at a time.
	barrierMu chan struct{}

	mu       sync.Mutex
	ready    bool
	deadline time.Time // of the last committed grant
	renewAt  time.Time
	kick     chan struct{}

	// ownsLog (guarded by b.mu) is set when Barrier has taken the state
	// topic over from the tailer: while this holder holds, only its writer
	// applies (startTailer refuses).
	ownsLog bool
	// leaving: TransferLeadership is releasing the lease; released: the
	// release committed.
	leaving, released atomic.Bool
	// leaseOff is the offset of the last lease record this holder committed.
	leaseOff atomic.Int64
}

func (b *Backend) newTxnClient() (*kgo.Client, error) {
	return kgo.NewClient(b.clientOpts(
		kgo.TransactionalID(b.cfg.TransactionalID),
		// A holder that dies with a transaction open must not block the
		// state topic's last stable offset for long: the next challenge
		// aborts it at once, the broker after this timeout.
		kgo.TransactionTimeout(max(time.Duration(b.cfg.Lease.LeaseMillis)*time.Millisecond, time.Second)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	)...)
}

// challenge takes the role: InitProducerId on the role's transactional id
// mints the newest epoch (aborting whatever an older holder left open and
// rejecting its late writes), then a committed lease record names this
// member. Of simultaneous challengers exactly one ends with the newest
// epoch; the others fail here or on their first guarded write.
func (b *Backend) challenge(ctx context.Context) (*holder, error) {
	cl, err := b.newTxnClient()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	lease := b.cfg.Lease.Grant(succession.MemberID(b.cfg.Member), start.UnixMilli())
	k, v := succession.LeaseRecord(b.cfg.Role, lease)
	rec := &kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0, Key: k, Value: v,
		Headers: []kgo.RecordHeader{{Key: headerChallenge, Value: []byte("1")}}}
	err = func() error {
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("lease record: %w", err)
		}
		return cl.EndTransaction(ctx, kgo.TryCommit)
	}()
	if err != nil {
		// Never abort or reuse the client: a reload of its producer id
		// could take a newer holder's epoch back. The open transaction
		// dies with the next challenge or the transaction timeout.
		cl.Close()
		return nil, err
	}
	_, epoch, _ := cl.ProducerID(ctx)
	h := &holder{
		b: b, cl: cl, term: uint64(rec.Offset) + 1, epoch: epoch,
		ops: make(chan *op, maxBatch), life: stopper.New(), begin: make(chan struct{}), exit: make(chan struct{}),
		barrierMu: make(chan struct{}, 1),
		deadline:  time.UnixMilli(lease.DeadlineMillis),
		renewAt:   start.Add(time.Duration(b.cfg.Lease.RenewMillis) * time.Millisecond),
		kick:      make(chan struct{}, 1),
	}
	h.leaseOff.Store(rec.Offset)
	h.life.Go(h.own)
	b.log.Info().Int16("epoch", epoch).Int64("lease_offset", rec.Offset).Dur("took", time.Since(start)).
		Time("deadline", h.deadline).Msg("challenge committed")
	return h, nil
}

func (h *holder) isReady() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready
}

func (h *holder) markReady() {
	h.mu.Lock()
	h.ready = true
	h.mu.Unlock()
}

// margin is how long before the lease's deadline the holder stops acting
// on it, for clock drift between members.
func (h *holder) margin() time.Duration {
	return time.Duration(h.b.cfg.Lease.LeaseMillis) * time.Millisecond / 10
}

func (h *holder) validUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline.Add(-h.margin())
}

func (h *holder) leaseValid(now time.Time) bool { return now.Before(h.validUntil()) }

func (h *holder) setRenewAt(t time.Time) {
	h.mu.Lock()
	changed := t.Before(h.renewAt)
	if changed {
		h.renewAt = t
	}
	h.mu.Unlock()
	if changed {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// done closes when the tenure ends.
func (h *holder) done() <-chan struct{} { return h.life.Stopping() }

// own is the holder's goroutine: it runs the writer once start lets it,
// unless the tenure ends first, then closes the client and exit.
func (h *holder) own() {
	defer close(h.exit)
	defer h.cl.Close()
	select {
	case <-h.begin:
		h.run()
	case <-h.done():
	}
}

// shutdown ends the tenure and waits until the writer has exited and the
// client is closed; it may be called more than once. A writer that has not
// started yet never will. It must not be called from the writer.
func (h *holder) shutdown() { h.life.Stop() }

// start lets the writer run, unless shutdown came first. The loop calls it
// once, when it makes h the holder.
func (h *holder) start() { close(h.begin) }

// submit hands o to the writer and waits for its answer. An op the writer
// never took (it exited first) fails with ErrNotLeader: it was not written.
func (h *holder) submit(ctx context.Context, o *op) opResult {
	select {
	case <-h.done():
		return opResult{err: ErrNotLeader}
	default:
	}
	select {
	case h.ops <- o:
	case <-h.done():
		return opResult{err: ErrNotLeader}
	case <-ctx.Done():
		return opResult{err: ctx.Err()}
	}
	select {
	case r := <-o.done:
		return r
	case <-h.exit:
		// The writer answers every op it took before it exits.
		select {
		case r := <-o.done:
			return r
		default:
			return opResult{err: ErrNotLeader}
		}
	case <-ctx.Done():
		return opResult{err: ctx.Err()}
	}
}

// run is the writer: it commits batches of writes, and the lease renewal
// when it is due, each in one transaction under the holder's epoch.
func (h *holder) run() {
	b := h.b
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		// Once the tenure is over, commit nothing more (select would pick
		// among ready cases at random).
		select {
		case <-h.done():
			h.failQueued()
			return
		default:
		}
		h.mu.Lock()
		renewAt := h.renewAt
		h.mu.Unlock()
		timer.Reset(max(time.Until(renewAt), 0))
		var batch []*op
		select {
		case <-h.done():
			h.failQueued()
			return
		case o := <-h.ops:
			batch = append(batch, o)
		drain:
			for len(batch) < maxBatch {
				select {
				case o := <-h.ops:
					batch = append(batch, o)
				default:
					break drain
				}
			}
		case <-timer.C:
		case <-h.kick:
			continue
		}
		renew := !time.Now().Before(renewAt)
		release := false
		for _, o := range batch {
			release = release || o.release
		}
		if len(batch) == 0 && !renew {
			continue
		}
		if err := h.commit(batch, renew || release); err != nil {
			for _, o := range batch {
				o.done <- opResult{err: fmt.Errorf("%w: %v", ErrNotLeader, err)}
			}
			reason := "transaction failed: " + err.Error()
			if kafkaerr.Fenced(err) {
				reason = "fenced: another member holds the role (" + err.Error() + ")"
			}
			// lose waits for this goroutine: call it from another one.
			// (Once the backend stops, Shutdown ends the tenure instead.)
			b.stopper.Go(func() { b.lose(h, reason) })
			h.failQueuedUntilDone()
			return
		}
		if release {
			b.stopper.Go(func() { b.lose(h, "handed the role on") })
			h.failQueuedUntilDone()
			return
		}
	}
}

func (h *holder) failQueued() {
	for {
		select {
		case o := <-h.ops:
			o.done <- opResult{err: ErrNotLeader}
		default:
			return
		}
	}
}

// failQueuedUntilDone answers writes that still arrive until shutdown.
func (h *holder) failQueuedUntilDone() {
	for {
		select {
		case o := <-h.ops:
			o.done <- opResult{err: ErrNotLeader}
		case <-h.done():
			h.failQueued()
			return
		}
	}
}

// commit writes batch (and a lease record when lease is set) in one
// transaction and, once it committed, applies the writes to the FSM in
// offset order. Any error ends the tenure: the outcome of a failed commit
// is unknown, and the tailer will apply whatever did commit.
func (h *holder) commit(batch []*op, lease bool) error {
	b := h.b
	start := time.Now()
	ctx, cancel := context.WithTimeout(h.life.Context(), time.Duration(b.cfg.Lease.LeaseMillis)*time.Millisecond)
	defer cancel()
	if err := h.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	termHdr := kgo.RecordHeader{Key: headerTerm, Value: strconv.AppendUint(nil, h.term, 10)}
	var recs []*kgo.Record
	var writes, barriers []*op
	var barrierRecs []*kgo.Record
	release := false
	for _, o := range batch {
		switch {
		case o.release:
			release = true
		case o.barrier:
			r := &kgo.Record{Topic: b.cfg.StateTopic, Partition: 0, Value: o.cmd, Headers: []kgo.RecordHeader{termHdr}}
			barriers, barrierRecs = append(barriers, o), append(barrierRecs, r)
		default:
			recs = append(recs, &kgo.Record{Topic: b.cfg.StateTopic, Partition: 0, Value: o.cmd, Headers: []kgo.RecordHeader{termHdr}})
			writes = append(writes, o)
		}
	}
	nWrites := len(recs)
	recs = append(recs, barrierRecs...)
	me := succession.MemberID(b.cfg.Member)
	grant := b.cfg.Lease.Grant(me, start.UnixMilli())
	switch {
	case release:
		// Deregister and let the lease end now: the first member in join
		// order is rank 0 and challenges at once (deadline + 0), while
		// everyone else keeps its stagger. (Removing the lease instead
		// would anchor every member on its own registration, and a member
		// that registers again would race the successor.)
		k, v := succession.LeaseRecord(b.cfg.Role, succession.Lease{Holder: me, DeadlineMillis: start.UnixMilli()})
		recs = append(recs,
			&kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0, Key: succession.DeregistrationKey(b.cfg.Role, me)},
			&kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0, Key: k, Value: v})
	case lease:
		k, v := succession.LeaseRecord(b.cfg.Role, grant)
		recs = append(recs, &kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0, Key: k, Value: v})
	}
	if err := h.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if err := h.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if release {
		h.released.Store(true)
	}
	if lease && !release {
		h.leaseOff.Store(recs[len(recs)-1].Offset)
		h.mu.Lock()
		h.deadline = time.UnixMilli(grant.DeadlineMillis)
		h.renewAt = start.Add(time.Duration(b.cfg.Lease.RenewMillis) * time.Millisecond)
		h.mu.Unlock()
	}
	if len(writes) > 0 {
		entries := make([]state.Entry, len(writes))
		for i := range writes {
			entries[i] = state.Entry{Index: uint64(recs[i].Offset) + 1, Term: h.term, Data: writes[i].cmd}
		}
		b.applyMu.Lock()
		resps := b.fsm.ApplyBatch(entries)
		b.next = recs[nWrites-1].Offset + 1
		b.sinceSnap += uint64(len(writes))
		b.applyMu.Unlock()
		for i, o := range writes {
			o.done <- opResult{resp: resps[i], index: entries[i].Index}
		}
	}
	for i, o := range barriers {
		o.done <- opResult{index: uint64(barrierRecs[i].Offset) + 1}
	}
	for _, o := range batch {
		if o.release {
			o.done <- opResult{}
		}
	}
	return nil
}

// barrier commits cmd under this epoch without applying it, and returns
// its index: once the tailer has applied it, every earlier record is
// applied too.
func (h *holder) barrier(ctx context.Context, cmd []byte) (uint64, error) {
	r := h.submit(ctx, &op{cmd: cmd, barrier: true, done: make(chan opResult, 1)})
	return r.index, r.err
}

// release hands the role on through the writer: deregistration and lease
// release in one transaction.
func (h *holder) release(ctx context.Context) error {
	return h.submit(ctx, &op{release: true, done: make(chan opResult, 1)}).err
}
