// Package kafkaha is the Kafka-coordinated election backend (ha.backend:
// kafka): a pair (or more) of controllers share one role without a Raft
// quorum of their own. Kafka is the coordinator and the log:
//
//   - The coordination topic (compacted, one partition) holds the roster
//     and the lease. A member registers by appending a registration record
//     (its offset is its join sequence, hence its rank); the holder of the
//     role appends lease records inside transactions.
//   - The pure rules of ha/succession decide, from the folded records and
//     the time, whether this member holds, challenges, waits or must
//     register. The backend evaluates on every new coordination record and
//     at the latest at the instant the decision says it can change.
//   - A challenge is InitProducerId on the role's transactional id (it mints
//     the newest producer epoch and fences every older holder: their open
//     transaction is aborted, their next write rejected) followed by a
//     committed lease record naming this member.
//   - The state topic (one partition) is the replicated log: the holder
//     appends FSM commands in transactions under its epoch, together with
//     its lease renewals, and acknowledges a write once the transaction has
//     committed; the others tail it read_committed and apply. A new holder
//     applies everything up to the last stable offset before it serves (the
//     freshness rule, its Barrier).
//   - A renewal or write that comes back fenced means another member holds
//     the role: the holder leaves at once. A holder that cannot renew before
//     its lease runs out leaves too; the safety of writes never depends on
//     that timing, only on the epoch.
//   - Reads (VerifyLeader) trust the holder's lease. A challenge decided on
//     a stale view can override a lease that its holder still trusts, so a
//     new holder serves only once every other member's lease has run out
//     (a hand-over ends it at once) or been given up by its holder (a yield
//     record, which a holder that leaves appends).
//
// FSM snapshots go to the data dir as in Raft mode, with the next state
// offset as their index, so a restart replays only the tail of the topic.
package kafkaha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/internal/stopper"
	"github.com/xce/xce/state"
)

// Config configures one member.
type Config struct {
	Brokers []string
	// Security is the connections' TLS and SASL.
	Security kafkaopts.Security
	// Member is this node's id; Role names the role (one per cluster).
	Member string
	Role   string
	// CoordTopic, StateTopic and TransactionalID: see Names.
	CoordTopic, StateTopic, TransactionalID string
	Lease                                   succession.LeaseConfig
	// SnapshotInterval is how often the FSM is snapshotted when at least
	// SnapshotThreshold records were applied since the last snapshot.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	// ElectingHint is how long a client is told to wait before it retries
	// while no primary is known.
	ElectingHint time.Duration
	Logger       zerolog.Logger

	// dial, when set, opens every connection to the brokers (kgo.Dialer).
	dial func(ctx context.Context, network, host string) (net.Conn, error)
}

// clientOpts are the options of every client of the brokers, then opts.
func (b *Backend) clientOpts(opts ...kgo.Opt) []kgo.Opt {
	o := []kgo.Opt{kgo.SeedBrokers(b.cfg.Brokers...), kgo.DialTimeout(2 * time.Second)}
	o = append(o, b.conn...)
	if b.cfg.dial != nil {
		o = append(o, kgo.Dialer(b.cfg.dial))
	}
	return append(o, opts...)
}

// Names derives a cluster's topic and transactional id names from the
// Kafka prefix, so that every member agrees without more configuration.
func Names(prefix, cluster string) (coord, state, txnID string) {
	base := prefix + "." + cluster
	return base + ".coord", base + ".state", base + ".role"
}

// Record headers: the term a holder wrote a state record in, and the mark
// of a challenge's lease record (its offset + 1 is the new term).
const (
	headerTerm      = "xce-term"
	headerChallenge = "xce-challenge"
	// headerMember names the member a yield record (see succession.Coordinator.ForeignUntil) is
	// about; headerYield carries the yield's offset.
	headerMember = "xce-member"
	headerYield  = "xce-yield"
)

// Errors.
var (
	ErrNotLeader = ha.ErrNotLeader
	ErrShutdown  = ha.ErrShutdown
)

// Info is what Status shows of the role.
type Info = ha.RoleInfo

// RosterEntry is one registered member with its rank.
type RosterEntry = ha.RosterEntry

// Backend implements ha.Backend over Kafka.
type Backend struct {
	cfg   Config
	log   zerolog.Logger
	fsm   *state.FSM
	snaps raft.SnapshotStore
	obs   chan ha.Signal
	plain *kgo.Client
	// conn are the options of every client's connections: TLS, SASL.
	conn []kgo.Opt

	// stopper owns the backend's goroutines: the coordination loop and
	// what it starts, the snapshot loop, and the calls of lose that a
	// writer hands off. A holder's writer and the tailer have their own
	// owners, which the backend stops.
	stopper *stopper.Stopper
	kick    chan struct{}
	posts   chan input

	mu      sync.Mutex
	state   succession.RoleState
	view    ha.Observed
	holding *holder
	term    uint64

	// applyMu serializes FSM application between the tailer and the
	// holder; next is the next state offset to apply.
	applyMu   sync.Mutex
	next      int64
	sinceSnap uint64
	lastTerm  uint64
	tail      *tailer
	lso       atomic.Int64
	// handoverUntil (unix ms): after TransferLeadership, do not register
	// again before another member holds the role or this instant passes.
	handoverUntil atomic.Int64

	// folded is the offset of the last coordination record folded, and
	// foreignUntil (unix ms) when the last lease another member may still
	// act on runs out (see succession.Coordinator.ForeignUntil); both guarded by mu.
	folded       int64
	foreignUntil int64
	// yields takes, from lose, the offset of the last lease record of a
	// holder that left, for the loop to announce (see succession.Coordinator.ForeignUntil).
	yields chan int64
}

var _ ha.Backend = (*Backend)(nil)

// Start restores the latest snapshot and starts the member. It does not
// wait for Kafka: registration, topic creation and the election retry in
// the background until the brokers answer.
func Start(cfg Config, fsm *state.FSM, snaps raft.SnapshotStore) (*Backend, error) {
	if err := cfg.Lease.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("kafkaha: no brokers")
	}
	log := cfg.Logger.With().Str("component", "kafka-ha").Logger()
	conn, err := cfg.Security.Opts(log)
	if err != nil {
		return nil, fmt.Errorf("kafkaha: %w", err)
	}
	plain, err := kgo.NewClient((&Backend{cfg: cfg, conn: conn}).clientOpts(kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))...)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cfg: cfg, log: log,
		fsm: fsm, snaps: snaps, obs: make(chan ha.Signal, 16), plain: plain, conn: conn,
		stopper: stopper.New(), kick: make(chan struct{}, 1), posts: make(chan input, 16),
		view: ha.Observed{State: ha.StateFollower}, folded: -1, yields: make(chan int64, 4),
	}
	if err := b.restore(); err != nil {
		plain.Close()
		return nil, err
	}
	b.startTailer()
	b.stopper.GoCtx(b.coordLoop)
	if cfg.SnapshotInterval > 0 {
		b.stopper.GoCtx(b.snapshotLoop)
	}
	return b, nil
}

func (b *Backend) nowMillis() int64 { return time.Now().UnixMilli() }

func (b *Backend) notify() {
	select {
	case b.obs <- ha.Signal{}:
	default:
	}
}

// Observations implements ha.Backend.
func (b *Backend) Signals() <-chan ha.Signal { return b.obs }

// View implements ha.Backend.
func (b *Backend) View() ha.Observed {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.view
}

// CommitIndex implements ha.Backend: the last stable offset seen, as an index.
func (b *Backend) CommitIndex() uint64 {
	b.applyMu.Lock()
	next := b.next
	b.applyMu.Unlock()
	return uint64(max(b.lso.Load(), next))
}

// AppliedIndex implements ha.Backend.
func (b *Backend) AppliedIndex() uint64 {
	b.applyMu.Lock()
	defer b.applyMu.Unlock()
	return uint64(b.next)
}

// Info reports the roster with ranks and the lease.
func (b *Backend) Info() Info {
	b.mu.Lock()
	defer b.mu.Unlock()
	var in Info
	for _, r := range b.state.Roster {
		rank, _ := b.state.RankOf(r.Member)
		in.Roster = append(in.Roster, RosterEntry{Member: string(r.Member), Rank: rank, Offset: r.Offset})
	}
	slices.SortFunc(in.Roster, func(x, y RosterEntry) int { return x.Rank - y.Rank })
	if l := b.state.Lease; l != nil {
		in.LeaseHolder, in.LeaseDeadline = string(l.Holder), time.UnixMilli(l.DeadlineMillis)
	}
	if h := b.holding; h != nil {
		in.Epoch = h.epoch
	}
	return in
}

// Barrier implements ha.Backend, with the freshness rule: a new holder
// commits a no-op under its epoch and lets the tailer apply the state topic
// up to and including it; every record committed before (by any holder) is
// then applied, and the holder takes the log over from the tailer. Before
// that it waits until no other member may still trust a lease (see
// succession.Coordinator.ForeignUntil): normally none is left by the time a challenge commits.
func (b *Backend) Barrier(ctx context.Context) error {
	h := b.currentHolder()
	if h == nil {
		return ErrNotLeader
	}
	// One barrier at a time: a second one waits for the first and then
	// finds the holder ready (its own no-op would be committed after the
	// tailer stopped, and nothing would ever apply it).
	select {
	case h.barrierMu <- struct{}{}:
		defer func() { <-h.barrierMu }()
	case <-h.done():
		return ErrNotLeader
	case <-ctx.Done():
		return ctx.Err()
	}
	if h.isReady() {
		return nil
	}
	idx, err := h.barrier(ctx, (&state.Command{Type: state.CmdNoop}).Encode())
	if err != nil {
		return err
	}
	if err := b.awaitApplied(ctx, h, idx); err != nil {
		return err
	}
	if err := b.awaitForeignLeases(ctx, h); err != nil {
		return err
	}
	if err := b.takeLog(h); err != nil {
		return err
	}
	b.log.Info().Uint64("index", idx).Msg("caught up with the state topic; writing under this epoch")
	h.markReady()
	return nil
}

// barrierPoll is how often Barrier looks at what it waits for.
const barrierPoll = 2 * time.Millisecond

// awaitApplied waits until the tailer has applied the state topic up to
// idx, the index of h's barrier.
func (b *Backend) awaitApplied(ctx context.Context, h *holder, idx uint64) error {
	tick := time.NewTicker(barrierPoll)
	defer tick.Stop()
	// A committed no-op that read_committed consumers never see means the
	// broker left this transaction open on the state partition (seen with
	// kfake, rarely, on a producer's first write there). Waiting longer does
	// not help; a new challenge's InitProducerId aborts it. So give the role
	// up after a while and let the rules challenge again.
	stallAfter := max(time.Duration(b.cfg.Lease.LeaseMillis)*time.Millisecond, time.Second)
	stall := time.NewTimer(stallAfter)
	defer stall.Stop()
	last := int64(-1)
	for {
		b.applyMu.Lock()
		next := b.next
		b.applyMu.Unlock()
		if uint64(next) >= idx {
			return nil
		}
		if next != last {
			// Still applying a backlog: not stalled.
			last = next
			stall.Reset(stallAfter)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("catching up to index %d (at %d): %w", idx, next, ctx.Err())
		case <-h.done():
			return ErrNotLeader
		case <-stall.C:
			b.lose(h, fmt.Sprintf("the state topic does not show this epoch's barrier (index %d, applied %d): giving the role up so that a new challenge aborts the stuck transaction", idx, next))
			return ErrNotLeader
		case <-tick.C:
		}
	}
}

// awaitForeignLeases waits until no other member can still act on a
// lease: a challenge decided on a view that missed a renewal (or a
// simultaneous challenger's grant) overrides a lease its holder still
// trusts (its VerifyLeader) until it hears of this one. That holder
// announces that it left (a yield record); else its lease runs out.
func (b *Backend) awaitForeignLeases(ctx context.Context, h *holder) error {
	tick := time.NewTicker(barrierPoll)
	defer tick.Stop()
	logged := false
	for {
		b.mu.Lock()
		folded, until := b.folded, b.foreignUntil
		b.mu.Unlock()
		wait := time.Until(time.UnixMilli(until))
		if folded >= int64(h.term)-1 && wait <= 0 {
			return nil
		}
		if folded >= int64(h.term)-1 && !logged {
			logged = true
			b.log.Warn().Dur("wait", wait).Msg("another member may still act on its lease: waiting for it to leave or its lease to run out before serving")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the leases of other members to run out: %w", ctx.Err())
		case <-h.done():
			return ErrNotLeader
		case <-tick.C:
		}
	}
}

// takeLog takes the log over from the tailer. From here on, while h holds,
// only its writer applies: startTailer refuses, and lose(h) restarts the
// tailer once the writer has exited. A tailer running beside a writer that
// applies its own commits would apply them twice.
func (b *Backend) takeLog(h *holder) error {
	b.mu.Lock()
	if b.holding != h {
		// lose(h) restarts (or has restarted) the tailer.
		b.mu.Unlock()
		return ErrNotLeader
	}
	h.ownsLog = true
	t := b.tail
	b.tail = nil
	b.mu.Unlock()
	t.stop()
	return nil
}

// Apply implements ha.Backend.
func (b *Backend) Apply(ctx context.Context, cmd []byte) (any, uint64, error) {
	h := b.currentHolder()
	if h == nil || !h.isReady() {
		return nil, 0, ErrNotLeader
	}
	r := h.submit(ctx, &op{cmd: cmd, done: make(chan opResult, 1)})
	return r.resp, r.index, r.err
}

// VerifyLeader implements ha.Backend: the holder's lease, renewed in a
// committed transaction, has not run out (minus a safety margin).
func (b *Backend) VerifyLeader(ctx context.Context) error {
	h := b.currentHolder()
	if h == nil || !h.isReady() || h.leaving.Load() || !h.leaseValid(time.Now()) {
		return ErrNotLeader
	}
	return nil
}

// TransferLeadership implements ha.Backend: the holder deregisters and ends
// its lease now, so the next member in join order challenges at once; this
// member registers again (at the tail) only once another member holds the
// role, or after one lease, so that it cannot race its successor.
func (b *Backend) TransferLeadership() error {
	h := b.currentHolder()
	if h == nil {
		return ErrNotLeader
	}
	// From the release on, the next holder does not wait for this lease
	// (it ends now): stop confirming it now.
	h.leaving.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.cfg.Lease.LeaseMillis)*time.Millisecond)
	defer cancel()
	b.handoverUntil.Store(time.Now().Add(time.Duration(b.cfg.Lease.LeaseMillis) * time.Millisecond).UnixMilli())
	err := h.release(ctx)
	b.lose(h, "handed the role on")
	if err != nil {
		if next := b.otherHolder(time.Now()); next != "" {
			// The lease ran out while its release was committing, and
			// the next member took the role: the hand-over happened.
			b.log.Info().Str("holder", next).Err(err).Msg("the lease ran out before its release committed; the next member holds the role")
			return nil
		}
		return fmt.Errorf("releasing the lease: %w", err)
	}
	return nil
}

// otherHolder is the member whose lease, as this member last saw the
// coordination topic, holds the role at now, if it is another one.
func (b *Backend) otherHolder(now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.state.Lease
	if l == nil || l.Holder == succession.MemberID(b.cfg.Member) || !l.Live(now.UnixMilli()) {
		return ""
	}
	return string(l.Holder)
}

// Shutdown implements ha.Backend.
func (b *Backend) Shutdown() error {
	// Beginning to stop under mu orders it with take: either take saw the
	// backend stopping, or the holder it installed is the one read here.
	b.mu.Lock()
	b.stopper.Begin()
	h := b.holding
	b.mu.Unlock()
	if h != nil {
		b.lose(h, "shutting down")
	}
	b.stopper.Stop()
	for {
		select {
		case p := <-b.posts:
			if c, ok := p.(challenged); ok && c.h != nil {
				c.h.shutdown()
			}
			continue
		default:
		}
		break
	}
	b.stopTailer()
	b.snapshot(true)
	b.plain.Close()
	return nil
}

func (b *Backend) currentHolder() *holder {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holding
}

// lose ends holding h (once): the writer stops, pending writes fail, the
// tailer takes the log back.
func (b *Backend) lose(h *holder, reason string) {
	b.mu.Lock()
	if b.holding != h {
		b.mu.Unlock()
		return
	}
	b.holding = nil
	b.view = ha.Observed{State: ha.StateFollower, Term: b.term}
	if l := b.state.Lease; l != nil && l.Holder != succession.MemberID(b.cfg.Member) {
		b.view.LeaderID = string(l.Holder)
	}
	b.mu.Unlock()
	b.log.Warn().Str("reason", reason).Uint64("term", h.term).Int16("epoch", h.epoch).Msg("left the role")
	h.shutdown()
	if !h.released.Load() {
		// This member no longer acts on its lease: a holder that overrode
		// it need not wait for it to run out.
		select {
		case b.yields <- h.leaseOff.Load():
		default:
		}
	}
	b.startTailer()
	b.notify()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// register appends this member's registration record (not transactional)
// and returns its offset.
func (b *Backend) register(ctx context.Context) (int64, error) {
	k, v := succession.RegistrationRecord(b.cfg.Role, succession.MemberID(b.cfg.Member))
	r := &kgo.Record{Topic: b.cfg.CoordTopic, Partition: 0, Key: k, Value: v}
	if err := b.plain.ProduceSync(ctx, r).FirstErr(); err != nil {
		return -1, err
	}
	b.log.Info().Int64("offset", r.Offset).Msg("registered: joined the roster at the tail")
	return r.Offset, nil
}

// ensureTopics creates the coordination and state topics when missing.
func (b *Backend) ensureTopics(ctx context.Context) error {
	adm := kadm.NewClient(b.plain)
	compact := "compact"
	forever := "-1"
	appendTime := "LogAppendTime"
	for topic, cfgs := range map[string]map[string]*string{
		b.cfg.CoordTopic: {"cleanup.policy": &compact, "message.timestamp.type": &appendTime},
		b.cfg.StateTopic: {"retention.ms": &forever},
	} {
		resp, err := adm.CreateTopics(ctx, 1, -1, cfgs, topic)
		if err != nil {
			return err
		}
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.TopicAlreadyExists) {
				return fmt.Errorf("creating %s: %w", r.Topic, r.Err)
			}
		}
	}
	return nil
}

func cloneState(s succession.RoleState) succession.RoleState {
	s.Roster = slices.Clone(s.Roster)
	if s.Lease != nil {
		l := *s.Lease
		s.Lease = &l
	}
	return s
}
