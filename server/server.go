// Package server wires one controller node from its config: the state
// machine, the election backend (Raft or Kafka), the outbox publisher or
// discarder, the placement service, the node and the API (docs/design.md,
// "The parts"). The command line, signals, the pid file and the hand-over
// of an upgrade stay with the caller.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/controller"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/placement"
	"github.com/xce/xce/state"
)

// discardTrimEvery is how often the discarder trims the outbox when
// publishing is off. Every snapshot holds the events not yet trimmed, and
// a restart decodes them, so they are kept to a fraction of a second's
// writes; a trim is one small entry.
const discardTrimEvery = 100 * time.Millisecond

// Options are what the server takes from its process.
type Options struct {
	Logger  zerolog.Logger
	Version string
	// Listen opens the client and peer listeners; an upgrade's new process
	// passes the listeners it inherited this way. Nil: net.Listen.
	Listen func(network, addr string) (net.Listener, error)
	// LockWait is how long to wait for the data dir lock; it is set when
	// this process was started by an upgrade in place, whose old process
	// holds the data dir until it has drained.
	LockWait time.Duration
	// Serving is called once the client port answers (before storage
	// opens).
	Serving func()
	// CheckDB vets an existing raft.db before it is opened.
	CheckDB func(path string) error
	// Pprof serves /debug/pprof on the client port.
	Pprof bool
}

// Server is one wired node, ready to Run.
type Server struct {
	node *controller.Node
	api  http.Handler
	// peerLn is Raft's peer listener (nil with Kafka).
	peerLn net.Listener
}

// applier hands the leader-only services' writes and fencing reports to
// the node. Its node is set by New before Run starts those services, the
// only callers.
type applier struct{ node *controller.Node }

func (a *applier) apply(ctx context.Context, cmd []byte) error {
	_, err := a.node.Apply(ctx, cmd)
	return err
}

func (a *applier) applyResult(ctx context.Context, cmd []byte) (state.Result, error) {
	return a.node.Apply(ctx, cmd)
}

func (a *applier) fenced(term uint64, reason string) { a.node.Fence(term, reason) }

// New opens the listeners and builds the node; nothing runs until Run.
func New(cfg *configs.Config, o Options) (srv *Server, err error) {
	log := o.Logger
	listen := o.Listen
	if listen == nil {
		listen = net.Listen
	}
	if len(cfg.Join) == 0 && len(cfg.Peers)%2 == 0 {
		log.Warn().Int("voters", len(cfg.Peers)).Msg("an even number of voters tolerates no more failures than one fewer")
	}
	set := convert(cfg, log)
	csec, err := newClientSecurity(cfg, log)
	if err != nil {
		return nil, err
	}
	clientLn, err := listen("tcp", cfg.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.ClientAddr, err)
	}
	var peerLn net.Listener
	defer func() {
		if err != nil {
			clientLn.Close()
			if peerLn != nil {
				peerLn.Close()
			}
		}
	}()
	fsm := state.NewFSM(cfg.ClusterID)
	reg := prometheus.NewRegistry()
	bm, err := newBackendMetrics(reg)
	if err != nil {
		return nil, err
	}
	election, peerLn, err := newElection(cfg, set, fsm, listen, bm, log)
	if err != nil {
		return nil, err
	}
	if o.LockWait > 0 {
		log.Info().Msg("upgrade 5/5: started with inherited listeners; answering NOT_READY until the old process releases the data dir")
	}
	to := &applier{}
	var outbox interface {
		controller.LeaderService
		controller.OutboxStatus
	}
	if len(cfg.Kafka.Brokers) == 0 {
		log.Warn().Msg("kafka.brokers is empty: publishing to Kafka is disabled; the outbox is trimmed without being published")
		outbox = fence.NewDiscarder(fsm, to.apply, discardTrimEvery, log)
	} else {
		pub, err := fence.New(set.fence, fsm, fence.Hooks{Apply: to.apply, Fenced: to.fenced}, reg)
		if err != nil {
			return nil, err
		}
		outbox = pub
	}
	assignor, err := placement.New(set.placement, fsm, to.applyResult, log)
	if err != nil {
		return nil, err
	}
	node, err := controller.New(controller.Options{
		Config: cfg, Logger: log, Version: o.Version, Pprof: o.Pprof,
		Registry: reg, FSM: fsm, Services: []controller.LeaderService{outbox, assignor}, Outbox: outbox,
		Election: election, ClientListener: clientLn, LockWait: o.LockWait,
		CheckDB: o.CheckDB, Serving: o.Serving,
		ClientTLS: csec.tls, GuardMetrics: csec.guardMetrics, Console: csec.console(),
	})
	if err != nil {
		return nil, err
	}
	to.node = node
	assignor.SetAddrGate(node.WorkerAddrsWritable)
	svc, _, api := dispatch.NewService(node, node.Registry(), assignor, dispatch.WithAuth(csec.authn), dispatch.WithSecurity(csec.sec))
	csec.refused = svc.AuthRefused
	return &Server{node: node, api: api, peerLn: peerLn}, nil
}

// Run serves until ctx ends, then stops the node gracefully (a PRIMARY
// hands leadership on first). It returns nil after a stop asked for by
// ctx.
func (s *Server) Run(ctx context.Context) error {
	err := s.node.Run(ctx, s.api)
	if s.peerLn != nil {
		// Raft's transport closes it when it shuts down; this closes it
		// when the backend never started.
		_ = s.peerLn.Close()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// HandOff transfers leadership if this node is PRIMARY and waits until
// another node is (an upgrade's step 2).
func (s *Server) HandOff(ctx context.Context) error { return s.node.HandOff(ctx) }

// Drain stops accepting and waits (bounded) for in-flight requests.
func (s *Server) Drain() { s.node.Drain() }
