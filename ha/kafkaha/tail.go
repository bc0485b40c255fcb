package kafkaha

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/internal/stopper"
	"github.com/xce/xce/state"
)

// tailer owns the goroutine that applies the state topic's committed
// records while this member does not write it.
type tailer struct{ *stopper.Stopper }

// startTailer starts the tailer from the next offset to apply, unless it
// runs, the backend is stopping, or a holder applies its own writes.
func (b *Backend) startTailer() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stopper.Stopping():
		return
	default:
	}
	if b.tail != nil || (b.holding != nil && b.holding.ownsLog) {
		return
	}
	t := &tailer{stopper.New()}
	b.tail = t
	b.applyMu.Lock()
	from := b.next
	b.applyMu.Unlock()
	t.GoCtx(func(ctx context.Context) { b.runTailer(ctx, from) })
}

func (b *Backend) stopTailer() {
	b.mu.Lock()
	t := b.tail
	b.tail = nil
	b.mu.Unlock()
	t.stop()
}

// stop stops the tailer and waits for it; nil is a no-op.
func (t *tailer) stop() {
	if t != nil {
		t.Stop()
	}
}

func (b *Backend) runTailer(ctx context.Context, from int64) {
	cl, err := kgo.NewClient(b.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.cfg.StateTopic: {0: kgo.NewOffset().At(from)}}),
		// Never reset past a gap (the default resets to the start of what
		// the topic still holds, and the FSM would silently miss writes):
		// fail the partition instead.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		// One partition: a fetch session (KIP-227) saves nothing, and with
		// one kfake stops reporting the partition after a while.
		kgo.DisableFetchSessions(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		b.log.Error().Err(err).Msg("state consumer")
		return
	}
	defer cl.Close()
	b.log.Debug().Int64("from", from).Msg("tailing the state topic")
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		gap := false
		fs.EachError(func(t string, p int32, err error) {
			if errors.Is(err, kerr.OffsetOutOfRange) {
				gap = true
			} else {
				b.log.Debug().Err(err).Msg("state fetch")
			}
		})
		if gap {
			// The partition is failed for good (NoResetOffset): stop here
			// rather than poll it in a loop. Nothing is applied any more.
			b.applyMu.Lock()
			next := b.next
			b.applyMu.Unlock()
			b.log.Error().Int64("next", next).Msg("the state topic no longer holds the records after this node's snapshot: its retention dropped them; this node applies nothing more: restore it from a peer's data dir")
			return
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.LastStableOffset > 0 {
				b.lso.Store(p.LastStableOffset)
			}
			if len(p.Records) == 0 {
				return
			}
			b.applyMu.Lock()
			defer b.applyMu.Unlock()
			entries := make([]state.Entry, 0, len(p.Records))
			for _, r := range p.Records {
				if r.Offset < b.next {
					continue
				}
				entries = append(entries, state.Entry{Index: uint64(r.Offset) + 1, Term: termOf(r), Data: r.Value})
				b.next = r.Offset + 1
			}
			if len(entries) > 0 {
				b.fsm.ApplyBatch(entries)
				b.sinceSnap += uint64(len(entries))
				b.lastTerm = entries[len(entries)-1].Term
			}
		})
	}
}

func termOf(r *kgo.Record) uint64 {
	for _, h := range r.Headers {
		if h.Key == headerTerm {
			if t, err := strconv.ParseUint(string(h.Value), 10, 64); err == nil {
				return t
			}
		}
	}
	return 0
}

// restore loads the latest snapshot from the data dir.
func (b *Backend) restore() error {
	metas, err := b.snaps.List()
	if err != nil {
		return fmt.Errorf("listing snapshots: %w", err)
	}
	if len(metas) == 0 {
		return nil
	}
	meta, rc, err := b.snaps.Open(metas[0].ID)
	if err != nil {
		return fmt.Errorf("opening snapshot %s: %w", metas[0].ID, err)
	}
	err = b.fsm.Restore(rc)
	rc.Close()
	if err != nil {
		return fmt.Errorf("restoring snapshot %s: %w", meta.ID, err)
	}
	b.next, b.lastTerm = int64(meta.Index), meta.Term
	b.log.Info().Str("snapshot", meta.ID).Uint64("next_offset", meta.Index).Msg("restored the snapshot; replaying the state topic after it")
	return nil
}

// snapshot writes the FSM to the data dir when records were applied since
// the last one (always when force).
func (b *Backend) snapshot(force bool) {
	b.applyMu.Lock()
	if b.sinceSnap == 0 || (!force && b.sinceSnap < b.cfg.SnapshotThreshold) {
		b.applyMu.Unlock()
		return
	}
	snap := b.fsm.Snapshot()
	next, term := b.next, b.lastTerm
	b.sinceSnap = 0
	b.applyMu.Unlock()
	defer snap.Release()
	sink, err := b.snaps.Create(raft.SnapshotVersionMax, uint64(next), term, raft.Configuration{}, 0, nil)
	if err != nil {
		b.log.Error().Err(err).Msg("snapshot")
		return
	}
	if err := snap.Write(sink); err != nil {
		sink.Cancel()
		b.log.Error().Err(err).Msg("snapshot")
		return
	}
	if err := sink.Close(); err != nil {
		b.log.Error().Err(err).Msg("snapshot")
		return
	}
	b.log.Info().Int64("next_offset", next).Msg("snapshot written")
}

// snapshotLoop snapshots every SnapshotInterval until ctx ends.
func (b *Backend) snapshotLoop(ctx context.Context) {
	t := time.NewTicker(b.cfg.SnapshotInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.snapshot(false)
		}
	}
}
