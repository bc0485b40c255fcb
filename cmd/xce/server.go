package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cloudflare/tableflip"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/controller"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/kafkaha"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/placement"
)

// forceExitAfter bounds a graceful stop; past it the process exits 1.
const forceExitAfter = 15 * time.Second

func serverCmd() *cobra.Command {
	var cfgPath, pidFile string
	cmd := &cobra.Command{
		Use:   "server --config FILE",
		Short: "Run one controller node",
		Long: `Run one controller node. The node answers its API at once (NOT_READY while
it elects), joins the Raft quorum of its peer list, and stops gracefully on
SIGTERM or SIGINT: a PRIMARY first hands leadership on. A second signal forces
the exit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfgPath == "" {
				return usageErr("server: --config is required")
			}
			return runServer(cfgPath, pidFile)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "node config file (YAML)")
	cmd.Flags().StringVar(&pidFile, "pid-file", "", "write the server's pid to this file")
	return cmd
}

func runServer(cfgPath, pidFile string) error {
	cfg, err := configs.Load(cfgPath)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, cfg.Log.Level, cfg.Log.Format, cfg.NodeID)
	if err != nil {
		return err
	}
	if len(cfg.Peers)%2 == 0 {
		log.Warn().Int("voters", len(cfg.Peers)).Msg("an even number of voters tolerates no more failures than one fewer")
	}
	// tableflip hands the listeners over on upgrade and writes the pid file
	// once this process serves (see upgrade.go).
	upg, err := tableflip.New(tableflip.Options{PIDFile: pidFile, UpgradeTimeout: upgradeTimeout})
	if err != nil {
		return fmt.Errorf("upgrader: %w", err)
	}
	defer upg.Stop()
	if pidFile != "" {
		defer func() {
			// After an upgrade the file names the new process: leave it.
			if readPid(pidFile) == os.Getpid() {
				os.Remove(pidFile)
			}
		}()
	}
	peerListen := cfg.PeerAddr
	if cfg.PeerListenAddr != "" {
		peerListen = cfg.PeerListenAddr
	}
	clientLn, err := upg.Listen("tcp", cfg.ClientAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.ClientAddr, err)
	}
	fsm := persist.NewFSM(cfg.ClusterID)
	var peerLn net.Listener
	var startBackend func(*persist.Store) (ha.Backend, error)
	if cfg.HA.Backend == configs.BackendKafka {
		// Kafka coordinates the role and holds the log: no peer port.
		coord, state, txn := kafkaha.Names(cfg.Kafka.TransactionalIDPrefix, cfg.ClusterID)
		log.Info().Str("coordination_topic", coord).Str("state_topic", state).Str("transactional_id", txn).
			Dur("lease", cfg.HA.Lease.Duration).Dur("renew", cfg.HA.Renew.Duration).Dur("stagger", cfg.HA.Stagger.Duration).
			Msg("ha.backend kafka: the role is coordinated through Kafka")
		startBackend = func(store *persist.Store) (ha.Backend, error) {
			kc := cfg.KafkaHAConfig()
			kc.Logger = log
			return kafkaha.Start(kc, fsm, store.Snaps)
		}
	} else if peerLn, err = upg.Listen("tcp", peerListen); err != nil {
		clientLn.Close()
		return fmt.Errorf("listen on %s: %w", peerListen, err)
	}
	lockWait := time.Duration(0)
	if upg.HasParent() {
		// The old process holds the data dir until it has drained.
		lockWait = inheritedLockWait
		log.Info().Msg("upgrade 5/5: started with inherited listeners; answering NOT_READY until the old process releases the data dir")
	}
	reg := prometheus.NewRegistry()
	if err := ha.ExportRaftMetrics(reg); err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	var node *controller.Node
	apply := func(ctx context.Context, cmd []byte) error {
		_, err := node.Apply(ctx, cmd)
		return err
	}
	var outbox interface {
		controller.LeaderService
		controller.OutboxStatus
	}
	if len(cfg.Kafka.Brokers) == 0 {
		log.Warn().Msg("kafka.brokers is empty: publishing to Kafka is disabled; the outbox is trimmed without being published")
		outbox = fence.NewDiscarder(fsm, apply, 5*time.Second, log)
	} else {
		fc := cfg.FenceConfig()
		fc.Logger = log
		pub, err := fence.New(fc, fsm, fence.Hooks{
			Apply:  apply,
			Fenced: func(term uint64, reason string) { node.Fence(term, reason) },
		}, reg)
		if err != nil {
			return err
		}
		outbox = pub
	}
	assignor, err := placement.New(cfg.AssignorConfig(), fsm, func(ctx context.Context, cmd []byte) (persist.Result, error) { return node.Apply(ctx, cmd) }, log)
	if err != nil {
		return err
	}
	node, err = controller.New(controller.Options{
		Config: cfg, Logger: log, Version: versionString(), Pprof: os.Getenv("XCE_PPROF") == "1",
		Registry: reg, FSM: fsm, Services: []controller.LeaderService{outbox, assignor}, Outbox: outbox,
		ClientListener: clientLn, PeerListener: peerLn, LockWait: lockWait, StartBackend: startBackend,
		CheckDB: checkDBInChild,
		Serving: func() {
			if err := upg.Ready(); err != nil {
				log.Warn().Err(err).Msg("reporting ready to the upgrader")
			}
		},
	})
	if err != nil {
		return err
	}
	_, api := dispatch.New(node, node.Registry(), assignor)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	hups := make(chan os.Signal, 4)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	done := make(chan struct{})
	defer close(done)
	up := &upgrader{upg: upg, cfgPath: cfgPath, pidFile: pidFile, log: log}
	go func() {
		for {
			select {
			case <-hups:
				log.Info().Msg("SIGHUP: upgrading in place")
				up.start(node, cancel)
			case <-done:
				return
			}
		}
	}()
	go func() {
		select {
		case s := <-sigs:
			log.Info().Str("signal", s.String()).Msg("stopping gracefully; a second signal forces the exit")
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			log.Warn().Str("signal", s.String()).Msg("second signal: exiting now")
			os.Exit(exitOther)
		case <-time.After(forceExitAfter):
			log.Error().Dur("after", forceExitAfter).Msg("graceful stop took too long: exiting now")
			os.Exit(exitOther)
		case <-done:
		}
	}()
	err = node.Run(ctx, api)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
