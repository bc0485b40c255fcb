package kafkaha

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/delaymgr"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/kafkaerr"
)

// An input is what the coordination loop received: a batch of records, a
// timer, a tenure that ended, or the result of one of its own writes.
type input interface{ isInput() }

type (
	// started: the loop starts; every start registers anew.
	started struct{}
	// fetched: records read from the coordination topic.
	fetched struct{ recs []succession.CoordRecord }
	// timerFired: the evaluation the coordinator asked for is due.
	timerFired struct{}
	// tenureEnded: this member's tenure ended (lose); evaluate again now.
	tenureEnded struct{}
	// left: a tenure that did not hand over ended; offset is its last
	// lease record.
	left struct{ offset int64 }
	// registered: this member's registration record is at offset.
	registered struct{ offset int64 }
	// probed: the freshness probe is at offset, or failed with err.
	probed struct {
		offset int64
		err    error
	}
	// challenged: the challenge committed (h holds the tenure it won: its
	// term and until when it may act on its lease), or failed with err.
	challenged struct {
		h                *holder
		term             uint64
		validUntilMillis int64
		err              error
	}
)

func (started) isInput()     {}
func (fetched) isInput()     {}
func (timerFired) isInput()  {}
func (tenureEnded) isInput() {}
func (left) isInput()        {}
func (registered) isInput()  {}
func (probed) isInput()      {}
func (challenged) isInput()  {}

// An action is what the coordination loop performs for one effect of the
// coordinator.
type action struct {
	succession.Effect
	// take is, for DoTake, the holder of the challenge that won.
	take *holder
	// after is, for DoTimer, how long from now the evaluation is due.
	after time.Duration
}

// decide is the coordination loop's decision: it turns what the loop
// received at nowMillis into a succession event, with this member's tenure
// and hand-over then, steps the coordinator, and returns what to do, in
// order. It does no I/O and reads no clock; an unknown input is a bug and
// panics.
func decide(c *succession.Coordinator, in input, nowMillis int64, tenure succession.Tenure, handoverUntilMillis int64) []action {
	ev := succession.Event{Tenure: tenure, HandoverUntilMillis: handoverUntilMillis}
	var won *holder
	switch in := in.(type) {
	case started:
		ev.Kind = succession.EventStart
	case fetched:
		ev.Kind, ev.Records = succession.EventRecords, in.recs
	case timerFired, tenureEnded:
		ev.Kind = succession.EventTimer
	case left:
		ev.Kind, ev.Offset = succession.EventLeft, in.offset
	case registered:
		ev.Kind, ev.Offset = succession.EventRegistered, in.offset
	case probed:
		ev.Kind, ev.Offset, ev.Err = succession.EventProbed, in.offset, in.err
	case challenged:
		ev.Kind, ev.Err = succession.EventChallenged, in.err
		if in.err == nil {
			won = in.h
			ev.Term, ev.ValidUntilMillis = in.term, in.validUntilMillis
		}
	default:
		panic(fmt.Sprintf("kafkaha: unknown input %T", in))
	}
	effs := c.Step(ev, nowMillis)
	acts := make([]action, len(effs))
	for i, e := range effs {
		acts[i] = action{Effect: e}
		switch e.Kind {
		case succession.DoTake:
			acts[i].take = won
		case succession.DoTimer:
			acts[i].after = time.Duration(max(e.AtMillis-nowMillis, 1)) * time.Millisecond
		}
	}
	return acts
}

// coordLoop owns the election: it reads the coordination topic and the
// results of its own writes, decides what to do (decide, which steps
// succession.Coordinator) and performs it: register, probe, challenge,
// take or leave the role, renew, announce a yield, and arm the timer of the
// next evaluation. It runs until ctx ends.
func (b *Backend) coordLoop(ctx context.Context) {
	if !b.ensureTopicsUntilDone(ctx) {
		return
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
	b.stopper.Go(func() { b.fetchCoord(ctx, cl, recs) })

	l := &coordRun{
		b:     b,
		coord: succession.NewCoordinator(b.cfg.Role, succession.MemberID(b.cfg.Member), b.cfg.Lease),
		// The next evaluation is due at the instant the decision can
		// change (or sooner); delaymgr fires it as a wake-up of this loop.
		delays: delaymgr.New(delaymgr.RealClock()),
		wake:   make(chan struct{}, 1),
	}
	defer l.delays.Stop()
	l.handle(ctx, started{})
	for {
		var in input
		select {
		case <-ctx.Done():
			return
		case batch := <-recs:
			in = fetched{batch}
		case <-l.wake:
			in = timerFired{}
		case <-b.kick:
			in = tenureEnded{}
		case off := <-b.yields:
			in = left{off}
		case in = <-b.posts:
		}
		l.handle(ctx, in)
	}
}

// coordRun is the coordination loop's own state; only its goroutine uses
// it.
type coordRun struct {
	b      *Backend
	coord  *succession.Coordinator
	delays *delaymgr.Manager
	wake   chan struct{}
	due    *delaymgr.Handle
}

// handle decides what in calls for, publishes the folded state and
// performs the actions in order.
func (l *coordRun) handle(ctx context.Context, in input) {
	b := l.b
	acts := decide(l.coord, in, b.nowMillis(), b.tenure(), b.handoverUntil.Load())
	b.observe(l.coord.State(), l.coord.TermOffset())
	b.noteFold(l.coord.Folded(), l.coord.ForeignUntil())
	for _, a := range acts {
		l.perform(ctx, a)
	}
}

// perform does what one action says. The writes run off the loop and post
// their results back to it.
func (l *coordRun) perform(ctx context.Context, a action) {
	b := l.b
	switch a.Kind {
	case succession.DoRegister:
		b.stopper.Go(func() {
			if off, ok := b.registerUntilDone(ctx); ok {
				b.post(ctx, registered{off})
			}
		})
	case succession.DoProbe:
		b.stopper.Go(func() { b.post(ctx, b.probe(ctx)) })
	case succession.DoChallenge:
		b.startChallenge(ctx, a.Reason)
	case succession.DoTake:
		if h := a.take; h != nil && !b.take(h) {
			h.shutdown()
		}
	case succession.DoStepDown:
		if h := b.currentHolder(); h != nil {
			b.lose(h, a.Reason)
		}
	case succession.DoRenewAt:
		if h := b.currentHolder(); h != nil {
			h.setRenewAt(time.UnixMilli(a.AtMillis))
		}
	case succession.DoYield:
		b.stopper.Go(func() {
			yctx, ycancel := context.WithTimeout(ctx, 5*time.Second)
			defer ycancel()
			b.writeYield(yctx, a.Offset)
		})
	case succession.DoTimer:
		if l.due != nil {
			l.due.Cancel()
		}
		l.due = l.delays.After(a.after, func() {
			select {
			case l.wake <- struct{}{}:
			default:
			}
		})
	default:
		panic(fmt.Sprintf("kafkaha: unknown effect %v", a.Effect))
	}
}

// tenure is this member's hold on the role as the coordinator sees it.
func (b *Backend) tenure() succession.Tenure {
	h := b.currentHolder()
	if h == nil {
		return succession.Tenure{}
	}
	return succession.Tenure{Held: true, Term: h.term, ValidUntilMillis: h.validUntil().UnixMilli(), Leaving: h.leaving.Load()}
}

// fetchCoord reads the coordination topic into recs until ctx ends.
func (b *Backend) fetchCoord(ctx context.Context, cl *kgo.Client, recs chan<- []succession.CoordRecord) {
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
}

// ensureTopicsUntilDone creates the coordination and state topics when
// missing, retrying until they exist; false once ctx ends.
func (b *Backend) ensureTopicsUntilDone(ctx context.Context) bool {
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		err := b.ensureTopics(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		wait := retry.Next()
		b.log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("cannot create the coordination and state topics; retrying")
		if !backoff.Sleep(ctx, wait) {
			return false
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

// probe writes the freshness probe and says where it landed.
func (b *Backend) probe(ctx context.Context) probed {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	off, err := b.writeProbe(pctx)
	if err != nil && ctx.Err() == nil {
		b.log.Warn().Err(kafkaerr.Explain(err)).Msg("cannot write the freshness probe; retrying")
	}
	return probed{offset: off, err: err}
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

// post hands in to the loop, unless ctx ends first.
func (b *Backend) post(ctx context.Context, in input) {
	select {
	case b.posts <- in:
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
		if err != nil {
			if ctx.Err() == nil {
				b.log.Info().Err(kafkaerr.Explain(err)).Msg("challenge lost or failed")
			}
			b.post(ctx, challenged{err: err})
			return
		}
		b.post(ctx, challenged{h: h, term: h.term, validUntilMillis: h.validUntil().UnixMilli()})
		if ctx.Err() != nil {
			h.shutdown()
		}
	})
}
