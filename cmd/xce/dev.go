package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/backoff"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/worker/kvworker"
)

func devCmd() *cobra.Command {
	var dir string
	var nodes, basePort int
	var fresh, noKafka, secure bool
	var kafkaAddr string
	var workers int
	var restoreRate float64
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster (3 nodes on loopback, or --nodes 1, 5, 7) until Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if nodes < 1 || nodes > 7 || nodes%2 == 0 {
				// An even count tolerates no more failures than the odd
				// count below it and needs one more node for a quorum.
				return usageErr("--nodes: %d is not 1, 3, 5 or 7", nodes)
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
			return runDev(dir, nodes, basePort, fresh, secure, kafkaAddr, devWorkers{n: workers, restoreRate: restoreRate})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".xce-dev", "directory for the generated configs, data and logs")
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of nodes: 1, 3, 5 or 7")
	cmd.Flags().IntVar(&basePort, "base-port", 7100, "client ports are base+i, peer ports base+100+i")
	cmd.Flags().BoolVar(&fresh, "fresh", false, "delete the directory's data first")
	cmd.Flags().StringVar(&kafkaAddr, "kafka-addr", "127.0.0.1:9092", "where the embedded Kafka broker (kafka-dev) listens")
	cmd.Flags().BoolVar(&noKafka, "no-kafka", false, "run without the embedded broker (publishing disabled)")
	cmd.Flags().IntVar(&workers, "workers", 3, "workers to run (w1, w2, …; capacity 1 each): Kafka-backed ones on input-0 … input-5 with Kafka, simulators with --no-kafka")
	cmd.Flags().Float64Var(&restoreRate, "worker-restore-rate", 20000, "the reference workers' restore rate, records/s")
	cmd.Flags().BoolVar(&secure, "tls", false, "TLS on every port with certificates from a CA in <dir>/tls, workers by their certificates, the CLI examples with an admin token")
	return cmd
}

// devWorkers are the reference workers `xce dev` runs.
type devWorkers struct {
	n           int
	restoreRate float64
}

func runDev(dir string, n, base int, fresh, secure bool, kafkaAddr string, workers devWorkers) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if fresh {
		// The workers' stores go with the broker's log they were read from.
		for _, d := range []string{"data", "kafka", "stores"} {
			if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
				return err
			}
		}
	}
	logDir := filepath.Join(dir, "logs")
	var workerIDs []string
	for i := 1; i <= workers.n; i++ {
		workerIDs = append(workerIDs, fmt.Sprintf("w%d", i))
	}
	// Secure: the CA, certificates and admin token in <dir>/tls are made
	// once and kept across runs.
	cluster, err := localcluster.New(localcluster.Options{
		Exe: exe, Dir: dir, LogDir: logDir, N: n, ClusterID: "dev", BasePort: base,
		Secure: secure, Workers: workerIDs,
		Configure: func(c *configs.Config) {
			if kafkaAddr != "" {
				c.Kafka.Brokers = []string{kafkaAddr}
				if workers.n > 1 {
					// The Kafka workers' tasks have a standby each
					// (placement takes the cluster-wide count).
					c.Assignor.NumStandbyReplicas = 1
				}
			}
		},
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The children in stop order: workers first (they would only complain
	// about the servers going), then the servers, the broker last, so the
	// primary's publisher does not lose its broker mid-stop.
	var workerProcs, kafkaProcs []*localcluster.Process
	exited := make(chan string, n+workers.n+1)
	quit := make(chan struct{})
	defer func() {
		close(quit)
		localcluster.StopAll(devStopGrace, workerProcs...)
		cluster.Stop(devStopGrace)
		localcluster.StopAll(devStopGrace, kafkaProcs...)
		fmt.Println("dev cluster stopped")
	}()
	// watch reports the child's exit on exited, until runDev returns.
	watch := func(name string, p *localcluster.Process) {
		go func() {
			select {
			case <-p.Done():
				exited <- name
			case <-quit:
			}
		}()
	}
	// start runs one child process with its output in logs/<name>.log.
	start := func(name string, args ...string) (string, *localcluster.Process, error) {
		logPath := filepath.Join(logDir, name+".log")
		p, err := localcluster.StartProcess(exe, logPath, false, args...)
		if err != nil {
			return "", nil, fmt.Errorf("start %s: %w", name, err)
		}
		watch(name, p)
		return logPath, p, nil
	}
	if kafkaAddr != "" {
		logPath, p, err := start("kafka", "kafka-dev", "--addr", kafkaAddr, "--data-dir", filepath.Join(dir, "kafka"))
		if err != nil {
			return err
		}
		kafkaProcs = append(kafkaProcs, p)
		if err := waitListening(ctx, kafkaAddr, 10*time.Second); err != nil {
			return fmt.Errorf("kafka-dev: %w; see %s", err, logPath)
		}
		fmt.Printf("kafka  %s  (kfake, log in %s)  log %s  pid %d\n", kafkaAddr, filepath.Join(dir, "kafka"), logPath, p.Pid())
	}
	scheme := "http://"
	if secure {
		scheme = "https://"
	}
	for i, nd := range cluster.Nodes {
		if err := cluster.Start(i); err != nil {
			return err
		}
		watch(nd.ID, cluster.Process(i))
		fmt.Printf("%s  api %s%s  peer %s  config %s  log %s  pid %d\n", nd.ID, scheme, nd.ClientAddr, nd.PeerAddr, nd.ConfigPath, nd.LogPath, cluster.Pid(i))
	}
	addrs := cluster.ClientAddrs()
	all := strings.Join(addrs, ",")
	if err := waitElected(ctx, cluster, secure); err != nil && ctx.Err() == nil {
		// The cluster keeps running: the logs and `xce status` say why.
		fmt.Printf("\nwarning: %v; see the logs in %s\n", err, logDir)
	}
	if workers.n > 0 {
		fmt.Println()
	}
	// With Kafka, the workers are the Kafka-backed ones (docs/operations.md).
	kv := kafkaAddr != "" && workers.n > 0
	if kv {
		stopInput, err := startDevKV(ctx, cluster, secure, kafkaAddr)
		if err != nil {
			return err
		}
		defer stopInput()
	}
	for _, id := range workerIDs {
		args := []string{"worker", "--id", id, "--controllers", all, "--capacity", "1",
			"--restore-rate", strconv.FormatFloat(workers.restoreRate, 'g', -1, 64), "--log-format", "json"}
		if kv {
			args = append(args, "--store", filepath.Join(dir, "stores", id), "--brokers", kafkaAddr)
		}
		if secure {
			w := cluster.WorkerCredentials(id)
			args = append(args, "--ca-file", w.CAFile, "--cert-file", w.CertFile, "--key-file", w.KeyFile)
		}
		logPath, p, err := start(id, args...)
		if err != nil {
			return err
		}
		workerProcs = append(workerProcs, p)
		if kv {
			fmt.Printf("%s  kafka worker, capacity 1, store %s  log %s  pid %d\n", id, filepath.Join(dir, "stores", id), logPath, p.Pid())
			continue
		}
		fmt.Printf("%s  worker, capacity 1, restore rate %g/s  log %s  pid %d\n", id, workers.restoreRate, logPath, p.Pid())
	}
	fmt.Println()
	curl := "curl -s"
	if secure {
		// The token stays in its file: the examples read it from there.
		tokenFile := cluster.TokenFile()
		fmt.Printf("with TLS and an admin token (the token is in %s):\n", tokenFile)
		fmt.Printf("      export XCE_CA_FILE=%s XCE_TOKEN=$(cat %s)\n", cluster.Credentials().CAFile, tokenFile)
		curl = `curl -s --cacert "$XCE_CA_FILE" -H "Authorization: Bearer $XCE_TOKEN"`
	}
	fmt.Printf("try:  xce status --addr %s\n      xce submit my-task --addr %s\n      %s -H 'Content-Type: application/json' -d '{\"taskId\":\"t1\"}' %s%s/xce.v1.ControllerService/SubmitTask\n",
		addrs[0], all, curl, scheme, addrs[0])
	fmt.Printf("      xce members list --addr %s\n      xce leader transfer --addr %s\n", all, all)
	if workers.n > 0 {
		fmt.Printf("      xce submit my-stateful-task --stateful --addr %s\n      xce workers --addr %s\n      xce assignment --addr %s\n", all, all, all)
	}
	if kafkaAddr != "" {
		fmt.Printf("      xce events tail --brokers %s --from-start\n", kafkaAddr)
	}
	if kv {
		fmt.Printf("tasks %s0 … %s%d read %s (%d records/s from a generator) into %s and %s\n",
			kvworker.TaskPrefix, kvworker.TaskPrefix, devKVTasks-1, kvworker.DefaultInputTopic, devInputRate,
			kvworker.DefaultChangelogTopic, kvworker.DefaultOutputTopic)
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
		return fmt.Errorf("%s exited; see %s", name, filepath.Join(logDir, name+".log"))
	}
}

// devElectTimeout bounds the wait for the dev cluster's first election.
const devElectTimeout = 30 * time.Second

// waitElected waits until one node is PRIMARY with write quorum and every
// other is STANDBY, and says which; the examples printed after it then
// work at once.
func waitElected(ctx context.Context, cluster *localcluster.Cluster, secure bool) error {
	var creds client.Credentials
	if secure {
		creds = cluster.Credentials()
	}
	cl, err := client.New(cluster.ClientAddrs(), client.Options{Credentials: creds})
	if err != nil {
		return err
	}
	defer cl.CloseIdleConnections()
	wctx, cancel := context.WithTimeout(ctx, devElectTimeout)
	defer cancel()
	p, err := cluster.WaitPrimary(wctx, cl, cluster.N()-1)
	if err != nil {
		return fmt.Errorf("the cluster did not elect within %v: %w", devElectTimeout, err)
	}
	fmt.Printf("\n%s is PRIMARY, %d STANDBY\n", cluster.Nodes[p].ID, cluster.N()-1)
	return nil
}

// devStopGrace is how long a child may take to stop on SIGTERM.
const devStopGrace = 10 * time.Second

// waitListening polls until addr accepts TCP connections, for at most d.
func waitListening(ctx context.Context, addr string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	b := backoff.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if !b.Wait(ctx) {
			return err
		}
	}
}
