package raftha

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/stopper"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// Peer is one voter.
type Peer struct {
	ID, Addr string
}

// Raft is the Raft election backend: hashicorp/raft with prevote over a
// stream layer the caller owns.
type Raft struct {
	id       string
	r        *raft.Raft
	trans    *raft.NetworkTransport
	observer *raft.Observer
	signals  chan ha.Signal
	watch    *exitWatch // nil unless DetectLeaderExit
	warm     *peerWarm
	waves    *waves
	// stopper owns the loop that snapshots by writes and the waits for
	// raft's futures; Shutdown stops it once raft has resolved them.
	stopper *stopper.Stopper
}

// Start bootstraps a fresh data dir from the peer list (never one with
// state), unless cfg.Join, and starts raft. From then on raft's committed
// configuration, not the peer list, says who the members are. It blocks while raft restores its snapshot and log,
// so the controller calls it off its event loop. Raft drives fsm through
// a FSM.
func Start(cfg Config, fsm *state.FSM, store *persist.Store, stream raft.StreamLayer, logger hclog.Logger) (*Raft, error) {
	f := NewFSM(fsm)
	f.metrics = cfg.Snapshots
	b, err := startWith(cfg, f, store, stream, logger)
	if err != nil {
		return nil, err
	}
	if cfg.SnapshotWrites > 0 {
		b.stopper.Go(func() { b.snapshotByWrites(f, cfg.SnapshotWrites, logger.Named("snapshot")) })
	}
	return b, nil
}

// snapshotSpacing: after a snapshot, the next one waits at least this
// many times as long as it took, measured from its end.
const snapshotSpacing = 8

// snapshotDue is snapshotByWrites' decision: writes were applied since the
// last snapshot, which ended since ago and took took; limit writes (times
// stretch, the replica's random spread) make the next one. The spacing
// keeps a large registry's snapshots, which write it whole, to at most a
// ninth of the node's time however fast writes come; the limit bounds
// what a restart replays where snapshots are cheaper than that.
func snapshotDue(writes, limit uint64, stretch float64, since, took time.Duration) bool {
	return float64(writes) >= float64(limit)*stretch && since >= snapshotSpacing*took
}

// snapshotByWrites takes a snapshot whenever snapshotDue says so, checked
// every second. Raft's own trigger counts entries, and an entry can hold a
// whole wave of writes, so it alone would let a restart replay far more
// than its threshold suggests (docs/operations.md, "Snapshots").
func (b *Raft) snapshotByWrites(f *FSM, limit uint64, logger hclog.Logger) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var failing bool
	// Every replica applies the same writes, so without a spread all of
	// them would snapshot in the same second and contend for the same
	// cores and disk; each waits a random quarter more.
	stretch := 1 + rand.Float64()/4
	var ended time.Time
	var took time.Duration
	for {
		select {
		case <-b.stopper.Stopping():
			return
		case <-t.C:
		}
		n := f.writesSinceSnapshot()
		if !snapshotDue(n, limit, stretch, time.Since(ended), took) {
			continue
		}
		stretch = 1 + rand.Float64()/4
		start := time.Now()
		err := b.r.Snapshot().Error()
		ended = time.Now()
		took = ended.Sub(start)
		switch {
		case err == nil || errors.Is(err, raft.ErrNothingNewToSnapshot):
			if failing {
				logger.Info("snapshots succeed again")
			}
			failing = false
		case errors.Is(err, raft.ErrRaftShutdown):
			return
		case !failing:
			// Raft's own trigger keeps trying too; one line until it works.
			logger.Warn("snapshot after writes failed", "writes_since_snapshot", n, "error", err)
			failing = true
		}
	}
}

// restoredAtOpen reports whether the data dir's open restored the newest
// snapshot into the state machine (persist.Options.RestoreSnapshot), so
// that raft need not; it notes that on fsm and in the log.
func restoredAtOpen(store *persist.Store, fsm raft.FSM, logger hclog.Logger) bool {
	if store.RestoreErr != nil {
		logger.Warn("restoring the newest snapshot while opening the log failed; raft restores the snapshots itself", "error", store.RestoreErr)
	}
	m := store.Restored
	f, ok := fsm.(*FSM)
	if m == nil || !ok {
		return false
	}
	f.restoredAtOpen()
	logger.Info("restored the newest snapshot while opening the log", "id", m.ID, "last-index", m.Index, "size-in-bytes", m.Size)
	return true
}

// firstElectionShare: a node's first wait for a leader after it starts is
// this share of the heartbeat timeout.
const firstElectionShare = 8

// startWith is Start with any raft.FSM.
func startWith(cfg Config, fsm raft.FSM, store *persist.Store, stream raft.StreamLayer, logger hclog.Logger) (*Raft, error) {
	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(cfg.NodeID)
	conf.HeartbeatTimeout = cfg.HeartbeatTimeout
	conf.ElectionTimeout = cfg.ElectionTimeout
	// A cold restart elects within a round trip or two of the nodes being
	// up rather than after a heartbeat timeout (our patch to raft,
	// third_party/hashicorp/raft/PATCHES.md).
	conf.FirstElectionTimeout = cfg.HeartbeatTimeout / firstElectionShare
	conf.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	conf.CommitTimeout = cfg.CommitTimeout
	conf.SnapshotInterval = cfg.SnapshotInterval
	conf.SnapshotThreshold = cfg.SnapshotThreshold
	conf.TrailingLogs = cfg.TrailingLogs
	conf.CampaignAllowed = cfg.CampaignAllowed
	conf.Logger = logger
	conf.BatchApplyCh = true
	conf.MaxAppendEntries = 256
	// The leader writes a wave's entry while it replicates it (our patch
	// to raft, third_party/hashicorp/raft/leader_persist.go): a write waits
	// for one disk and a round trip instead of the leader's disk and then
	// the round trip.
	conf.ParallelLeaderWrites = true
	if err := raft.ValidateConfig(conf); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("raft config: %w", err)
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:           stream,
		MaxPool:          4,
		Timeout:          transportTimeout(cfg.HeartbeatTimeout),
		Logger:           logger.Named("transport"),
		MaxRPCSize:       cfg.MaxRPCSize,
		RPCTimeout:       cfg.rpcTimeout(),
		IdleTimeout:      cfg.idleTimeout(),
		FirstByteTimeout: cfg.FirstByteTimeout,
		MaxInboundConns:  cfg.MaxInboundConns,
	})
	has, err := store.HasState()
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("read raft state: %w", err)
	}
	switch {
	case !has && cfg.Join:
		// A joining node starts with no configuration: it neither
		// campaigns nor votes for itself, and waits for a leader to add it
		// as a non-voter and send it the log or a snapshot.
		logger.Info("no raft state: waiting to be added to a cluster")
	case !has:
		var servers []raft.Server
		for _, p := range cfg.Peers {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
		}
		if err := raft.BootstrapCluster(conf, store.Logs, store.Stable, store.Snaps, trans, raft.Configuration{Servers: servers}); err != nil {
			trans.Close()
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		logger.Info("bootstrapped a new cluster from the peer list", "voters", len(servers))
	}
	if restoredAtOpen(store, fsm, logger) {
		// The state machine holds raft's newest snapshot already.
		conf.NoSnapshotRestoreOnStart = true
	}
	r, err := raft.NewRaft(conf, fsm, store.Logs, store.Stable, store.Snaps, trans)
	if err != nil {
		trans.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	b := &Raft{id: cfg.NodeID, r: r, trans: trans, signals: make(chan ha.Signal, 256), waves: newWaves(r), stopper: stopper.New()}
	// The filter turns raft's observations into signals and forwards them
	// itself, without blocking; raft's own channel is never used.
	b.observer = raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if sig, ok := signalOf(o); ok {
			select {
			case b.signals <- sig:
			default:
			}
		}
		return false
	})
	r.RegisterObserver(b.observer)
	if cfg.DetectLeaderExit {
		b.watch = newExitWatch(r, trans, store.Stable, conf.LocalID, stream, cfg.HeartbeatTimeout, logger.Named("exitwatch"))
		b.watch.start()
	}
	b.warm = newPeerWarm(r, trans, conf.LocalID, logger.Named("peerwarm"))
	b.warm.start()
	return b, nil
}

// Signals delivers raft's wake-ups (see Backend).
func (b *Raft) Signals() <-chan ha.Signal { return b.signals }

// signalOf is the signal an observation makes, if any.
func signalOf(o *raft.Observation) (ha.Signal, bool) {
	switch d := o.Data.(type) {
	case raft.LeaderObservation, raft.RaftState, raft.PeerObservation:
		return ha.Signal{}, true
	case raft.FailedHeartbeatObservation:
		return ha.Signal{Peer: string(d.PeerID), LastContact: d.LastContact}, true
	case raft.ResumedHeartbeatObservation:
		return ha.Signal{Peer: string(d.PeerID), Resumed: true}, true
	}
	return ha.Signal{}, false
}

// View reads raft's current state.
func (b *Raft) View() ha.Observed {
	o := ha.Observed{Term: b.r.CurrentTerm()}
	switch b.r.State() {
	case raft.Leader:
		o.State = ha.StateLeader
	case raft.Candidate:
		o.State = ha.StateCandidate
	case raft.Shutdown:
		o.State = ha.StateShutdown
	default:
		o.State = ha.StateFollower
	}
	_, id := b.r.LeaderWithID()
	o.LeaderID = string(id)
	return o
}

// CommitIndex and AppliedIndex report raft's progress.
func (b *Raft) CommitIndex() uint64  { return b.r.CommitIndex() }
func (b *Raft) AppliedIndex() uint64 { return b.r.AppliedIndex() }
func (b *Raft) LastContact() time.Time {
	return b.r.LastContact()
}

// Barrier returns once every entry before it is applied to the FSM.
func (b *Raft) Barrier(ctx context.Context) error {
	return mapErr(b.r.Barrier(timeoutOf(ctx)).Error())
}

// Apply replicates cmd and returns the FSM's response and the entry's index.
// Commands go to raft in waves (see waves).
func (b *Raft) Apply(ctx context.Context, cmd []byte) (any, uint64, error) {
	return b.waves.apply(ctx, cmd)
}

// SetBatches turns batch entries on or off (see waves): on only while
// every voter's binary applies them.
func (b *Raft) SetBatches(on bool) { b.waves.setBatches(on) }

// VerifyLeader confirms with a quorum that this node is still the leader.
func (b *Raft) VerifyLeader(ctx context.Context) error {
	return mapErr(b.r.VerifyLeader().Error())
}

// TransferLeadership hands leadership to the most up-to-date voter.
func (b *Raft) TransferLeadership() error {
	return mapErr(b.r.LeadershipTransfer().Error())
}

// Shutdown stops raft and its transport.
func (b *Raft) Shutdown() error {
	if b.watch != nil {
		b.watch.close()
	}
	if b.warm != nil {
		b.warm.close()
	}
	b.stopper.Begin()
	b.r.DeregisterObserver(b.observer)
	err := b.r.Shutdown().Error()
	// Raft has resolved every future: their waits return.
	b.stopper.Stop()
	b.waves.close()
	if cerr := b.trans.Close(); err == nil {
		err = cerr
	}
	return err
}

// wait waits for f within ctx: resolved is false when ctx ended first,
// otherwise err is f's error. Raft resolves every future, at the latest
// when it shuts down, so the goroutine that waits ends with it; once
// Shutdown has begun none starts.
func (b *Raft) wait(ctx context.Context, f raft.Future) (resolved bool, err error) {
	done := make(chan error, 1)
	if !b.stopper.Go(func() { done <- f.Error() }) {
		return true, raft.ErrRaftShutdown
	}
	select {
	case err := <-done:
		return true, err
	case <-ctx.Done():
		return false, nil
	}
}

func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if t := time.Until(d); t > 0 {
			return t
		}
		return time.Millisecond
	}
	return 0
}

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %v", ha.ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ha.ErrShutdown
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrLeadershipTransferTimeout):
		// A transfer that timed out leaves this node the leader: asking
		// again may succeed.
		return fmt.Errorf("%w: %v", ha.ErrTimeout, err)
	}
	return err
}

var _ ha.Backend = (*Raft)(nil)
