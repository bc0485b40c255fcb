package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/kafkaerr"
	"github.com/xce/xce/state"
)

// Source is the outbox as the publisher reads it: the FSM.
type Source interface {
	EventsAfter(after uint64, limit int) []state.Event
	Outbox(after uint64) (published uint64, held, pending int)
	// AppliedCh is closed at the next apply.
	AppliedCh() <-chan struct{}
}

// Hooks are what the publisher asks of its node.
type Hooks struct {
	// Apply replicates a command (the published watermark).
	Apply func(ctx context.Context, cmd []byte) error
	// Fenced reports that a newer producer owns the transactional id: the
	// node must leave PRIMARY for the rest of the term.
	Fenced func(term uint64, reason string)
}

// Publisher is the leader-only service that drains the outbox into Kafka.
// Ordering rule: an event is in the outbox only once it is committed in the
// Raft log (persist, then acknowledge); it is published after that; the
// watermark goes back through the log only after Kafka committed it.
type Publisher struct {
	cfg   Config
	src   Source
	hooks Hooks
	log   zerolog.Logger
	m     *metrics
	// conn are the options of every client's connections: TLS, SASL.
	conn []kgo.Opt

	epoch     atomic.Int64 // -1: none this term
	published atomic.Uint64
	state     atomic.Pointer[string]
}

// Publisher states, as Status reports them.
const (
	StateStandby    = "standby"
	StateAcquiring  = "acquiring epoch"
	StateResuming   = "reading the topic's tail"
	StatePublishing = "publishing"
	StateRetrying   = "retrying"
	StateFenced     = "fenced"
	StateDisabled   = "disabled"
)

func (p *Publisher) setState(s string) { p.state.Store(&s) }

// Status reports the epoch held this term (0 when none: the state tells an
// epoch 0 from none), the outbox lag and the publisher's state.
func (p *Publisher) Status() (epoch, lag uint64, state string) {
	if e := p.epoch.Load(); e >= 0 {
		epoch = uint64(e)
	}
	st := *p.state.Load()
	if st == StateStandby {
		_, held, _ := p.src.Outbox(0)
		return 0, uint64(held), st
	}
	return epoch, uint64(p.Lag()), st
}

// Errors of the publisher.
var (
	// ErrCommitUnknown means a commit failed without saying whether it
	// took effect. The publisher aborts and reads the topic's tail again.
	// kgo's abort after such a commit reloads the producer id with the
	// epoch it holds (KIP-360): Kafka answers PRODUCER_FENCED when a newer
	// primary took the epoch meanwhile, so the reload never takes it back.
	// (kfake accepts such a stale reload; the fence tests note it.)
	ErrCommitUnknown = errors.New("transaction commit outcome unknown")
)

// New returns a publisher; metrics go to reg.
func New(cfg Config, src Source, hooks Hooks, reg prometheus.Registerer) (*Publisher, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("fence: no brokers")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	log := cfg.Logger.With().Str("component", "publisher").Logger()
	conn, err := cfg.Security.Opts(log)
	if err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	p := &Publisher{cfg: cfg, src: src, hooks: hooks, log: log, conn: conn}
	p.epoch.Store(-1)
	p.setState(StateStandby)
	p.m = newMetrics(reg, p)
	return p, nil
}

// Name implements controller.LeaderService.
func (p *Publisher) Name() string { return "publisher" }

// Epoch is the producer epoch acquired in the current term, or -1.
func (p *Publisher) Epoch() int64 { return p.epoch.Load() }

// Lag is the number of committed events not yet published by this node.
func (p *Publisher) Lag() int {
	_, _, pending := p.src.Outbox(p.published.Load())
	return pending
}

// Run publishes for term until ctx ends (the node leaves PRIMARY), then
// returns ctx's error. Kafka being down never keeps the node from serving:
// Run waits for it inside the term. When publishing stops early (fenced, or
// no Kafka client), Run waits for the term to end, so that Status says why
// until then; a fencing is reported through Hooks.Fenced, which hands
// leadership on. The node runs one term at a time.
func (p *Publisher) Run(ctx context.Context, term uint64) error {
	p.run(ctx, term)
	<-ctx.Done()
	p.epoch.Store(-1)
	p.setState(StateStandby)
	return ctx.Err()
}

func (p *Publisher) newClient() (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(p.cfg.Brokers...),
		kgo.TransactionalID(p.cfg.TransactionalID),
		kgo.TransactionTimeout(p.cfg.TxnTimeout),
		kgo.DefaultProduceTopic(p.cfg.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.DialTimeout(2 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	}, p.conn...)...)
}

// retryBackoff spaces the publisher's retries of one step.
func retryBackoff() backoff.Backoff {
	return backoff.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
}

// termRun is the publisher during one term: the term's client and the
// producer epoch it acquired.
type termRun struct {
	p     *Publisher
	log   zerolog.Logger
	term  uint64
	cl    *kgo.Client
	epoch int16
}

// run publishes for term until ctx ends or publishing stops for the term.
func (p *Publisher) run(ctx context.Context, term uint64) {
	log := p.log.With().Uint64("term", term).Logger()
	cl, err := p.newClient()
	if err != nil {
		log.Error().Err(err).Msg("kafka client: publishing stops for this term")
		return
	}
	defer cl.Close()
	t := &termRun{p: p, log: log, term: term, cl: cl}

	// 1. The fence goes up first: InitProducerId bumps the epoch, aborts
	// any transaction the previous primary left open and rejects its late
	// writes. Once per term: the client keeps it for the whole term.
	p.setState(StateAcquiring)
	if !t.acquireEpoch(ctx) {
		return
	}
	p.epoch.Store(int64(t.epoch))

	// 2. Where to resume: the last committed event on the topic.
	p.setState(StateResuming)
	last, ok := p.resumePoint(ctx, log)
	if !ok {
		return
	}
	p.published.Store(last)

	// 3. Publish everything after it, in index order, in transactions.
	t.publishAfter(ctx, last)
}

// acquireEpoch calls InitProducerId until Kafka answers, and reports
// whether the epoch is held: false once ctx ends or the publisher is
// fenced.
func (t *termRun) acquireEpoch(ctx context.Context) bool {
	bo := retryBackoff()
	for {
		start := time.Now()
		_, e, err := t.cl.ProducerID(ctx)
		if err == nil {
			t.epoch = e
			t.log.Info().Int16("epoch", e).Dur("took", time.Since(start)).Str("transactional_id", t.p.cfg.TransactionalID).
				Msg("producer epoch acquired: older primaries are fenced")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if kafkaerr.Fenced(err) {
			t.fenced(err)
			return false
		}
		wait := bo.Next()
		t.log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("cannot acquire the producer epoch; the outbox keeps events until kafka answers")
		if !backoff.Sleep(ctx, wait) {
			return false
		}
	}
}

// publishAfter publishes the events after last, in index order, in
// transactions, and trims the outbox behind them, until ctx ends or the
// publisher is fenced.
func (t *termRun) publishAfter(ctx context.Context, last uint64) {
	p := t.p
	trim := time.NewTicker(p.cfg.TrimEvery)
	defer trim.Stop()
	trimmed, _, _ := p.src.Outbox(0)
	p.setState(StatePublishing)
	bo := retryBackoff()
	for {
		applied := p.src.AppliedCh()
		evs := p.src.EventsAfter(last, p.cfg.BatchMax)
		if len(evs) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-applied:
			case <-trim.C:
				trimmed = p.trim(ctx, t.log, last, trimmed)
			}
			continue
		}
		start := time.Now()
		if err := p.publish(ctx, t.cl, t.epoch, evs); err != nil {
			var ok bool
			if last, ok = t.retry(ctx, evs, err, &bo); !ok {
				return
			}
			continue
		}
		last = evs[len(evs)-1].Index
		p.published.Store(last)
		p.setState(StatePublishing)
		p.m.events.Add(float64(len(evs)))
		p.m.txns.Inc()
		p.m.txnSeconds.Observe(time.Since(start).Seconds())
		bo.Reset()
		select {
		case <-trim.C:
			trimmed = p.trim(ctx, t.log, last, trimmed)
		default:
		}
	}
}

// retry follows a transaction of evs that failed with err: unless the
// publisher is fenced, it aborts the transaction, waits bo's next delay and
// reads the topic's tail again, since the commit's outcome may be unknown.
// It returns where to resume, or false once publishing stops.
func (t *termRun) retry(ctx context.Context, evs []state.Event, err error, bo *backoff.Backoff) (uint64, bool) {
	p := t.p
	if ctx.Err() != nil {
		return 0, false
	}
	if kafkaerr.Fenced(err) {
		t.fenced(err)
		return 0, false
	}
	p.m.errors.Inc()
	p.setState(StateRetrying)
	wait := bo.Next()
	t.log.Warn().Err(kafkaerr.Explain(err)).Int("events", len(evs)).Uint64("first_index", evs[0].Index).Dur("retry_in", wait).
		Msg("publishing failed; aborting the transaction and retrying")
	if err := p.abandon(ctx, t.log, t.cl); err != nil {
		if ctx.Err() == nil {
			t.fenced(err)
		}
		return 0, false
	}
	if !backoff.Sleep(ctx, wait) {
		return 0, false
	}
	last, ok := p.resumePoint(ctx, t.log)
	if ok {
		p.published.Store(last)
	}
	return last, ok
}

// abandon ends the current transaction without committing it, and returns
// once the client holds none of its records and Kafka will not commit them:
// then the next transaction starts clean. It returns ctx's error when ctx
// ends first, or the fencing error when a newer producer owns the
// transactional id.
func (p *Publisher) abandon(ctx context.Context, log zerolog.Logger, cl *kgo.Client) error {
	bo := retryBackoff()
	for {
		// Buffered records fail first. A record whose produce request got
		// no answer cannot: the client must learn whether the broker took
		// it, so this waits for Kafka to answer. Ending the transaction
		// before that would let the client send those records again in the
		// next one.
		actx, cancel := context.WithTimeout(ctx, p.cfg.TxnTimeout)
		err := cl.AbortBufferedRecords(actx)
		if err == nil {
			// When the broker cannot be reached, or an earlier end of
			// this transaction went unanswered, the client instead marks
			// its producer id for a reload at the epoch it holds: the
			// next transaction then starts by bumping the epoch, which
			// aborts whatever the broker still has open. That reload
			// cannot take the epoch back from a newer producer.
			err = cl.EndTransaction(actx, kgo.TryAbort)
		}
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if kafkaerr.Fenced(err) {
			return err
		}
		wait := bo.Next()
		log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("cannot abort the transaction yet; nothing more is published until it is")
		if !backoff.Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// resumePoint reads the last committed event's index, retrying until Kafka
// answers or ctx ends.
func (p *Publisher) resumePoint(ctx context.Context, log zerolog.Logger) (uint64, bool) {
	bo := retryBackoff()
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		last, err := LastPublished(rctx, p.cfg.Brokers, p.cfg.Topic, p.conn...)
		cancel()
		if err == nil {
			if published, _, _ := p.src.Outbox(0); last < published {
				log.Error().Uint64("topic_last_index", last).Uint64("trimmed_up_to", published).
					Msg("the topic ends before events this cluster already trimmed: downstream lost them (was the broker's log reset?); resuming after the trimmed ones")
				last = published
			}
			log.Info().Uint64("last_published_index", last).Msg("resuming publication after the last committed event")
			return last, true
		}
		if ctx.Err() != nil {
			return 0, false
		}
		wait := bo.Next()
		log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("cannot read the events topic's tail")
		if !backoff.Sleep(ctx, wait) {
			return 0, false
		}
	}
}

// slowTxn is how long a transaction may take before Status stops saying
// "publishing": with Kafka unreachable, the client retries the records until
// it answers and Flush blocks meanwhile, with no error to report.
const slowTxn = 2 * time.Second

// publish commits evs in one transaction. The transaction gets half the
// transaction timeout, begin to commit: past that the publisher gives up on
// it (the caller aborts it and reads the topic's tail again) rather than let
// the client retry its records until the broker answers. A broker that comes
// back after the timeout has aborted the transaction: records written before
// it went away are gone, and the client, still waiting, would add the rest
// to a new transaction and report the commit of only those as a success.
func (p *Publisher) publish(parent context.Context, cl *kgo.Client, epoch int16, evs []state.Event) (rerr error) {
	budget := p.cfg.TxnTimeout / 2
	ctx, cancel := context.WithTimeout(parent, budget)
	defer cancel()
	defer func() {
		if rerr != nil && parent.Err() == nil && ctx.Err() != nil && !kafkaerr.Fenced(rerr) {
			rerr = fmt.Errorf("transaction not committed within %v, half the transaction timeout: %w", budget, rerr)
		}
	}()
	var slowMu sync.Mutex
	finished := false
	slow := time.AfterFunc(slowTxn, func() {
		slowMu.Lock()
		defer slowMu.Unlock()
		if !finished {
			p.setState(StateRetrying)
			p.log.Warn().Int("events", len(evs)).Uint64("first_index", evs[0].Index).Dur("after", slowTxn).
				Msg("kafka has not completed the transaction yet; the client keeps retrying and the outbox keeps events")
		}
	})
	defer func() {
		// Before the caller sets the next state: a late timer must not
		// overwrite it.
		slow.Stop()
		slowMu.Lock()
		finished = true
		slowMu.Unlock()
	}()
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	// The epoch the records carry is the one writing them: with Kafka's
	// transaction protocol v2 it grows at every commit (kgo caches it; no
	// request is made here).
	if _, e, err := cl.ProducerID(ctx); err == nil {
		epoch = e
		p.epoch.Store(int64(e))
	}
	var mu sync.Mutex
	var first error
	for _, ev := range evs {
		cl.Produce(ctx, Encode(ev, epoch), func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	mu.Lock()
	err := first
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		if kafkaerr.Fenced(err) {
			return fmt.Errorf("commit: %w", err)
		}
		return fmt.Errorf("%w: %w", ErrCommitUnknown, err)
	}
	return nil
}

// trim sends the published watermark through the log, so every replica
// drops what is safely downstream.
func (p *Publisher) trim(ctx context.Context, log zerolog.Logger, last, trimmed uint64) uint64 {
	if last <= trimmed {
		return trimmed
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.hooks.Apply(actx, (&state.Command{Type: state.CmdTrimOutbox, UpTo: last}).Encode()); err != nil {
		if ctx.Err() == nil {
			log.Debug().Err(err).Msg("published watermark not replicated; will retry")
		}
		return trimmed
	}
	return last
}

// fenced stops publishing for the term: a newer primary owns the producer
// epoch, and Hooks.Fenced makes the node leave PRIMARY.
func (t *termRun) fenced(err error) {
	p := t.p
	p.m.fenced.Inc()
	p.setState(StateFenced)
	t.log.Error().Err(err).Int16("our_epoch", t.epoch).Str("transactional_id", p.cfg.TransactionalID).
		Msg("FENCED: a newer primary owns the producer epoch; publishing stops for this term and the node leaves PRIMARY")
	if p.hooks.Fenced != nil {
		p.hooks.Fenced(t.term, fmt.Sprintf("producer epoch %d fenced: %v", t.epoch, err))
	}
}

type metrics struct {
	events, txns, errors, fenced prometheus.Counter
	txnSeconds                   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, p *Publisher) *metrics {
	m := &metrics{
		events:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_outbox_published_events_total", Help: "Events committed to Kafka by this node."}),
		txns:       prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_outbox_transactions_total", Help: "Kafka transactions committed by this node."}),
		errors:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_outbox_publish_errors_total", Help: "Failed publication attempts (retried)."}),
		fenced:     prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_fenced_total", Help: "Times this node found a newer producer epoch and left PRIMARY."}),
		txnSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "xce_outbox_transaction_seconds", Help: "Time to publish and commit one transaction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.txns, m.errors, m.fenced, m.txnSeconds,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xce_outbox_lag", Help: "Committed events not yet published."},
				func() float64 { return float64(p.Lag()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xce_kafka_epoch", Help: "Producer epoch held this term (-1: none)."},
				func() float64 { return float64(p.Epoch()) }))
	}
	return m
}
