package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// A single-node server built from its config elects itself, takes a
// write, and stops when its context ends.
func TestSingleNodeServes(t *testing.T) {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := configs.Default()
	cfg.NodeID, cfg.ClusterID, cfg.DataDir = "n1", "t", filepath.Join(t.TempDir(), "data")
	cfg.ClientAddr, cfg.PeerAddr = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfg.Peers = []configs.Peer{{ID: "n1", PeerAddr: cfg.PeerAddr, ClientAddr: cfg.ClientAddr}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	srv, err := New(&cfg, Options{Logger: zerolog.Nop(), Version: "test", Serving: func() { close(served) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	cl, err := client.New([]string{cfg.ClientAddr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "PRIMARY with write quorum", func() bool {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		s, err := cl.Status(sctx, cfg.ClientAddr)
		return err == nil && s.Role == xcev1.Role_ROLE_PRIMARY && s.WriteQuorum
	})
	<-served
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := cl.Submit(wctx, client.Task{ID: "t1"}); err != nil {
		t.Fatalf("submit: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after its context ended: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
