package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/server"
	"github.com/xce/xce/upgrade"
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
	// The upgrader hands the listeners over on upgrade and writes the pid
	// file once this process serves.
	up, err := upgrade.New(upgrade.Options{ConfigPath: cfgPath, PidFile: pidFile, Log: log})
	if err != nil {
		return err
	}
	defer up.Close()
	srv, err := server.New(cfg, server.Options{
		Logger: log, Version: versionString(), Listen: up.Listen, LockWait: up.LockWait(),
		Serving: up.Ready, CheckDB: checkDBInChild, Pprof: os.Getenv("XCE_PPROF") == "1",
	})
	if err != nil {
		return err
	}

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
	go func() {
		for {
			select {
			case <-hups:
				log.Info().Msg("SIGHUP: upgrading in place")
				up.Start(srv, cancel)
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
	return srv.Run(ctx)
}
