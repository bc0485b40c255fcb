package kafkaha

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/delaymgr"
	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/kafkaerr"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/succession"
)

// internal results posted to the coordination loop
type (
	probed struct {
		offset int64
		err    error
	}
	registered struct{ offset int64 }
	challenged struct {
		h   *holder
		err error
	}
)

// coordLoop owns the election: it reads the coordination topic and the
// results of its own writes, steps the coordinator (succession.Coordinator,
// which decides) and performs what it says: register, probe, challenge,
// take or leave the role, renew, announce a yield, and arm the timer of the
// next evaluation. It runs until ctx ends.
func (b *Backend) coordLoop(ctx context.Context) {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		err := b.ensureTopics(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		wait := retry.Next()
		b.log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("cannot create the coordination and state topics; retrying")
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
	cl, err := kgo.NewClient(b.clientOpts(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.cfg.CoordTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.DisableFetchSessions(), // one partition: see runTailer
	)...)
	if err != nil {
		b.log.Error().Err(err).Msg("coordination consumer")
		return
	}
	defer cl.Close()
	recs := make(chan []succession.CoordRecord, 16)
	b.stopper.Go(func() {
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var batch []succession.CoordRecord
			fs.EachError(func(t string, p int32, err error) {
				b.log.Debug().Err(err).Str("topic", t).Msg("coordination fetch")
			})
			fs.EachRecord(func(r *kgo.Record) { batch = append(batch, coordRecord(r)) })
			if len(batch) == 0 {
				continue
			}
			select {
			case recs <- batch:
			case <-ctx.Done():
				return
			}
		}
	})

	coord := succession.NewCoordinator(b.cfg.Role, succession.MemberID(b.cfg.Member), b.cfg.Lease)
	// The next evaluation is due at the instant the decision can change
	// (or sooner); delaymgr fires it as a wake-up of this loop.
	delays := delaymgr.New(delaymgr.RealClock())
	defer delays.Stop()
	wake := make(chan struct{}, 1)
	var due *delaymgr.Handle
	// won is the holder of a challenge that committed, until DoTake.
	var won *holder
	step := func(ev succession.Event) {
		if h := b.currentHolder(); h != nil {
			ev.Tenure = succession.Tenure{Held: true, Term: h.term,
				ValidUntilMillis: h.validUntil().UnixMilli(), Leaving: h.leaving.Load()}
		}
		ev.HandoverUntilMillis = b.handoverUntil.Load()
		effs := coord.Step(ev, b.nowMillis())
		b.observe(coord.State(), coord.TermOffset())
		b.noteFold(coord.Folded(), coord.ForeignUntil())
		for _, e := range effs {
			switch e.Kind {
			case succession.DoRegister:
				b.stopper.Go(func() {
					if off, ok := b.registerUntilDone(ctx); ok {
						b.post(ctx, registered{off})
					}
				})
			case succession.DoProbe:
				b.stopper.Go(func() {
					pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
					defer pcancel()
					off, err := b.writeProbe(pctx)
					b.post(ctx, probed{offset: off, err: err})
				})
			case succession.DoChallenge:
				b.startChallenge(ctx, e.Reason)
			case succession.DoTake:
				if h := won; h != nil && !b.take(h) {
					h.shutdown()
				}
				won = nil
			case succession.DoStepDown:
				if h := b.currentHolder(); h != nil {
					b.lose(h, e.Reason)
				}
			case succession.DoRenewAt:
				if h := b.currentHolder(); h != nil {
					h.setRenewAt(time.UnixMilli(e.AtMillis))
				}
			case succession.DoYield:
				b.stopper.Go(func() {
					yctx, ycancel := context.WithTimeout(ctx, 5*time.Second)
					defer ycancel()
					b.writeYield(yctx, e.Offset)
				})
			case succession.DoTimer:
				if due != nil {
					due.Cancel()
				}
				due = delays.After(time.Duration(max(e.AtMillis-b.nowMillis(), 1))*time.Millisecond, func() {
					select {
					case wake <- struct{}{}:
					default:
					}
				})
			}
		}
	}
	step(succession.Event{Kind: succession.EventStart})
	for {
		select {
		case <-ctx.Done():
			return
		case batch := <-recs:
			step(succession.Event{Kind: succession.EventRecords, Records: batch})
		case <-wake:
			step(succession.Event{Kind: succession.EventTimer})
		case <-b.kick:
			step(succession.Event{Kind: succession.EventTimer})
		case off := <-b.yields:
			step(succession.Event{Kind: succession.EventLeft, Offset: off})
		case p := <-b.posts:
			switch p := p.(type) {
			case registered:
				step(succession.Event{Kind: succession.EventRegistered, Offset: p.offset})
			case probed:
				if p.err != nil {
					b.log.Warn().Err(kafkaerr.Explain(p.err)).Msg("cannot write the freshness probe; retrying")
				}
				step(succession.Event{Kind: succession.EventProbed, Offset: p.offset, Err: p.err})
			case challenged:
				ev := succession.Event{Kind: succession.EventChallenged, Err: p.err}
				if p.err != nil {
					b.log.Info().Err(kafkaerr.Explain(p.err)).Msg("challenge lost or failed")
				} else {
					won = p.h
					ev.Term, ev.ValidUntilMillis = p.h.term, p.h.validUntil().UnixMilli()
				}
				step(ev)
			}
		}
	}
}

// coordRecord reads a coordination record and its headers.
func coordRecord(r *kgo.Record) succession.CoordRecord {
	cr := succession.CoordRecord{Record: succession.Record{Key: r.Key, Value: r.Value, Offset: r.Offset, TimestampMillis: r.Timestamp.UnixMilli()}}
	var member succession.MemberID
	yield := int64(-1)
	for _, h := range r.Headers {
		switch h.Key {
		case headerChallenge:
			cr.Challenge = true
		case headerMember:
			member = succession.MemberID(h.Value)
		case headerYield:
			if y, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				yield = y
			}
		}
	}
	if yield >= 0 {
		cr.YieldOf, cr.YieldUpTo = member, yield
	}
	return cr
}

// registerUntilDone appends this member's registration record, retrying
// until it is written or the loop stops.
func (b *Backend) registerUntilDone(ctx context.Context) (int64, bool) {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		off, err := b.register(rctx)
		rcancel()
		if err == nil {
			return off, true
		}
		if ctx.Err() != nil {
			return 0, false
		}
		wait := retry.Next()
		b.log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("registration failed; retrying")
		if !backoff.Sleep(ctx, wait) {
			return 0, false
		}
	}
}

// writeProbe appends a record no rule reads, so that reading it back proves
// the fold has seen everything written before it.
func (b *Backend) writeProbe(ctx context.Context) (int64, error) {
	r := &kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0,
		Key:   []byte("probe/" + b.cfg.Role + "/" + b.cfg.Member),
		Value: strconv.AppendInt(nil, time.Now().UnixMilli(), 10)}
	if err := b.plain.ProduceSync(ctx, r).FirstErr(); err != nil {
		return -1, err
	}
	return r.Offset, nil
}

// writeYield announces that this member no longer acts on the lease
// records it wrote up to offset.
func (b *Backend) writeYield(ctx context.Context, offset int64) {
	r := &kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0,
		Key:   []byte("yield/" + b.cfg.Role + "/" + b.cfg.Member),
		Value: strconv.AppendInt(nil, offset, 10),
		Headers: []kgo.RecordHeader{{Key: headerMember, Value: []byte(b.cfg.Member)},
			{Key: headerYield, Value: strconv.AppendInt(nil, offset, 10)}}}
	if err := b.plain.ProduceSync(ctx, r).FirstErr(); err != nil {
		b.log.Warn().Err(err).Msg("cannot announce that this member left the role; the next holder waits for its lease to run out")
	}
}

func (b *Backend) noteFold(folded, foreignUntil int64) {
	b.mu.Lock()
	b.folded, b.foreignUntil = folded, foreignUntil
	b.mu.Unlock()
}

func (b *Backend) post(ctx context.Context, v any) {
	select {
	case b.posts <- v:
	case <-ctx.Done():
	}
}

// observe records the folded state and, for a member that does not hold the
// role, the view: the lease holder is the leader, and the term counts holder
// changes (the offset of the lease record that named the current holder).
func (b *Backend) observe(state succession.RoleState, termOffset int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := !slices.Equal(b.state.Roster, state.Roster) || (b.state.Lease == nil) != (state.Lease == nil) ||
		(state.Lease != nil && b.state.Lease != nil && *state.Lease != *b.state.Lease)
	b.state = cloneState(state)
	if termOffset >= 0 {
		if t := uint64(termOffset) + 1; t > b.term {
			b.term = t
		}
	}
	if b.holding == nil {
		v := ha.Observed{State: ha.StateFollower, Term: b.term}
		if l := state.Lease; l != nil && l.Live(b.nowMillis()) && l.Holder != succession.MemberID(b.cfg.Member) {
			v.LeaderID = string(l.Holder)
		}
		if v != b.view {
			b.view = v
			changed = true
		}
	}
	if changed {
		b.notify()
	}
}

// take makes h the holder; false when the backend is stopping.
func (b *Backend) take(h *holder) bool {
	b.mu.Lock()
	// Checked under mu, as Shutdown begins to stop: a holder installed
	// here is one Shutdown sees.
	select {
	case <-b.stopper.Stopping():
		b.mu.Unlock()
		return false
	default:
	}
	if b.holding != nil {
		b.mu.Unlock()
		return false
	}
	b.holding = h
	if h.term > b.term {
		b.term = h.term
	}
	b.view = ha.Observed{State: ha.StateLeader, Term: h.term, LeaderID: b.cfg.Member}
	b.mu.Unlock()
	b.applyMu.Lock()
	b.lastTerm = h.term
	b.applyMu.Unlock()
	b.log.Info().Uint64("term", h.term).Int16("epoch", h.epoch).Msg("won the role: the producer epoch fences every older holder")
	h.start()
	b.notify()
	return true
}

// startChallenge runs a challenge off the loop and posts its result.
func (b *Backend) startChallenge(ctx context.Context, why string) {
	b.log.Info().Str("why", why).Msg("challenging for the role")
	b.stopper.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, time.Duration(b.cfg.Lease.LeaseMillis)*time.Millisecond)
		defer cancel()
		h, err := b.challenge(cctx)
		b.post(ctx, challenged{h: h, err: err})
		if err == nil && ctx.Err() != nil {
			h.shutdown()
		}
	})
}
