package kafkaha

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/delaymgr"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/succession"
)

// coordRecord is a coordination record, whether a challenge wrote it, and
// for a yield the member it is about and the yield's offset (-1: not a
// yield).
type coordRecord struct {
	succession.Record
	challenge bool
	member    succession.MemberID
	yield     int64
}

// internal results posted to the coordination loop
type (
	probed struct {
		offset int64
		err    error
	}
	registered struct{ err error }
	challenged struct {
		h   *holder
		err error
	}
)

// coordLoop owns the election: it folds the coordination topic, evaluates
// the succession rules on every change and at the instant the decision can
// change, and registers, challenges or leaves accordingly.
func (b *Backend) coordLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.wg.Go(func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	})
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		err := b.ensureTopics(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		b.log.Warn().Err(err).Dur("retry_in", wait).Msg("cannot create the coordination and state topics; retrying")
		if !sleepCtx(ctx, wait) {
			return
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.cfg.Brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.cfg.CoordTopic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.DisableFetchSessions(), // one partition: see runTailer
		kgo.DialTimeout(2*time.Second))
	if err != nil {
		b.log.Error().Err(err).Msg("coordination consumer")
		return
	}
	defer cl.Close()
	recs := make(chan []coordRecord, 16)
	b.wg.Go(func() {
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			var batch []coordRecord
			fs.EachError(func(t string, p int32, err error) {
				b.log.Debug().Err(err).Str("topic", t).Msg("coordination fetch")
			})
			fs.EachRecord(func(r *kgo.Record) {
				cr := coordRecord{Record: succession.Record{Key: r.Key, Value: r.Value, Offset: r.Offset, TimestampMillis: r.Timestamp.UnixMilli()}, yield: -1}
				for _, h := range r.Headers {
					switch h.Key {
					case headerChallenge:
						cr.challenge = true
					case headerMember:
						cr.member = succession.MemberID(h.Value)
					case headerYield:
						if y, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
							cr.yield = y
						}
					}
				}
				batch = append(batch, cr)
			})
			if len(batch) == 0 {
				continue
			}
			b.hook(func(h *hooks) func() { return h.coordBatch })
			select {
			case recs <- batch:
			case <-ctx.Done():
				return
			}
		}
	})

	latest := map[string]succession.Record{}
	// Every start registers anew: a recovered member lands at the tail of
	// the roster (no failback). regInFlight stays set until the fold shows
	// the registration, so a slow fetch never registers twice.
	regInFlight := true
	b.wg.Go(func() {
		for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			err := b.register(rctx)
			rcancel()
			if err == nil || ctx.Err() != nil {
				return
			}
			b.log.Warn().Err(err).Dur("retry_in", wait).Msg("registration failed; retrying")
			if !sleepCtx(ctx, wait) {
				return
			}
		}
	})
	// A challenge is decided on a fresh view only: first a probe record is
	// written, and the challenge goes ahead once the fold has read past it
	// and still says so. A member that was paused (or partitioned) would
	// otherwise act on the roster and lease it saw before, and take the
	// role back from a holder it has not heard of yet.
	var challengeInFlight, probing bool
	probe, maxSeen := int64(-1), int64(-1)
	tryChallenge := func(why string) {
		switch {
		case challengeInFlight || probing:
		case probe >= 0 && maxSeen >= probe:
			probe = -1
			challengeInFlight = true
			b.startChallenge(ctx, why)
		case probe >= 0:
			// waiting to read the probe back
		default:
			probing = true
			b.wg.Go(func() {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				defer pcancel()
				off, err := b.writeProbe(pctx)
				b.post(ctx, probed{offset: off, err: err})
			})
		}
	}
	leaseKey := string(succession.LeaseKey(b.cfg.Role))
	termOffset := int64(-1)
	leases := foreignLeases{}
	// The next evaluation is due at the instant the decision can change
	// (or sooner); delaymgr fires it as a wake-up of this loop.
	delays := delaymgr.New(delaymgr.RealClock())
	defer delays.Stop()
	wake := make(chan struct{}, 1)
	var due *delaymgr.Handle
	evaluateIn := func(d time.Duration) {
		if due != nil {
			due.Cancel()
		}
		due = delays.After(d, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}
	evaluateIn(500 * time.Millisecond)
	for {
		select {
		case <-ctx.Done():
			return
		case batch := <-recs:
			for _, r := range batch {
				latest[string(r.Key)] = r.Record
				maxSeen = max(maxSeen, r.Offset)
				leases.fold(b.cfg.Role, succession.MemberID(b.cfg.Member), leaseKey, r)
				// The term is the offset (+1) of the latest challenge's
				// lease record, the same on every member.
				if r.challenge && string(r.Key) == leaseKey {
					termOffset = r.Offset
				}
			}
		case <-wake:
		case <-b.kick:
		case off := <-b.yields:
			b.wg.Go(func() {
				yctx, ycancel := context.WithTimeout(ctx, 5*time.Second)
				defer ycancel()
				b.writeYield(yctx, off)
			})
		case p := <-b.posts:
			switch p := p.(type) {
			case registered:
				if p.err != nil {
					regInFlight = false
					b.log.Warn().Err(p.err).Msg("registration failed; retrying")
				}
			case probed:
				probing = false
				if p.err != nil {
					b.log.Warn().Err(p.err).Msg("cannot write the freshness probe; retrying")
				} else {
					probe = p.offset
				}
			case challenged:
				challengeInFlight = false
				if p.err != nil {
					b.log.Info().Err(p.err).Msg("challenge lost or failed")
				} else if !b.take(p.h) {
					p.h.shutdown()
				}
			}
		}
		all := make([]succession.Record, 0, len(latest))
		for _, r := range latest {
			all = append(all, r)
		}
		state := succession.FoldRecords(b.cfg.Role, all)
		b.observe(state, termOffset)
		b.noteFold(maxSeen, leases.until(b.nowMillis()))

		now := b.nowMillis()
		me := succession.MemberID(b.cfg.Member)
		if regInFlight && !b.registeredIn(state) {
			// This run's registration is not folded yet: ranks from an
			// older registration must not drive a challenge.
			evaluateIn(50 * time.Millisecond)
			continue
		}
		d := succession.Evaluate(state, me, now, b.cfg.Lease)
		h := b.currentHolder()
		next := now + 1000
		switch d.Action {
		case succession.NotRegistered:
			// A holder that releases the role deregistered itself: it
			// leaves once its release has committed (ending the tenure now
			// would cancel that commit and fail TransferLeadership).
			if h != nil && !h.leaving.Load() {
				b.lose(h, "no longer in the roster")
			}
			probe = -1
			if now < b.handoverUntil.Load() && (state.Lease == nil || state.Lease.Holder == me) {
				// Handed over: wait for the successor before joining
				// the roster again.
				next = min(next, now+50)
				break
			}
			if !regInFlight {
				regInFlight = true
				b.wg.Go(func() {
					rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
					defer rcancel()
					b.post(ctx, registered{b.register(rctx)})
				})
			}
		case succession.Hold:
			regInFlight = false
			if h == nil {
				// The lease names this member but this process does not
				// hold it: a previous incarnation did. Reclaim it (the
				// challenge fences that incarnation).
				tryChallenge("the lease names this member from a previous run")
				next = min(next, now+20)
			} else {
				probe = -1
				h.setRenewAt(time.UnixMilli(d.WaitUntilMillis))
				next = min(next, d.WaitUntilMillis)
			}
		case succession.Challenge:
			regInFlight = false
			switch {
			case h != nil:
				// Our lease as the topic shows it ran out (renewals not
				// visible yet, or late): renew now.
				h.setRenewAt(time.UnixMilli(now))
			default:
				tryChallenge("succession: this member's turn")
				next = min(next, now+20)
			}
		case succession.Wait:
			regInFlight = false
			probe = -1
			// A lease naming another member that comes after this holder's
			// own lease record means another challenge fenced it; one from
			// before (the view has not reached that record yet) does not.
			if h != nil && state.Lease != nil && state.Lease.Holder != me && maxSeen >= int64(h.term)-1 {
				b.lose(h, "the lease names "+string(state.Lease.Holder))
			}
			if d.WaitUntilMillis > 0 {
				next = min(next, d.WaitUntilMillis)
			}
		}
		if h := b.currentHolder(); h != nil {
			if !h.leaseValid(time.Now()) {
				b.lose(h, "the lease runs out before a renewal committed")
			} else {
				next = min(next, h.validUntil().UnixMilli())
			}
		}
		evaluateIn(time.Duration(max(next-b.nowMillis(), 1)) * time.Millisecond)
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

// foreignLeases holds, per other member, its latest lease record (offset
// and deadline): until that deadline the member may act on it (confirm
// reads with VerifyLeader) unless it announced that it left (a yield record
// naming the offset of its last lease record). A new holder serves only
// once no other member's lease is left, so that a challenge decided on a
// stale view (it missed a renewal, or a simultaneous challenger's grant)
// never leaves two members trusting a lease at once.
type foreignLeases map[succession.MemberID]struct{ offset, deadline int64 }

func (l foreignLeases) fold(role string, me succession.MemberID, leaseKey string, r coordRecord) {
	switch {
	case string(r.Key) == leaseKey:
		// A hand-over ends the lease now (a grant whose deadline is now):
		// its holder stopped acting on it first.
		if lease := succession.FoldRecords(role, []succession.Record{r.Record}).Lease; lease != nil && lease.Holder != me {
			l[lease.Holder] = struct{ offset, deadline int64 }{r.Offset, lease.DeadlineMillis}
		}
	case r.yield >= 0:
		if e, ok := l[r.member]; ok && e.offset <= r.yield {
			delete(l, r.member)
		}
	}
}

// until is when the last other member's lease runs out; it forgets the
// leases that ran out before now.
func (l foreignLeases) until(now int64) int64 {
	var u int64
	for m, e := range l {
		if e.deadline <= now {
			delete(l, m)
		} else {
			u = max(u, e.deadline)
		}
	}
	return u
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

// registeredIn reports whether state holds this run's registration.
func (b *Backend) registeredIn(state succession.RoleState) bool {
	mine := b.myReg.Load()
	if mine < 0 {
		return false
	}
	for _, r := range state.Roster {
		if r.Member == succession.MemberID(b.cfg.Member) {
			return r.Offset >= mine
		}
	}
	return false
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
	// Checked under mu, as Shutdown closes stop: a holder installed here is
	// one Shutdown sees.
	select {
	case <-b.stop:
		b.mu.Unlock()
		return false
	default:
	}
	b.hook(func(h *hooks) func() { return h.take })
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
	b.wg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, time.Duration(b.cfg.Lease.LeaseMillis)*time.Millisecond)
		defer cancel()
		h, err := b.challenge(cctx)
		b.post(ctx, challenged{h: h, err: err})
		if err == nil && ctx.Err() != nil {
			h.shutdown()
		}
	})
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
