package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func devCmd() *cobra.Command {
	var dir string
	var nodes, basePort int
	var fresh, noKafka bool
	var kafkaAddr string
	var workers int
	var restoreRate float64
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster (3 nodes on loopback) until Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 7 {
				return usageErr("--nodes: %d is not between 1 and 7", nodes)
			}
			if workers < 0 || workers > 50 {
				return usageErr("--workers: %d is not between 0 and 50", workers)
			}
			if restoreRate <= 0 {
				return usageErr("--worker-restore-rate: %v is not positive", restoreRate)
			}
			if noKafka {
				kafkaAddr = ""
			}
			return runDev(dir, nodes, basePort, fresh, kafkaAddr, devWorkers{n: workers, restoreRate: restoreRate})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".xce-dev", "directory for the generated configs, data and logs")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes")
	cmd.Flags().IntVar(&basePort, "base-port", 7100, "client ports are base+i, peer ports base+100+i")
	cmd.Flags().BoolVar(&fresh, "fresh", false, "delete the directory's data first")
	cmd.Flags().StringVar(&kafkaAddr, "kafka-addr", "127.0.0.1:9092", "where the embedded Kafka broker (kafka-dev) listens")
	cmd.Flags().BoolVar(&noKafka, "no-kafka", false, "run without the embedded broker (publishing disabled)")
	cmd.Flags().IntVar(&workers, "workers", 3, "reference workers to run (w1, w2, …; capacity 1 each)")
	cmd.Flags().Float64Var(&restoreRate, "worker-restore-rate", 20000, "the reference workers' restore rate, records/s")
	return cmd
}

// devConfig writes node i's config for an n-node loopback cluster.
func devConfig(dir string, i, n, base int, kafkaAddr string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "node_id: n%d\ncluster_id: dev\ndata_dir: %s\n", i, filepath.Join(dir, "data", fmt.Sprintf("n%d", i)))
	fmt.Fprintf(&b, "client_addr: 127.0.0.1:%d\npeer_addr: 127.0.0.1:%d\npeers:\n", base+i, base+100+i)
	for j := 1; j <= n; j++ {
		fmt.Fprintf(&b, "  - {id: n%d, peer_addr: 127.0.0.1:%d, client_addr: 127.0.0.1:%d}\n", j, base+100+j, base+j)
	}
	if kafkaAddr != "" {
		fmt.Fprintf(&b, "kafka: {brokers: [%q]}\n", kafkaAddr)
	}
	b.WriteString("log: {level: info, format: json}\n")
	path := filepath.Join(dir, fmt.Sprintf("n%d.yaml", i))
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// devWorkers are the reference workers `xce dev` runs.
type devWorkers struct {
	n           int
	restoreRate float64
}

func runDev(dir string, n, base int, fresh bool, kafkaAddr string, workers devWorkers) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if fresh {
		for _, d := range []string{"data", "kafka"} {
			if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The children by kind, in stop order: workers first (they would only
	// complain about the servers going), then the servers, the broker
	// last, so the primary's publisher does not lose its broker mid-stop.
	const (
		kindWorker = iota
		kindServer
		kindKafka
		kinds
	)
	var procs [kinds][]*exec.Cmd
	var dones [kinds][]chan struct{}
	var addrs []string
	exited := make(chan string, n+workers.n+1)
	defer func() {
		for k := range kinds {
			stopProcs(procs[k], dones[k])
		}
		fmt.Println("dev cluster stopped")
	}()
	// start runs one child process with its output in logs/<name>.log.
	start := func(kind int, name string, args ...string) (string, *exec.Cmd, error) {
		logPath := filepath.Join(dir, "logs", name+".log")
		logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return "", nil, err
		}
		defer logf.Close()
		p := exec.Command(exe, args...)
		p.Stdout, p.Stderr = logf, logf
		if err := p.Start(); err != nil {
			return "", nil, fmt.Errorf("start %s: %w", name, err)
		}
		done := make(chan struct{})
		procs[kind], dones[kind] = append(procs[kind], p), append(dones[kind], done)
		go func() {
			_ = p.Wait()
			close(done)
			exited <- name
		}()
		return logPath, p, nil
	}
	if kafkaAddr != "" {
		logPath, p, err := start(kindKafka, "kafka", "kafka-dev", "--addr", kafkaAddr, "--data-dir", filepath.Join(dir, "kafka"))
		if err != nil {
			return err
		}
		if err := waitListening(kafkaAddr, 10*time.Second); err != nil {
			return fmt.Errorf("kafka-dev: %w; see %s", err, logPath)
		}
		fmt.Printf("kafka  %s  (kfake, log in %s)  log %s  pid %d\n", kafkaAddr, filepath.Join(dir, "kafka"), logPath, p.Process.Pid)
	}
	for i := 1; i <= n; i++ {
		cfg, err := devConfig(dir, i, n, base, kafkaAddr)
		if err != nil {
			return err
		}
		logPath, p, err := start(kindServer, fmt.Sprintf("n%d", i), "server", "--config", cfg)
		if err != nil {
			return err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", base+i)
		addrs = append(addrs, addr)
		fmt.Printf("n%d  api http://%s  peer 127.0.0.1:%d  config %s  log %s  pid %d\n", i, addr, base+100+i, cfg, logPath, p.Process.Pid)
	}
	all := strings.Join(addrs, ",")
	if workers.n > 0 {
		fmt.Println()
	}
	for i := 1; i <= workers.n; i++ {
		id := fmt.Sprintf("w%d", i)
		logPath, p, err := start(kindWorker, id, "worker", "--id", id, "--controllers", all, "--capacity", "1",
			"--restore-rate", strconv.FormatFloat(workers.restoreRate, 'g', -1, 64), "--log-format", "json")
		if err != nil {
			return err
		}
		fmt.Printf("%s  worker, capacity 1, restore rate %g/s  log %s  pid %d\n", id, workers.restoreRate, logPath, p.Process.Pid)
	}
	fmt.Printf("\ntry:  xce status --addr %s\n      xce submit my-task --addr %s\n      curl -s -H 'Content-Type: application/json' -d '{\"taskId\":\"t1\"}' http://%s/xce.v1.ControllerService/SubmitTask\n",
		addrs[0], all, addrs[0])
	if workers.n > 0 {
		fmt.Printf("      xce submit my-stateful-task --stateful --addr %s\n      xce workers --addr %s\n      xce assignment --addr %s\n", all, all, all)
	}
	if kafkaAddr != "" {
		fmt.Printf("      xce events tail --brokers %s --from-start\n", kafkaAddr)
	}
	fmt.Println("Ctrl-C stops the cluster.")

	select {
	case <-ctx.Done():
		return nil
	case name := <-exited:
		// Ctrl-C in a terminal signals the children too: one may exit
		// before this process has seen its own signal.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
		return fmt.Errorf("%s exited; see %s", name, filepath.Join(dir, "logs", name+".log"))
	}
}

// waitListening polls until addr accepts TCP connections.
func waitListening(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopProcs sends SIGTERM to every process, then waits for each, killing
// one that takes longer than 10 s.
func stopProcs(ps []*exec.Cmd, dones []chan struct{}) {
	for _, p := range ps {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	for i, p := range ps {
		select {
		case <-dones[i]:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-dones[i]
		}
	}
}
