package worker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/server"
)

// startController runs a one-node controller in this process, with short
// worker sessions, and returns its client address and how to stop it.
func startController() (addr string, stop func()) {
	return startControllerBeating(200 * time.Millisecond)
}

// startControllerBeating is startController whose workers heartbeat every
// interval, with sessions of five intervals.
func startControllerBeating(interval time.Duration) (addr string, stop func()) {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		panic(err)
	}
	dir, err := os.MkdirTemp("", "xce-worker-example")
	if err != nil {
		panic(err)
	}
	cfg := configs.Default()
	cfg.NodeID, cfg.ClusterID, cfg.DataDir = "n1", "example", filepath.Join(dir, "data")
	cfg.ClientAddr, cfg.PeerAddr = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.Peers = []configs.Peer{{ID: "n1", PeerAddr: cfg.PeerAddr, ClientAddr: cfg.ClientAddr}}
	cfg.Assignor.SessionTimeout = configs.Duration{Duration: 5 * interval}
	cfg.Assignor.HeartbeatInterval = configs.Duration{Duration: interval}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	srv, err := server.New(&cfg, server.Options{Logger: zerolog.Nop(), Version: "example"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	return cfg.ClientAddr, func() {
		cancel()
		<-done
		_ = os.RemoveAll(dir)
	}
}
