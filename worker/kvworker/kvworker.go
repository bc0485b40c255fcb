// Package kvworker is a stateful worker on Kafka: for each task input-<p>
// it folds partition p of the input topic into a per-key count kept in a
// local bbolt store, with every store update in partition p of a changelog
// topic, and writes one output record per input record — exactly once, in
// one Kafka transaction per batch with the changelog records and the input
// offset. See docs/design.md, "Tasks, workers, assignments".
//
// Roles: a standby or warm-up restores its store from the changelog and
// tails it; an active first restores to the changelog's end, then
// processes its input from the committed input offset. Its transactional
// id is per task (xce-task-<task>): the InitProducerId of a new active
// fences the previous one at the broker, so a zombie's transactions
// cannot commit.
package kvworker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/kafkaerr"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/worker"
)

// Default topics and limits.
const (
	DefaultInputTopic     = "xce.input"
	DefaultChangelogTopic = "xce.changelog"
	DefaultOutputTopic    = "xce.output"
	DefaultBatchMax       = 500
	DefaultTxnTimeout     = 10 * time.Second

	// TaskPrefix names the tasks: input-<p> is partition p.
	TaskPrefix = "input-"
	// HeaderInput and HeaderEpoch are the output records' headers: the
	// input record's "<partition>:<offset>" and the task epoch.
	HeaderInput = "xce-input"
	HeaderEpoch = "xce-epoch"
)

// Config of a Handler.
type Config struct {
	// Brokers are the bootstrap brokers.
	Brokers []string
	// StoreDir holds one bbolt file per task (<task>.db).
	StoreDir string
	// Topics ("" : the defaults xce.input, xce.changelog, xce.output).
	InputTopic, ChangelogTopic, OutputTopic string
	// Security is TLS and SASL to the brokers.
	Security kafkaopts.Security
	// BatchMax bounds the input records of one transaction (0: 500).
	BatchMax int
	// TxnTimeout is the transactions' timeout at the broker (0: 10s).
	TxnTimeout time.Duration
	// Logger receives the handler's log lines.
	Logger zerolog.Logger
	// Fence says whether a copy may still act (nil: worker.Fence, the
	// library's check of the copy's hold and, for an active, its lease).
	// A test that runs the handler without the library sets its own.
	Fence func(context.Context) error
}

// Handler runs the copies of input-<p> tasks; it implements the worker
// library's Handler.
type Handler struct {
	cfg  Config
	conn []kgo.Opt
	log  zerolog.Logger
	lags lagBook
}

// New checks cfg and returns a Handler.
func New(cfg Config) (*Handler, error) {
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kvworker: no brokers")
	}
	if cfg.StoreDir == "" {
		return nil, errors.New("kvworker: no store directory")
	}
	if cfg.InputTopic == "" {
		cfg.InputTopic = DefaultInputTopic
	}
	if cfg.ChangelogTopic == "" {
		cfg.ChangelogTopic = DefaultChangelogTopic
	}
	if cfg.OutputTopic == "" {
		cfg.OutputTopic = DefaultOutputTopic
	}
	if cfg.BatchMax <= 0 {
		cfg.BatchMax = DefaultBatchMax
	}
	if cfg.Fence == nil {
		cfg.Fence = worker.Fence
	}
	if cfg.TxnTimeout <= 0 {
		cfg.TxnTimeout = DefaultTxnTimeout
	}
	conn, err := cfg.Security.Opts(cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("kvworker: %w", err)
	}
	return &Handler{cfg: cfg, conn: conn, log: cfg.Logger.With().Str("component", "kvworker").Logger()}, nil
}

// TransactionalID is the task's transactional id: one producer per task,
// whichever worker runs it.
func TransactionalID(task string) string { return "xce-task-" + task }

// Group is the consumer group whose committed offset is the task's input
// position.
func Group(task string) string { return "xce-task-" + task }

// Partition returns p for task input-<p>.
func Partition(task string) (int32, error) {
	s, ok := strings.CutPrefix(task, TaskPrefix)
	if !ok {
		return 0, fmt.Errorf("kvworker: task %q is not %s<partition>", task, TaskPrefix)
	}
	p, err := strconv.ParseInt(s, 10, 32)
	if err != nil || p < 0 || strconv.FormatInt(p, 10) != s {
		return 0, fmt.Errorf("kvworker: task %q is not %s<partition>", task, TaskPrefix)
	}
	return int32(p), nil
}

// Run holds copy c until ctx ends. A standby or warm-up restores and tails
// the changelog; an active restores, then processes its input. Errors
// that may pass (Kafka unreachable) are retried with backoff; Run returns
// an error only for a bad task name or store, or when the active is
// fenced. It returns once nothing of the copy runs: an active commits
// nothing after.
func (h *Handler) Run(ctx context.Context, c worker.Copy, report func(lag int64)) error {
	p, err := Partition(c.Task)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, h.cfg.StoreDir, c.Task)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		// The store stays on disk: its lag is still this worker's.
		if next, err := st.next(); err == nil {
			h.lags.release(c.Task, next)
		}
		st.close()
	}()
	report = h.reporter(c.Task, report)
	log := h.log.With().Str("task", c.Task).Str("role", c.Role.String()).Uint64("epoch", c.Epoch).Logger()
	log.Info().Msg("copy starting")
	defer log.Info().Msg("copy stopped")
	bo := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		var err error
		if c.Role == worker.Active {
			err = h.active(ctx, log, c, p, st, report)
		} else {
			err = h.follow(ctx, log, st, p, report)
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case kafkaerr.Fenced(err):
			log.Warn().Err(err).Msg("fenced: the copy stops")
			return fmt.Errorf("%s: %w", c.Task, err)
		}
		wait := bo.Next()
		log.Warn().Err(kafkaerr.Explain(err)).Dur("retry_in", wait).Msg("copy failed; starting it again")
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

// reporter wraps a copy's report so that Lags knows its lag too.
func (h *Handler) reporter(task string, report func(int64)) func(int64) {
	return func(lag int64) {
		h.lags.setHeld(task, lag)
		report(lag)
	}
}

// lagEvery spaces the end-offset lookups behind the lag reports.
const lagEvery = 250 * time.Millisecond

func (h *Handler) clientOpts(extra ...kgo.Opt) []kgo.Opt {
	return append(append([]kgo.Opt{
		kgo.SeedBrokers(h.cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// The markers count as changelog positions: the store's position
		// reaches the end offset only past the last one.
		kgo.KeepControlRecords(),
		kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.DialTimeout(2 * time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
	}, extra...), h.conn...)
}

// changelogEnd is the changelog partition's last stable offset.
func (h *Handler) changelogEnd(ctx context.Context, adm *kadm.Client, p int32) (int64, error) {
	offs, err := adm.ListCommittedOffsets(ctx, h.cfg.ChangelogTopic)
	if err != nil {
		return 0, err
	}
	o, ok := offs.Lookup(h.cfg.ChangelogTopic, p)
	if !ok {
		return 0, fmt.Errorf("changelog %s has no partition %d", h.cfg.ChangelogTopic, p)
	}
	if o.Err != nil {
		return 0, o.Err
	}
	return o.Offset, nil
}

// position returns the store's changelog position and the changelog's
// end (its last stable offset). A store can be ahead of that end only in
// two ways. A transaction the store already reflects is still settling
// (its commit markers are not written yet, so the stable offset lags):
// the end catches up, and position waits for it. Or the store was read
// from a changelog that is gone (a broker whose log was reset): it is
// ahead of the log's high watermark too, and it is emptied and restored
// from the start. Only the second may empty a store: a stable offset read
// while a transaction settles must never cost a store its state.
func (h *Handler) position(ctx context.Context, adm *kadm.Client, st *store, p int32) (next, end int64, err error) {
	if next, err = st.next(); err != nil {
		return 0, 0, err
	}
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	for waited := false; ; waited = true {
		if end, err = h.changelogEnd(ctx, adm, p); err != nil || next <= end {
			return next, end, err
		}
		hwm, err := h.changelogHWM(ctx, adm, p)
		if err != nil {
			return 0, 0, err
		}
		if next > hwm {
			h.log.Warn().Int32("partition", p).Int64("store_offset", next).Int64("changelog_end", hwm).
				Msg("the store is ahead of its changelog (was the broker's log reset?): restoring it from the start")
			if err := st.reset(); err != nil {
				return 0, 0, err
			}
			return 0, end, nil
		}
		if !waited {
			h.log.Info().Int32("partition", p).Int64("store_offset", next).Int64("stable_offset", end).
				Msg("waiting for a changelog transaction to settle before reading on")
		}
		if !bo.Wait(ctx) {
			return 0, 0, ctx.Err()
		}
	}
}

// changelogHWM is the changelog partition's high watermark: the end of its
// log, open transactions included.
func (h *Handler) changelogHWM(ctx context.Context, adm *kadm.Client, p int32) (int64, error) {
	offs, err := adm.ListEndOffsets(ctx, h.cfg.ChangelogTopic)
	if err != nil {
		return 0, err
	}
	o, ok := offs.Lookup(h.cfg.ChangelogTopic, p)
	if !ok {
		return 0, fmt.Errorf("changelog %s has no partition %d", h.cfg.ChangelogTopic, p)
	}
	return o.Offset, o.Err
}

// applyChangelog applies changelog records to the store and returns its
// new position. With values false only the position moves (an active reads
// back what it wrote itself; its store has the values already).
func applyChangelog(st *store, recs []*kgo.Record, values bool) (int64, error) {
	var ups []kv
	next := int64(-1)
	for _, r := range recs {
		if values && !r.Attrs.IsControl() {
			ups = append(ups, kv{key: r.Key, value: r.Value})
		}
		next = r.Offset + 1
	}
	if next < 0 {
		return -1, nil
	}
	return next, st.apply(ups, next)
}

// follow restores the store from the changelog and tails it, reporting
// the lag, until ctx ends or Kafka fails.
func (h *Handler) follow(ctx context.Context, log zerolog.Logger, st *store, p int32, report func(int64)) error {
	cl, err := kgo.NewClient(h.clientOpts()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	next, end, err := h.position(ctx, adm, st, p)
	if ctx.Err() != nil {
		return nil // stopped while it waited for a transaction to settle
	}
	if err != nil {
		return err
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{h.cfg.ChangelogTopic: {p: kgo.NewOffset().At(next)}})
	restore := startRestore(next, end)
	var lastLag time.Time
	for {
		if time.Since(lastLag) >= lagEvery {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			end, err := h.changelogEnd(lctx, adm, p)
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			report(max(end-next, 0))
			lastLag = time.Now()
		}
		pctx, cancel := context.WithTimeout(ctx, lagEvery)
		next, err = readChangelog(pctx, cl, st, next)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		restore.progress(log, p, next)
	}
}

// poller is what readChangelog needs of a *kgo.Client.
type poller interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
}

// readChangelog polls the changelog once, until ctx ends, applies what it
// read to the store, and returns the store's position after it. Records a
// poll returns are applied even when ctx ended meanwhile: the consumer's
// own position has moved past them, so a record dropped here would be
// missing from the store for good while the store's position moved on.
func readChangelog(ctx context.Context, cl poller, st *store, next int64) (int64, error) {
	fs := cl.PollRecords(ctx, 10_000)
	if err := fetchErr(fs); err != nil {
		return next, err
	}
	n, err := applyChangelog(st, fs.Records(), true)
	if n >= 0 {
		next = n
	}
	return next, err
}

// restoring times a store's restore up to the changelog's end when it
// began, and logs its rate once it gets there: how long a new copy takes
// to become useful (docs/design.md, "Tasks, workers, assignments").
type restoring struct {
	from, to int64
	start    time.Time
	done     bool
}

func startRestore(from, to int64) *restoring {
	return &restoring{from: from, to: to, start: time.Now(), done: from >= to}
}

// progress notes the store's position; the first time it reaches the end
// the restore began with, it logs the records read and their rate.
func (r *restoring) progress(log zerolog.Logger, p int32, next int64) {
	if r.done || next < r.to {
		return
	}
	r.done = true
	n, d := next-r.from, time.Since(r.start)
	rate := float64(n) / max(d.Seconds(), 1e-6)
	log.Info().Int32("partition", p).Int64("records", n).Dur("took", d).Float64("records_per_second", rate).
		Msgf("restored %d records in %v (%.0f records/s)", n, d.Round(time.Millisecond), rate)
}

// fetchErr is the first real error of a poll (a poll cut short by its
// context is not one).
func fetchErr(fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		if errors.Is(fe.Err, context.Canceled) || errors.Is(fe.Err, context.DeadlineExceeded) {
			continue
		}
		return fmt.Errorf("%s[%d]: %w", fe.Topic, fe.Partition, fe.Err)
	}
	return nil
}

// active fences older producers of the task, restores the store to the
// changelog's end, and processes the input from the committed offset in
// transactions, until ctx ends, the copy is fenced, or Kafka fails (the
// caller then starts over: the committed offset and the changelog say
// where).
func (h *Handler) active(ctx context.Context, log zerolog.Logger, c worker.Copy, p int32, st *store, report func(int64)) error {
	cl, err := h.producer(c.Task)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// 1. Fence: InitProducerId bumps the epoch of the task's transactional
	// id, aborts what the previous active left open and refuses its
	// later transactions.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("init producer id: %w", err)
	}
	log.Info().Str("transactional_id", TransactionalID(c.Task)).Msg("producer epoch acquired: older actives of the task are fenced")

	// 2. Where the store and the input stand (stable now: no transaction
	// of an older active is open any more).
	next, end, err := h.position(ctx, adm, st, p)
	if ctx.Err() != nil {
		return nil // stopped while it waited for a transaction to settle
	}
	if err != nil {
		return err
	}
	from, err := h.committedInput(ctx, adm, c.Task, p)
	if err != nil {
		return err
	}
	inputID, err := h.inputTopic(ctx, adm, p)
	if err != nil {
		return err
	}

	// 3. Restore to the changelog's end, then consume only the input.
	next, err = h.catchUp(ctx, log, cl, st, p, next, end, report)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	report(0)
	log.Info().Int64("changelog_offset", next).Msg("store restored")
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{h.cfg.InputTopic: {p: from}})
	log.Info().Str("from", from.String()).Msg("processing the input")

	// 4. Process it.
	t := &txn{h: h, cl: cl, st: st, task: c.Task, p: p, epoch: c.Epoch, inputID: inputID}
	return t.process(ctx, log)
}

// producer is the active's client: the task's transactional producer,
// which writes the changelog to the task's partition and the output by key.
func (h *Handler) producer(task string) (*kgo.Client, error) {
	return kgo.NewClient(h.clientOpts(
		kgo.TransactionalID(TransactionalID(task)),
		kgo.TransactionTimeout(h.cfg.TxnTimeout),
		kgo.RecordPartitioner(kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
			if topic == h.cfg.OutputTopic {
				hash := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
				return func(r *kgo.Record, n int) int { return hash.Partition(r, n) }
			}
			return func(r *kgo.Record, _ int) int { return int(r.Partition) }
		})),
		kgo.ProducerLinger(0),
	)...)
}

// catchUp restores the active's store from next to the changelog's end
// (reporting the lag), and returns the store's position then; it returns
// early, with no error, when ctx ends. It then stops consuming the
// changelog: the consumer fetches as soon as a partition is added, and a
// partition added while a fetch waits at the changelog's end would wait
// out that fetch (up to its max wait) on every handover. Removing the
// changelog ends that fetch. The commits move the store's position on
// themselves.
func (h *Handler) catchUp(ctx context.Context, log zerolog.Logger, cl *kgo.Client, st *store, p int32, next, end int64, report func(int64)) (int64, error) {
	if next >= end {
		return next, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{h.cfg.ChangelogTopic: {p: kgo.NewOffset().At(next)}})
	restore := startRestore(next, end)
	for next < end {
		report(end - next)
		var err error
		if next, err = readChangelog(ctx, cl, st, next); ctx.Err() != nil || err != nil {
			return next, err
		}
		restore.progress(log, p, next)
	}
	cl.RemoveConsumePartitions(map[string][]int32{h.cfg.ChangelogTopic: {p}})
	return next, nil
}

// process polls the input and commits what it read, one transaction per
// poll, until ctx ends (nil) or a poll or a commit fails.
func (t *txn) process(ctx context.Context, log zerolog.Logger) error {
	// The first commit says the task runs again here: how long its input
	// waited is what a handover costs.
	processing, first := time.Now(), true
	for {
		// Bounded, so that an idle active still notices its context.
		pctx, cancel := context.WithTimeout(ctx, lagEvery)
		fs := t.cl.PollRecords(pctx, t.h.cfg.BatchMax)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err := fetchErr(fs); err != nil {
			return err
		}
		var in []*kgo.Record
		for _, r := range fs.Records() {
			if !r.Attrs.IsControl() {
				in = append(in, r)
			}
		}
		if len(in) == 0 {
			continue
		}
		if err := t.commit(ctx, in); err != nil {
			return err
		}
		if first {
			first = false
			log.Info().Int("records", len(in)).Int64("offset", in[0].Offset).Dur("after", time.Since(processing)).
				Dur("oldest_waited", time.Since(in[0].Timestamp)).Msg("first input committed")
		}
	}
}

// inputTopic checks that the input topic has partition p and returns the
// topic's id.
func (h *Handler) inputTopic(ctx context.Context, adm *kadm.Client, p int32) (kadm.TopicID, error) {
	topics, err := adm.ListTopics(ctx, h.cfg.InputTopic)
	if err != nil {
		return kadm.TopicID{}, err
	}
	td, ok := topics[h.cfg.InputTopic]
	if !ok || td.Err != nil {
		return kadm.TopicID{}, fmt.Errorf("input topic %s: %v", h.cfg.InputTopic, td.Err)
	}
	if _, ok := td.Partitions[p]; !ok {
		return kadm.TopicID{}, fmt.Errorf("input topic %s has no partition %d", h.cfg.InputTopic, p)
	}
	return td.ID, nil
}

// committedInput is the task's committed input offset, or the partition's
// start when the group has none. RequireStable makes the broker wait for
// pending transactional commits rather than answer an older offset.
func (h *Handler) committedInput(ctx context.Context, adm *kadm.Client, task string, p int32) (kgo.Offset, error) {
	offs, err := adm.FetchOffsets(kadm.RequireStable(ctx), Group(task))
	if errors.Is(err, kerr.GroupIDNotFound) {
		// No offset was ever committed (the group exists only through them).
		return kgo.NewOffset().AtStart(), nil
	}
	if err != nil {
		return kgo.Offset{}, err
	}
	if o, ok := offs.Lookup(h.cfg.InputTopic, p); ok {
		if o.Err != nil {
			return kgo.Offset{}, o.Err
		}
		if o.At >= 0 {
			return kgo.NewOffset().At(o.At), nil
		}
	}
	return kgo.NewOffset().AtStart(), nil
}

// txn is the active's transaction writer.
type txn struct {
	h       *Handler
	cl      *kgo.Client
	st      *store
	task    string
	p       int32
	epoch   uint64
	inputID kadm.TopicID
}

// commit processes recs in one transaction: per record, the new count to
// the changelog and an output record; the input offset after the last one;
// then the counts into the store. Any error leaves the transaction aborted
// (or to the broker's timeout) and the store unchanged: the caller starts
// over from the committed offset. Once begun, the transaction runs to its
// end on its own deadline, not ctx: the commit's outcome is known when it
// returns, so nothing is committed after the copy stopped.
func (t *txn) commit(parent context.Context, recs []*kgo.Record) (rerr error) {
	if err := t.h.cfg.Fence(parent); err != nil {
		return fmt.Errorf("%w: %v", kafkaerr.ErrFenced, err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), t.h.cfg.TxnTimeout/2)
	defer cancel()
	if err := t.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	committed := false
	defer func() {
		if committed {
			return
		}
		actx, acancel := context.WithTimeout(context.WithoutCancel(parent), t.h.cfg.TxnTimeout)
		defer acancel()
		if err := t.cl.AbortBufferedRecords(actx); err == nil {
			if err := t.cl.EndTransaction(actx, kgo.TryAbort); err != nil && !kafkaerr.Fenced(rerr) && kafkaerr.Fenced(err) {
				rerr = fmt.Errorf("abort: %w", err)
			}
		}
	}()

	counts := map[string]uint64{}
	var ups []kv
	var mu sync.Mutex
	var first error
	lastCL := int64(-1) // the last changelog offset written
	done := func(r *kgo.Record, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if first == nil {
				first = err
			}
			return
		}
		if r.Topic == t.h.cfg.ChangelogTopic && r.Offset > lastCL {
			lastCL = r.Offset
		}
	}
	epoch := []byte(strconv.FormatUint(t.epoch, 10))
	for _, r := range recs {
		n, ok := counts[string(r.Key)]
		if !ok {
			var err error
			if n, err = t.st.count(r.Key); err != nil {
				return err
			}
		}
		n++
		counts[string(r.Key)] = n
		v := []byte(strconv.FormatUint(n, 10))
		ups = append(ups, kv{key: r.Key, value: v})
		t.cl.Produce(ctx, &kgo.Record{Topic: t.h.cfg.ChangelogTopic, Partition: t.p, Key: r.Key, Value: v}, done)
		t.cl.Produce(ctx, &kgo.Record{Topic: t.h.cfg.OutputTopic, Key: r.Key, Value: v, Headers: []kgo.RecordHeader{
			{Key: HeaderInput, Value: []byte(fmt.Sprintf("%d:%d", r.Partition, r.Offset))},
			{Key: HeaderEpoch, Value: epoch},
		}}, done)
	}
	if err := t.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	mu.Lock()
	err, next := first, lastCL+1
	mu.Unlock()
	if err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	last := recs[len(recs)-1]
	if err := t.commitOffset(ctx, last.Offset+1, last.LeaderEpoch); err != nil {
		return err
	}
	if err := t.h.cfg.Fence(parent); err != nil {
		return fmt.Errorf("%w: %v", kafkaerr.ErrFenced, err)
	}
	committed = true
	if err := t.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// The outcome may be unknown: the caller starts over, and the
		// next InitProducerId settles it.
		return fmt.Errorf("commit: %w", err)
	}
	// The store's position moves past what this transaction wrote, with
	// its values: a store that stops before reading its own records back
	// must not look behind a changelog that is gone (a broker reset), or
	// its counts would survive into a new history.
	return t.st.apply(ups, next)
}

// commitOffset adds the input offset to the transaction: AddOffsetsToTxn,
// then TxnOffsetCommit for the task's group with no member (the group has
// no members: the controller, not a group, decides who consumes).
func (t *txn) commitOffset(ctx context.Context, offset int64, leaderEpoch int32) error {
	id, pe, err := t.cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("producer id: %w", err)
	}
	txid := TransactionalID(t.task)
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txid, id, pe, Group(t.task)
	aresp, err := add.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	if err := kerr.ErrorForCode(aresp.ErrorCode); err != nil {
		return fmt.Errorf("add offsets to transaction: %w", err)
	}
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = txid, Group(t.task), id, pe
	req.Generation, req.MemberID = -1, ""
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	// Both the name and the id: the request version decides which one
	// goes on the wire.
	rt.Topic, rt.TopicID = t.h.cfg.InputTopic, t.inputID
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset, rp.LeaderEpoch = t.p, offset, leaderEpoch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, t.cl)
	if err != nil {
		return fmt.Errorf("transactional offset commit: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return fmt.Errorf("transactional offset commit: %w", err)
			}
		}
	}
	return nil
}
