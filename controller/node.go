// Package controller runs one node's lifecycle: the non-blocking start
// (phase 1), the event loop that alone writes the role, the per-term leader
// goroutine, phase 2 on the first role decision, and the graceful stop.
package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/delaymgr"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/restoreheap"
	"github.com/xce/xce/internal/stopper"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// Timings of the lifecycle that are not in the config.
const (
	// observeEvery re-reads raft's state in case a signal was dropped.
	observeEvery = 250 * time.Millisecond
	// barrierTimeout bounds the barrier of a new leadership term.
	barrierTimeout = 5 * time.Second
	// transferWait bounds the leadership transfer on stop.
	transferWait = 3 * time.Second
	// httpDrain bounds how long in-flight requests may run after stop.
	httpDrain = 3 * time.Second
)

// LeaderService is a leader-only service (outbox publisher, assignor loop,
// worker sessions, batch gate): it runs while the node is PRIMARY in a term
// (docs/design.md, "Roles and the event loop", leader-only services).
type LeaderService interface {
	Name() string
	// Run serves term until ctx ends, then returns nil or ctx's error. The
	// node runs every service of a term in one group and cancels it when
	// it leaves PRIMARY; revoking waits for every Run to return. A Run
	// that returns early with nil is done for the term; one that returns
	// another error hands leadership on.
	Run(ctx context.Context, term uint64) error
}

// A Starter is a LeaderService with a first step that must be done before
// the node serves as PRIMARY (the assignor opens the term's sessions, so
// that a worker registering right after the role change is served). The
// node calls Start on its event loop, in list order, just before it starts
// that service's Run; the view says PRIMARY only once every Start has
// returned. Start must not wait for I/O. An error hands leadership on; that
// service's Run and the services after it are not started.
type Starter interface {
	Start(term uint64) error
}

// Options are what a node needs besides its config.
type Options struct {
	Config  *configs.Config
	Logger  zerolog.Logger
	Version string
	// Registry receives the node's metrics; nil makes a private one.
	Registry *prometheus.Registry
	// Election starts the node's election backend; required.
	Election Election
	// ClientListener is used when set (inherited across an upgrade);
	// otherwise the node listens on client_addr.
	ClientListener net.Listener
	// LockWait is how long to wait for the data dir lock.
	LockWait time.Duration
	// CheckDB, when set, vets an existing raft.db before it is opened
	// (persist.Options.CheckBolt).
	CheckDB func(path string) error
	// FSM is the replicated state machine; nil makes a new one.
	FSM *state.FSM
	// Services are the leader-only services of each term, started in
	// order after the batch gate.
	Services []LeaderService
	// Pprof serves /debug/pprof on the client port (XCE_PPROF=1).
	Pprof bool
	// Outbox reports downstream publication (epoch, lag, state) for
	// Status; nil means publishing is not configured.
	Outbox OutboxStatus
	// Phase2 runs once, on the first role decision.
	Phase2 []func(role ha.Role)
	// Serving, when set, is called once the client port answers (before
	// storage opens): an upgrade's new process reports ready from here.
	Serving func()
	// ClientTLS, when set, is the client port's TLS (docs/operations.md,
	// "TLS and permissions on the client port").
	ClientTLS *tls.Config
	// GuardMetrics, when set, wraps the /metrics handler (the permission
	// it needs).
	GuardMetrics func(http.Handler) http.Handler
	// Console, when set, is served at /ui/ on the client port (the web
	// console, package ui).
	Console http.Handler
}

// Election is the node's election backend before it starts, as the caller
// built it from the config (server: Raft, or the Kafka-coordinated
// backend). The node knows a backend only through ha.Backend.
type Election struct {
	// Name names the backend in Status (configs.BackendRaft,
	// configs.BackendKafka).
	Name string
	// Start starts the backend on the node's storage, once it is open.
	// It may block while the backend restores its state: the node calls
	// it once, off its event loop.
	Start func(store *persist.Store) (ha.Backend, error)
	// ElectingHint is how long a client is told to wait before it retries
	// while no primary is known: about one election of this backend.
	ElectingHint time.Duration
}

// OutboxStatus is what Status shows of the downstream publisher.
type OutboxStatus interface {
	Status() (epoch, lag uint64, state string)
}

// Node is one controller node.
type Node struct {
	cfg     *configs.Config
	log     zerolog.Logger
	version string
	started time.Time
	// boot records the phases of the start (Status's startup).
	boot    *startup
	opts    Options
	metrics *metrics

	fsm   *state.FSM
	delay *delaymgr.Manager

	view    atomic.Pointer[ha.View]
	backend atomic.Pointer[backendBox]

	reads  readBatcher
	events chan any
	// backends hands the started backend to the loop. Unbuffered: a
	// backend the loop never took is shut down by its starter.
	backends chan ha.Backend
	// fenced carries a fencing report from the publisher (see Fence).
	fenced chan ha.Fenced
	// stopper owns the node's goroutines; Stopping closes when Run begins
	// to stop.
	stopper *stopper.Stopper

	// clientLn is the client listener while Run serves; Drain closes it.
	clientLn atomic.Pointer[net.Listener]

	// loop-owned state
	machine  *ha.Machine
	quorum   *ha.Quorum
	termStop chan struct{}
	// primaryTerm is the last term this node was PRIMARY in.
	primaryTerm uint64
	quorumChk   *delaymgr.Handle
	// leader is the running term's services, nil when none run.
	leader *leaderTerm

	// members is what the term's services learned of the membership,
	// read by the API.
	members memberState
	// drains is the reason worker drains may not be written yet; nil once
	// every voter applies them (log format 4) in the current term.
	drains atomic.Pointer[string]
	// placement is the reason placement freezes and weighted submits may
	// not be written yet; nil once every voter applies them (log format
	// 5) in the current term.
	placement atomic.Pointer[string]
	// workerAddrs is the reason worker addresses may not be written yet;
	// nil once every voter applies them (log format 6) in the current
	// term.
	workerAddrs atomic.Pointer[string]
	// joining: the node started with join addresses on an empty data dir
	// and waits to be added (set in Run before the backend starts).
	joining bool
}

// leaderTerm is one term's leader-only services, run in one group.
type leaderTerm struct {
	cancel context.CancelFunc
	// done is closed once every service's Run has returned.
	done chan struct{}
}

// internal events of the loop, besides ha.Event
type (
	backendFailed struct{ err error }
	recheck       struct{}
	storage       struct{ h persist.Health }
	serviceFail   struct {
		term uint64
		err  error
	}
)

// New validates the options and builds a node; nothing is opened yet.
func New(opts Options) (*Node, error) {
	if opts.Config == nil {
		return nil, errors.New("controller: no config")
	}
	if err := opts.Config.Validate(); err != nil {
		return nil, err
	}
	if opts.Election.Start == nil {
		return nil, errors.New("controller: no election backend to start (Options.Election)")
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	cfg := opts.Config
	var voters []string
	for _, p := range cfg.Peers {
		voters = append(voters, p.ID)
	}
	now := time.Now()
	n := &Node{
		boot:     &startup{start: now},
		cfg:      cfg,
		log:      opts.Logger,
		version:  opts.Version,
		started:  now,
		opts:     opts,
		fsm:      opts.FSM,
		events:   make(chan any, 256),
		backends: make(chan ha.Backend),
		fenced:   make(chan ha.Fenced, 1),
		stopper:  stopper.New(),
		machine:  ha.NewMachine(cfg.NodeID),
		quorum:   ha.NewQuorum(cfg.NodeID, voters, cfg.Raft.LeaderLeaseTimeout.Duration),
	}
	if n.fsm == nil {
		n.fsm = state.NewFSM(cfg.ClusterID)
	}
	n.members.cmds.Store(&notPrimaryYet)
	n.drains.Store(&drainsNotPrimary)
	n.placement.Store(&placementNotPrimary)
	n.workerAddrs.Store(&workerAddrsNotPrimary)
	n.metrics = newMetrics(opts.Registry, n)
	n.view.Store(ha.NewView(ha.View{Role: ha.RoleInit, Reason: "starting"}))
	return n, nil
}

// View is the current role as clients see it.
func (n *Node) View() *ha.View { return n.view.Load() }

// FSM is the node's replicated state machine (read side).
func (n *Node) FSM() *state.FSM { return n.fsm }

// Config is the node's config.
func (n *Node) Config() *configs.Config { return n.cfg }

// Registry is the node's metrics registry.
func (n *Node) Registry() *prometheus.Registry { return n.opts.Registry }

// Started is when the process started.
func (n *Node) Started() time.Time { return n.started }

// Version is the binary's version.
func (n *Node) Version() string { return n.version }

// Outbox reports the producer epoch held this term (0: none), the events
// committed but not yet published, and the publisher's state.
func (n *Node) Outbox() (epoch, lag uint64, state string) {
	if n.opts.Outbox == nil {
		_, held, _ := n.fsm.Outbox(0)
		return 0, uint64(held), "disabled"
	}
	return n.opts.Outbox.Status()
}

// Fence reports that a newer primary owns the downstream epoch: the node
// leaves PRIMARY for the rest of term. Safe from any goroutine.
func (n *Node) Fence(term uint64, reason string) {
	// Never blocks: the caller (the publisher) may be waited for by the
	// loop's Revoke. One pending fence is enough; the loop checks the term.
	select {
	case n.fenced <- ha.Fenced{Term: term, Reason: reason}:
	default:
	}
}

// Indexes returns raft's commit and applied indexes (zero before raft runs).
func (n *Node) Indexes() (commit, applied uint64) {
	if b := n.backend.Load(); b != nil {
		return b.CommitIndex(), b.AppliedIndex()
	}
	return 0, n.fsm.AppliedIndex()
}

// Run starts the node and blocks until ctx is done, then stops it gracefully.
// Phase 1 (listeners, timers, storage) happens here; the election starts
// asynchronously, and the API answers from before it starts. A non-nil error
// means the node could not start or stop cleanly.
func (n *Node) Run(ctx context.Context, api http.Handler) error {
	n.delay = delaymgr.New(nil)
	defer n.delay.Stop()

	// 1. The client port first: the API answers NOT_READY from here on.
	front, err := n.serveClients(api)
	if err != nil {
		return err
	}
	n.boot.mark(PhaseListen)
	// Last to go: clients get NOT_READY, never a refused connection,
	// while everything else stops.
	defer front.stop()

	// 2. Storage.
	store, err := n.openStorage()
	if err != nil {
		return err
	}
	n.boot.mark(PhaseStorageOpen)

	// 3. The storage's health decides whether the node may lead; the
	// election starts asynchronously, the backend restoring its state off
	// the loop.
	n.stopper.Go(func() { n.watchStorage(store) })
	n.stopper.Go(func() { n.startBackend(store) })

	err = n.loop(ctx)
	n.stop(store)
	return err
}

// clientPort is the client port while Run serves it.
type clientPort struct {
	srv *netio.Server
	// serving owns the server's Serve, which outlives the node's own
	// goroutines.
	serving *stopper.Stopper
}

// serveClients opens the client port (or takes the inherited listener)
// and serves the API and the node's routes on it.
func (n *Node) serveClients(api http.Handler) (*clientPort, error) {
	cl := n.opts.ClientListener
	if cl == nil {
		var err error
		if cl, err = netio.Listen(n.cfg.ClientAddr); err != nil {
			return nil, err
		}
	}
	srvOpts := []netio.Option{netio.WithLogger(n.log), netio.WithMetrics(n.metrics.conns)}
	if n.opts.ClientTLS != nil {
		srvOpts = append(srvOpts, netio.WithTLS(n.opts.ClientTLS))
	}
	p := &clientPort{srv: netio.NewServer(n.routes(api), n.cfg.ClientLimits(), srvOpts...), serving: stopper.New()}
	n.clientLn.Store(&cl)
	p.serving.Go(func() { _ = p.srv.Serve(cl) })
	n.log.Info().Str("client_addr", cl.Addr().String()).Str("peer_addr", n.cfg.PeerAddr).Int("pid", os.Getpid()).
		Str("version", n.version).Msg("listening; answering NOT_READY until a role is decided")
	if a := cl.Addr().String(); !netio.IsLoopback(a) && n.opts.ClientTLS == nil {
		n.log.Warn().Str("client_addr", n.cfg.ClientAddr).Str("listening_on", a).
			Msg("client port " + n.cfg.ClientAddr + " is reachable beyond this machine and has no TLS; anyone who reaches it can call every method")
	}
	if n.opts.Serving != nil {
		n.opts.Serving()
	}
	return p, nil
}

// stop drains the client port: in-flight requests get httpDrain to
// finish, then every connection closes.
func (p *clientPort) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), httpDrain)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		p.srv.Close()
	}
	p.serving.Stop()
}

// openStorage opens the data dir and notes whether the node joins a
// cluster: join addresses on a data dir without state. (The config allows
// join only with a backend whose members change.)
func (n *Node) openStorage() (*persist.Store, error) {
	store, err := persist.Open(n.cfg.DataDir, persist.Options{
		NodeID: n.cfg.NodeID, ClusterID: n.cfg.ClusterID, LockWait: n.opts.LockWait,
		Logger: logging.NewHCLog(n.log, "storage"), CheckBolt: n.opts.CheckDB,
		SegmentSize: n.cfg.Raft.LogSegmentSize, RestoreSnapshot: n.restoreAtOpen(), PrepareRestore: n.prepareRestore(),
	})
	if err != nil {
		return nil, err
	}
	if join := n.cfg.Join; len(join) > 0 {
		has, err := store.HasState()
		if err != nil {
			store.Close()
			return nil, fmt.Errorf("read raft state: %w", err)
		}
		n.joining = !has
		if has {
			n.log.Info().Strs("join", join).Msg("the data dir holds raft state: the join addresses are not used")
		}
	}
	return store, nil
}

// heapPerSnapshotByte is about how much heap a restored state and the
// log replayed past it fill, per byte of snapshot.
const heapPerSnapshotByte = 2

// restoreAtOpen is how the data dir's open restores the newest raft
// snapshot while it checks the log: into the state machine, with the Raft
// backend (the Kafka backend restores its own snapshots).
func (n *Node) restoreAtOpen() func(io.ReadCloser, int64) error {
	if n.cfg.HA.Backend != "" && n.cfg.HA.Backend != configs.BackendRaft {
		return nil
	}
	return func(rc io.ReadCloser, _ int64) error { return n.fsm.Restore(rc) }
}

// prepareRestore prepares the heap a restore is about to fill (package
// restoreheap), before the data dir's open starts the restore and the
// log's checks: alone, the preparation's collection takes a fraction of
// the time it takes beside them.
func (n *Node) prepareRestore() func(int64) func() {
	return func(size int64) func() {
		r, release := restoreheap.Prepare(heapPerSnapshotByte * size)
		switch {
		case r.Err != nil:
			n.log.Warn().Err(r.Err).Str("transparent_hugepages", r.Mode).Msg("could not mark the heap for huge pages; the restore faults in 4 KiB pages")
		case r.Advised > 0:
			n.log.Info().Int64("bytes", r.Advised).Str("transparent_hugepages", r.Mode).Msg("heap marked for huge pages before the restore")
		}
		return release
	}
}

// startBackend starts the election backend and hands it to the loop. A
// backend the loop never takes, because the node stopped meanwhile, is
// shut down here, before Run closes the storage under it.
func (n *Node) startBackend(store *persist.Store) {
	b, err := n.opts.Election.Start(store)
	if err != nil {
		n.post(backendFailed{err})
		return
	}
	n.boot.mark(PhaseBackendStarted)
	select {
	case n.backends <- b:
	case <-n.stopper.Stopping():
		_ = b.Shutdown()
	}
}

// liveMembers is the backend's latest configuration; ok is false while it is
// not known (no backend yet, or one whose members do not change), when
// the config's peers stand in.
func (n *Node) liveMembers() ([]ha.Member, bool) {
	b := n.backend.Load()
	if b == nil {
		return nil, false
	}
	m, ok := b.Backend.(ha.Membership)
	if !ok {
		return nil, false
	}
	members, _, _, err := m.Members()
	if err != nil {
		return nil, false
	}
	return members, true
}

// syncQuorumVoters gives the write quorum the configuration's voters: members
// are added, promoted and removed at run time, and non-voters never count.
func (n *Node) syncQuorumVoters() {
	members, ok := n.liveMembers()
	if !ok {
		return
	}
	var voters []string
	for _, m := range members {
		if m.Voter {
			voters = append(voters, m.ID)
		}
	}
	n.quorum.SetVoters(voters)
}

// Backend names the election backend; info describes a Kafka-coordinated
// role (nil for Raft, and before the backend runs).
func (n *Node) Backend() (string, *ha.RoleInfo) {
	if b := n.backend.Load(); b != nil {
		if i, ok := b.Backend.(interface{ Info() ha.RoleInfo }); ok {
			info := i.Info()
			return n.opts.Election.Name, &info
		}
	}
	return n.opts.Election.Name, nil
}

// ElectingHint is how long a client is told to wait before it retries
// while no primary is known (the backend's; see Election).
func (n *Node) ElectingHint() time.Duration { return n.opts.Election.ElectingHint }

// HandOff makes a PRIMARY transfer its leadership and waits, until ctx
// ends, for another node to be PRIMARY. It returns at once on a node that is
// not PRIMARY. An upgrade calls it before the new process starts, so that
// the cluster has a primary while this node restarts.
func (n *Node) HandOff(ctx context.Context) error {
	v := n.View()
	if v.Role != ha.RolePrimary {
		return nil
	}
	b := n.backend.Load()
	if b == nil || n.voterCount() < 2 {
		return errors.New("no other node can take over")
	}
	n.log.Info().Msg("handing leadership on before the upgrade")
	if err := b.TransferLeadership(); err != nil {
		return fmt.Errorf("leadership transfer: %w", err)
	}
	for {
		v := n.View()
		if v.Role != ha.RolePrimary && v.LeaderID != "" && v.LeaderID != n.cfg.NodeID {
			n.log.Info().Str("primary", v.LeaderID).Msg("another node is PRIMARY")
			return nil
		}
		select {
		case <-v.Changed():
		case <-ctx.Done():
			return fmt.Errorf("no other node became PRIMARY: %w", ctx.Err())
		}
	}
}

// Drain stops accepting new client connections, so that they go to the
// process that inherited the listening socket; connections already open
// are served until Run returns.
func (n *Node) Drain() {
	if p := n.clientLn.Load(); p != nil {
		_ = (*p).Close()
		n.log.Info().Msg("stopped accepting client connections; in-flight requests are drained")
	}
}

// watchStorage reports each change of the storage's health to the loop
// until the node stops.
func (n *Node) watchStorage(store *persist.Store) {
	for {
		changed := store.HealthChanged()
		n.post(storage{store.Health()})
		select {
		case <-changed:
		case <-n.stopper.Stopping():
			return
		}
	}
}

// post hands an event to the loop. It never blocks once the node stops.
func (n *Node) post(ev any) {
	select {
	case n.events <- ev:
	case <-n.stopper.Stopping():
	}
}

// loop is the event loop: the only writer of the role.
func (n *Node) loop(ctx context.Context) error {
	tick := time.NewTicker(observeEvery)
	defer tick.Stop()
	var signals <-chan ha.Signal
	for {
		select {
		case <-ctx.Done():
			return nil
		case b := <-n.backends:
			signals = b.Signals()
			n.attach(b)
		case ev := <-n.events:
			if err := n.handle(ev); err != nil {
				return err
			}
		case f := <-n.fenced:
			n.step(f)
		case sig := <-signals:
			n.signal(sig)
		case <-tick.C:
			if b := n.backend.Load(); b != nil {
				n.syncQuorumVoters()
				n.step(b.View())
			}
		}
	}
}

// attach makes b the node's backend: from here on the role follows it.
func (n *Node) attach(b ha.Backend) {
	n.backend.Store(&backendBox{b})
	n.syncQuorumVoters()
	if n.joining {
		join := n.cfg.Join
		n.stopper.GoCtx(func(ctx context.Context) { n.runJoin(ctx, join) })
	}
	n.step(ha.Started{})
	n.step(b.View())
}

// handle handles an event posted to the loop; an error ends the loop.
func (n *Node) handle(ev any) error {
	switch ev := ev.(type) {
	case backendFailed:
		return ev.err
	case ha.Event:
		n.step(ev)
	case recheck:
		n.publish()
	case storage:
		n.metrics.setStorage(ev.h)
		reason := ""
		if ev.h.Err != nil {
			reason = ev.h.Err.Error()
		}
		n.step(ha.StorageFailing{Reason: reason})
	case serviceFail:
		if ev.term == n.machine.Term() && n.machine.Role() == ha.RolePrimary {
			n.log.Error().Err(ev.err).Uint64("term", ev.term).Msg("a leader service failed to start; handing leadership on")
			n.step(ha.Fenced{Term: ev.term, Reason: ev.err.Error()})
		}
	default:
		panic(fmt.Sprintf("controller: unknown event %T", ev))
	}
	return nil
}

func (n *Node) signal(sig ha.Signal) {
	switch {
	case sig.Peer != "" && sig.Resumed:
		n.quorum.Resumed(sig.Peer, time.Now())
		n.publish()
	case sig.Peer != "":
		n.quorum.Failed(sig.Peer, sig.LastContact)
		n.publish()
	}
	if b := n.backend.Load(); b != nil {
		n.step(b.View())
	}
}

// step runs the role machine and performs its effects in order.
func (n *Node) step(ev ha.Event) {
	for _, fx := range n.machine.Step(ev) {
		n.perform(fx)
	}
	n.publish()
}

func (n *Node) perform(fx ha.Effect) {
	switch fx := fx.(type) {
	case ha.RoleChanged:
		n.log.Info().Str("from", fx.From.String()).Str("to", fx.To.String()).Uint64("term", fx.Term).
			Str("reason", fx.Reason).Msg("role changed")
		n.metrics.roleChanges.WithLabelValues(fx.From.String(), fx.To.String()).Inc()
	case ha.BeginTerm:
		n.beginTerm(fx.Term)
	case ha.EndTerm:
		if n.termStop != nil {
			close(n.termStop)
			n.termStop = nil
		}
	case ha.Establish:
		n.syncQuorumVoters()
		n.quorum.Reset(time.Now())
		n.primaryTerm = fx.Term
		n.establish(fx.Term)
	case ha.Revoke:
		n.revoke()
	case ha.FirstDecision:
		n.boot.mark(PhaseFirstRole)
		n.log.Info().Str("role", fx.Role.String()).Msg("phase 2: first role decision, starting role-dependent services")
		for _, f := range n.opts.Phase2 {
			f(fx.Role)
		}
	case ha.TransferLeadership:
		b := n.backend.Load()
		if b == nil {
			return
		}
		if n.voterCount() < 2 {
			// No other node can take over; the machine asks again
			// only after the cause is gone.
			n.log.Warn().Str("reason", fx.Reason).Msg("not serving as PRIMARY, and no other node can take over")
			return
		}
		n.log.Warn().Str("reason", fx.Reason).Msg("transferring leadership")
		n.stopper.Go(func() {
			err := b.TransferLeadership()
			if err != nil {
				n.log.Warn().Err(err).Msg("leadership transfer failed; asking again in a second")
				// At most one attempt a second while no peer can take over.
				select {
				case <-time.After(time.Second):
				case <-n.stopper.Stopping():
					return
				}
			}
			n.post(ha.TransferDone{Err: err})
		})
	default:
		panic(fmt.Sprintf("controller: unknown effect %T", fx))
	}
}

// beginTerm starts the term's goroutine: barrier, then report. Like Nomad's
// leader loop, each term has its own stop channel.
func (n *Node) beginTerm(term uint64) {
	b := n.backend.Load()
	stop := make(chan struct{})
	n.termStop = stop
	n.stopper.Go(func() {
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), barrierTimeout)
		err := b.Barrier(ctx)
		if err == nil {
			// Raft's own no-op and the barrier never reach the FSM, so the
			// FSM's applied index would stay below the commit index until
			// the next write, and linearizable reads (ReadBarrier waits for
			// the FSM to reach the commit index) would block until then. A
			// CmdNoop command brings the FSM to the end of the log.
			_, _, err = b.Apply(ctx, (&state.Command{Type: state.CmdNoop}).Encode())
		}
		cancel()
		select {
		case <-stop:
			return
		default:
		}
		if err == nil {
			n.boot.markAt(PhaseLogReplayed, time.Now(), time.Since(start))
			n.log.Info().Uint64("term", term).Dur("barrier", time.Since(start)).Msg("leader barrier done: every earlier entry is applied")
		}
		n.post(ha.BarrierDone{Term: term, Err: err})
	})
}

// establish starts the term's leader-only services in one group derived
// from the term's context: the batch gate, then Options.Services, in order.
// A Starter's Start runs here, on the loop, before its Run begins, so the
// view turns PRIMARY only once every Start is done.
func (n *Node) establish(term uint64) {
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	lt := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	n.leader = lt
	n.members.cmds.Store(&memberGateClosed)
	n.drains.Store(&drainGateClosed)
	n.placement.Store(&placementGateClosed)
	n.workerAddrs.Store(&workerAddrsGateClosed)
	n.members.pilot.Store(nil)
	services := append([]LeaderService{batchGate{n}, &autopilotService{n: n}}, n.opts.Services...)
	for _, s := range services {
		if st, ok := s.(Starter); ok {
			if err := st.Start(term); err != nil {
				n.stopper.Go(func() { n.post(serviceFail{term: term, err: fmt.Errorf("%s: %w", s.Name(), err)}) })
				break
			}
		}
		g.Go(func() error {
			if err := s.Run(gctx, term); err != nil && gctx.Err() == nil {
				return fmt.Errorf("%s: %w", s.Name(), err)
			}
			return nil
		})
	}
	wait := func() {
		err := g.Wait()
		close(lt.done)
		// A service that failed while the term runs hands leadership on;
		// errors after the node revoked the term are its own doing.
		if err != nil && ctx.Err() == nil {
			n.post(serviceFail{term: term, err: err})
		}
	}
	if !n.stopper.Go(wait) {
		// The node is stopping: the term ends here, as revoke would.
		cancel()
		wait()
	}
}

// revoke cancels the running term's services and waits for them to stop.
func (n *Node) revoke() {
	lt := n.leader
	if lt == nil {
		return
	}
	n.leader = nil
	lt.cancel()
	<-lt.done
	n.members.cmds.Store(&notPrimaryYet)
	n.drains.Store(&drainsNotPrimary)
	n.placement.Store(&placementNotPrimary)
	n.workerAddrs.Store(&workerAddrsNotPrimary)
}

// publish derives the client-visible View from the machine and the quorum
// and replaces the current one when it differs.
func (n *Node) publish() {
	now := time.Now()
	v := ha.View{
		Role:     n.machine.Role(),
		Term:     n.machine.Term(),
		LeaderID: n.machine.LeaderID(),
		Reason:   n.machine.Reason(),
		Storage:  n.machine.Storage(),
	}
	if v.Role == ha.RoleElecting && n.primaryTerm == v.Term && v.Term != 0 {
		// Stepped down in the term it led: if a majority is out of
		// reach, that is what clients should hear.
		if has, _ := n.quorum.Has(now); !has {
			v.QuorumLost, v.Reason = true, "no write quorum"
		}
	}
	if v.Role == ha.RolePrimary {
		has, next := n.quorum.Has(now)
		v.WriteQuorum = has
		if !next.IsZero() {
			if n.quorumChk != nil {
				n.quorumChk.Cancel()
			}
			n.quorumChk = n.delay.After(next.Sub(now), func() { n.post(recheck{}) })
		}
		if !has {
			v.Reason = "no write quorum"
		}
	}
	if v.LeaderID != "" {
		v.LeaderAddr = n.ClientAddrs()[v.LeaderID]
	}
	old := n.view.Load()
	v.Stopping = old.Stopping
	if old.Role == v.Role && old.Term == v.Term && old.LeaderID == v.LeaderID && old.WriteQuorum == v.WriteQuorum && old.QuorumLost == v.QuorumLost &&
		old.Reason == v.Reason && old.LeaderAddr == v.LeaderAddr && old.Storage == v.Storage {
		return
	}
	n.view.Store(ha.NewView(v))
	old.Replace()
	n.metrics.setView(&v)
}

// stop shuts the node down in reverse start order. A PRIMARY first hands
// leadership on so the cluster elects at once rather than after a timeout.
func (n *Node) stop(store *persist.Store) {
	start := time.Now()
	old := n.view.Load()
	v := *old
	v.Stopping, v.Reason = true, "shutting down"
	n.view.Store(ha.NewView(v))
	old.Replace()
	n.log.Info().Str("role", v.Role.String()).Msg("stopping")

	b := n.backend.Load()
	if b != nil && n.machine.Role() == ha.RolePrimary && n.voterCount() > 1 {
		n.transferOnStop(b)
	}
	for _, fx := range n.machine.Step(ha.Stopping{}) {
		n.perform(fx)
	}
	n.stopper.Begin()
	if b != nil {
		if err := b.Shutdown(); err != nil {
			n.log.Warn().Err(err).Msg("election backend shutdown")
		}
	}
	// The backend may still be starting: wait for its starter, which
	// shuts down a backend the loop never took, before closing the store
	// under it.
	n.stopper.Stop()
	if err := store.Close(); err != nil {
		n.log.Warn().Err(err).Msg("closing storage")
	}
	n.log.Info().Dur("took", time.Since(start)).Msg("stopped")
}

// transferOnStop hands leadership on, waiting at most transferWait; a
// transfer still under way then ends when the backend shuts down.
func (n *Node) transferOnStop(b ha.Backend) {
	done := make(chan error, 1)
	if !n.stopper.Go(func() { done <- b.TransferLeadership() }) {
		return
	}
	select {
	case err := <-done:
		if err != nil {
			n.log.Warn().Err(err).Msg("leadership transfer on stop failed")
		} else {
			n.log.Info().Msg("leadership transferred")
		}
	case <-time.After(transferWait):
		n.log.Warn().Msg("leadership transfer on stop timed out")
	}
}

// backendBox holds the election backend behind an atomic pointer.
type backendBox struct{ ha.Backend }
