package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func devCmd() *cobra.Command {
	var dir string
	var nodes, basePort int
	var fresh bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster (3 nodes on loopback) until Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 7 {
				return usageErr("--nodes: %d is not between 1 and 7", nodes)
			}
			return runDev(dir, nodes, basePort, fresh)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".xce-dev", "directory for the generated configs, data and logs")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes")
	cmd.Flags().IntVar(&basePort, "base-port", 7100, "client ports are base+i, peer ports base+100+i")
	cmd.Flags().BoolVar(&fresh, "fresh", false, "delete the directory's data first")
	return cmd
}

// devConfig writes node i's config for an n-node loopback cluster.
func devConfig(dir string, i, n, base int) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "node_id: n%d\ncluster_id: dev\ndata_dir: %s\n", i, filepath.Join(dir, "data", fmt.Sprintf("n%d", i)))
	fmt.Fprintf(&b, "client_addr: 127.0.0.1:%d\npeer_addr: 127.0.0.1:%d\npeers:\n", base+i, base+100+i)
	for j := 1; j <= n; j++ {
		fmt.Fprintf(&b, "  - {id: n%d, peer_addr: 127.0.0.1:%d, client_addr: 127.0.0.1:%d}\n", j, base+100+j, base+j)
	}
	b.WriteString("log: {level: info, format: json}\n")
	path := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i))
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func runDev(dir string, n, base int, fresh bool) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if fresh {
		if err := os.RemoveAll(filepath.Join(dir, "data")); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var procs []*exec.Cmd
	var dones []chan struct{}
	var addrs []string
	exited := make(chan int, n)
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for i, p := range procs {
			select {
			case <-dones[i]:
			case <-time.After(10 * time.Second):
				_ = p.Process.Kill()
				<-dones[i]
			}
		}
		fmt.Println("dev cluster stopped")
	}()
	for i := 1; i <= n; i++ {
		cfg, err := devConfig(dir, i, n, base)
		if err != nil {
			return err
		}
		logPath := filepath.Join(dir, "logs", fmt.Sprintf("n%d.log", i))
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		p := exec.Command(exe, "server", "--config", cfg)
		p.Stdout, p.Stderr = logf, logf
		if err := p.Start(); err != nil {
			logf.Close()
			return fmt.Errorf("start n%d: %w", i, err)
		}
		logf.Close()
		done := make(chan struct{})
		procs, dones = append(procs, p), append(dones, done)
		go func() {
			_ = p.Wait()
			close(done)
			exited <- i
		}()
		addr := fmt.Sprintf("127.0.0.1:%d", base+i)
		addrs = append(addrs, addr)
		fmt.Printf("n%d  api http://%s  peer 127.0.0.1:%d  config %s  log %s  pid %d\n", i, addr, base+100+i, cfg, logPath, p.Process.Pid)
	}
	all := strings.Join(addrs, ",")
	fmt.Printf("\ntry:  xce status --addr %s\n      xce submit my-task --addr %s\n      curl -s -H 'Content-Type: application/json' -d '{\"taskId\":\"t1\"}' http://%s/xce.v1.ControllerService/SubmitTask\nCtrl-C stops the cluster.\n",
		addrs[0], all, addrs[0])

	select {
	case <-ctx.Done():
		return nil
	case i := <-exited:
		return fmt.Errorf("n%d exited; see %s", i, filepath.Join(dir, "logs", fmt.Sprintf("n%d.log", i)))
	}
}
