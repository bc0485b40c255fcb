package main

import (
	"context"
	"fmt"
	"io"
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
	var o devOptions
	var noKafka bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster (3 nodes on loopback, or --nodes 1, 5, 7) until Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.nodes < 1 || o.nodes > 7 || o.nodes%2 == 0 {
				// An even count tolerates no more failures than the odd
				// count below it and needs one more node for a quorum.
				return usageErr("--nodes: %d is not 1, 3, 5 or 7", o.nodes)
			}
			if o.workers.n < 0 || o.workers.n > 50 {
				return usageErr("--workers: %d is not between 0 and 50", o.workers.n)
			}
			if o.workers.restoreRate <= 0 {
				return usageErr("--worker-restore-rate: %v is not positive", o.workers.restoreRate)
			}
			if o.restartAfter < 0 {
				return usageErr("--restart-after: %v is negative", o.restartAfter)
			}
			if noKafka {
				o.kafkaAddr = ""
			}
			return runDev(o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.dir, "dir", ".xce-dev", "directory for the generated configs, data and logs")
	fl.IntVar(&o.nodes, "nodes", 3, "number of nodes: 1, 3, 5 or 7")
	fl.IntVar(&o.basePort, "base-port", 7100, "client ports are base+i, peer ports base+100+i")
	fl.BoolVar(&o.fresh, "fresh", false, "delete the directory's data first")
	fl.StringVar(&o.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "where the embedded Kafka broker (kafka-dev) listens")
	fl.BoolVar(&noKafka, "no-kafka", false, "run without the embedded broker (publishing disabled)")
	fl.IntVar(&o.workers.n, "workers", 3, "workers to run (w1, w2, …; capacity 1 each): Kafka-backed ones on input-0 … input-5 with Kafka, simulators with --no-kafka")
	fl.Float64Var(&o.workers.restoreRate, "worker-restore-rate", 20000, "the reference workers' restore rate, records/s")
	fl.BoolVar(&o.secure, "tls", false, "TLS on every port with certificates from a CA in <dir>/tls, workers by their certificates, the broker with SASL, the CLI examples with an admin token")
	fl.DurationVar(&o.restartAfter, "restart-after", 5*time.Second, "start a node, worker or the broker that exited again after this long (0: never)")
	return cmd
}

// devOptions are the flags of `xce dev`.
type devOptions struct {
	dir             string
	nodes, basePort int
	fresh, secure   bool
	kafkaAddr       string // "": no broker
	workers         devWorkers
	restartAfter    time.Duration
}

// devWorkers are the reference workers `xce dev` runs.
type devWorkers struct {
	n           int
	restoreRate float64
}

// ids are the workers' ids, w1 … wn.
func (w devWorkers) ids() []string {
	var ids []string
	for i := 1; i <= w.n; i++ {
		ids = append(ids, fmt.Sprintf("w%d", i))
	}
	return ids
}

// The dev cluster's worker sessions are short, so that a killed worker's
// tasks move within seconds.
const (
	devSessionTimeout    = 3 * time.Second
	devHeartbeatInterval = 300 * time.Millisecond
)

// devRun is one run of `xce dev`: the cluster's layout, and the supervisor
// that owns its children.
type devRun struct {
	devOptions
	exe, logDir string
	cluster     *localcluster.Cluster
	sup         *supervisor
	out         io.Writer
}

// runDev runs the dev cluster until Ctrl-C (SIGINT or SIGTERM), then
// stops all of it.
func runDev(o devOptions) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if o.fresh {
		// The workers' stores go with the broker's log they were read from.
		for _, d := range []string{"data", "kafka", "stores"} {
			if err := os.RemoveAll(filepath.Join(o.dir, d)); err != nil {
				return err
			}
		}
	}
	d := &devRun{devOptions: o, exe: exe, logDir: filepath.Join(o.dir, "logs"), out: os.Stdout}
	if d.cluster, err = d.newCluster(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d.sup = newSupervisor(ctx, d.out, restartPolicy{after: o.restartAfter})
	defer func() {
		d.sup.Stop(devStopGrace)
		fmt.Fprintln(d.out, "dev cluster stopped")
	}()
	if err := d.start(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// newCluster lays out the servers. With --tls, the CA, certificates, admin
// token and the broker's credentials in <dir>/tls are made once and kept
// across runs.
func (d *devRun) newCluster() (*localcluster.Cluster, error) {
	return localcluster.New(localcluster.Options{
		Exe: d.exe, Dir: d.dir, LogDir: d.logDir, N: d.nodes, ClusterID: "dev", BasePort: d.basePort,
		Secure: d.secure, SecureKafka: d.kafkaAddr != "", Workers: d.workers.ids(),
		Configure: d.configure,
	})
}

// configure adds to every node's config the short worker sessions, and
// with Kafka the broker and a standby for each Kafka worker's task.
func (d *devRun) configure(c *configs.Config) {
	c.Assignor.SessionTimeout = configs.Duration{Duration: devSessionTimeout}
	c.Assignor.HeartbeatInterval = configs.Duration{Duration: devHeartbeatInterval}
	if d.kafkaAddr != "" {
		c.Kafka.Brokers = []string{d.kafkaAddr}
		if d.workers.n > 1 {
			// Placement takes the cluster-wide count.
			c.Assignor.NumStandbyReplicas = 1
		}
	}
}

// kv reports whether the workers are the Kafka-backed ones
// (docs/operations.md).
func (d *devRun) kv() bool { return d.kafkaAddr != "" && d.workers.n > 0 }

func (d *devRun) logPath(name string) string { return filepath.Join(d.logDir, name+".log") }

// start starts the broker, the servers, the Kafka workers' topics, tasks
// and input, and the workers, and prints what to try.
func (d *devRun) start(ctx context.Context) error {
	if d.kafkaAddr != "" {
		if err := d.startBroker(ctx); err != nil {
			return err
		}
	}
	if err := d.startServers(); err != nil {
		return err
	}
	if err := waitElected(ctx, d.out, d.cluster); err != nil && ctx.Err() == nil {
		// The cluster keeps running: the logs and `xce status` say why.
		fmt.Fprintf(d.out, "\nwarning: %v; see the logs in %s\n", err, d.logDir)
	}
	if d.workers.n > 0 {
		fmt.Fprintln(d.out)
	}
	if d.kv() {
		if err := d.startKV(ctx); err != nil {
			return err
		}
	}
	if err := d.startWorkers(); err != nil {
		return err
	}
	d.printTry()
	return nil
}

// startProcess runs `xce args…` as the child name, its output appended to
// logs/<name>.log, kept running by the supervisor.
func (d *devRun) startProcess(stage devStage, name string, args ...string) (*procChild, error) {
	logPath := d.logPath(name)
	c := &procChild{run: func() (*localcluster.Process, error) {
		p, err := localcluster.StartProcess(d.exe, logPath, false, args...)
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
		return p, nil
	}}
	return c, d.sup.add(stage, name, logPath, c)
}

// startBroker starts kafka-dev and waits until it listens. With --tls it
// serves TLS and requires SASL.
func (d *devRun) startBroker(ctx context.Context) error {
	dataDir := filepath.Join(d.dir, "kafka")
	args := []string{"kafka-dev", "--addr", d.kafkaAddr, "--data-dir", dataDir}
	secured := ""
	if b := d.cluster.KafkaBroker(); b.CertFile != "" {
		args = append(args, "--tls-cert-file", b.CertFile, "--tls-key-file", b.KeyFile,
			"--sasl-user", b.User, "--sasl-password-file", b.PasswordFile)
		secured = fmt.Sprintf("TLS and SASL as %s, ", b.User)
	}
	c, err := d.startProcess(stageBroker, "kafka", args...)
	if err != nil {
		return err
	}
	if err := waitListening(ctx, d.kafkaAddr, 10*time.Second); err != nil {
		return fmt.Errorf("kafka-dev: %w; see %s", err, d.logPath("kafka"))
	}
	fmt.Fprintf(d.out, "kafka  %s  (kfake, %slog in %s)  log %s  pid %d\n", d.kafkaAddr, secured, dataDir, d.logPath("kafka"), c.pid())
	return nil
}

// startServers starts every node; a restart is the launcher's next run of
// the node, on its data dir, appending to its log.
func (d *devRun) startServers() error {
	scheme := "http://"
	if d.secure {
		scheme = "https://"
	}
	for i, nd := range d.cluster.Nodes {
		c := &procChild{run: func() (*localcluster.Process, error) {
			if err := d.cluster.Start(i); err != nil {
				return nil, err
			}
			return d.cluster.Process(i), nil
		}}
		if err := d.sup.add(stageServers, nd.ID, nd.LogPath, c); err != nil {
			return err
		}
		fmt.Fprintf(d.out, "%s  api %s%s  peer %s  config %s  log %s  pid %d\n", nd.ID, scheme, nd.ClientAddr, nd.PeerAddr, nd.ConfigPath, nd.LogPath, c.pid())
	}
	return nil
}

// startWorkers starts the workers: Kafka-backed ones with Kafka, else
// simulators.
// devDrainTimeout is the dev workers' --drain-timeout.
const devDrainTimeout = 2 * time.Second

func (d *devRun) startWorkers() error {
	all := strings.Join(d.cluster.ClientAddrs(), ",")
	for _, id := range d.workers.ids() {
		// A short drain: Ctrl-C stops every worker at once, and with
		// nowhere to hand their actives to they would wait it out.
		args := []string{"worker", "--id", id, "--controllers", all, "--capacity", "1",
			"--restore-rate", strconv.FormatFloat(d.workers.restoreRate, 'g', -1, 64), "--log-format", "json",
			"--drain-timeout", devDrainTimeout.String()}
		store := filepath.Join(d.dir, "stores", id)
		if d.kv() {
			args = append(args, "--store", store, "--brokers", d.kafkaAddr)
			args = append(args, kafkaSecurityArgs(d.cluster.KafkaSecurity())...)
		}
		if d.secure {
			w := d.cluster.WorkerCredentials(id)
			args = append(args, "--ca-file", w.CAFile, "--cert-file", w.CertFile, "--key-file", w.KeyFile)
		}
		c, err := d.startProcess(stageWorkers, id, args...)
		if err != nil {
			return err
		}
		if d.kv() {
			fmt.Fprintf(d.out, "%s  kafka worker, capacity 1, store %s  log %s  pid %d\n", id, store, d.logPath(id), c.pid())
			continue
		}
		fmt.Fprintf(d.out, "%s  worker, capacity 1, restore rate %g/s  log %s  pid %d\n", id, d.workers.restoreRate, d.logPath(id), c.pid())
	}
	return nil
}

// printTry prints commands that work at once against the dev cluster;
// secrets stay in their files, which the commands read.
func (d *devRun) printTry() {
	addrs := d.cluster.ClientAddrs()
	all := strings.Join(addrs, ",")
	scheme, curl := "http://", "curl -s"
	fmt.Fprintln(d.out)
	if d.secure {
		tokenFile := d.cluster.TokenFile()
		scheme = "https://"
		fmt.Fprintf(d.out, "with TLS and an admin token (the token is in %s):\n", tokenFile)
		fmt.Fprintf(d.out, "      export XCE_CA_FILE=%s XCE_TOKEN=$(cat %s)\n", d.cluster.Credentials().CAFile, tokenFile)
		curl = `curl -s --cacert "$XCE_CA_FILE" -H "Authorization: Bearer $XCE_TOKEN"`
	}
	fmt.Fprintf(d.out, "try:  xce status --addr %s\n      xce submit my-task --addr %s\n      %s -H 'Content-Type: application/json' -d '{\"taskId\":\"t1\"}' %s%s/xce.v1.ControllerService/SubmitTask\n",
		addrs[0], all, curl, scheme, addrs[0])
	fmt.Fprintf(d.out, "      xce members list --addr %s\n      xce leader transfer --addr %s\n", all, all)
	if d.workers.n > 0 {
		fmt.Fprintf(d.out, "      xce submit my-stateful-task --stateful --addr %s\n      xce workers --addr %s\n      xce assignment --addr %s\n", all, all, all)
		fmt.Fprintf(d.out, "      xce workers drain w1 --addr %s   (its actives move away; undrain to give them back)\n", all)
	}
	if d.kafkaAddr != "" {
		tail := append([]string{"xce events tail --brokers", d.kafkaAddr, "--from-start"}, kafkaSecurityArgs(d.cluster.KafkaSecurity())...)
		fmt.Fprintf(d.out, "      %s\n", strings.Join(tail, " "))
	}
	if d.kv() {
		fmt.Fprintf(d.out, "tasks %s0 … %s%d read %s (%d records/s from a generator) into %s and %s\n",
			kvworker.TaskPrefix, kvworker.TaskPrefix, devKVTasks-1, kvworker.DefaultInputTopic, devInputRate,
			kvworker.DefaultChangelogTopic, kvworker.DefaultOutputTopic)
	}
	fmt.Fprintf(d.out, "A node, worker or the broker that exits is reported and %s. Ctrl-C stops the cluster.\n", d.restartText())
}

// restartText says what happens to a child that exits.
func (d *devRun) restartText() string {
	if d.restartAfter == 0 {
		return "not started again (--restart-after 0)"
	}
	return fmt.Sprintf("started again after %v", d.restartAfter)
}

// devElectTimeout bounds the wait for the dev cluster's first election.
const devElectTimeout = 30 * time.Second

// waitElected waits until one node is PRIMARY with write quorum and every
// other is STANDBY, and says which; the examples printed after it then
// work at once.
func waitElected(ctx context.Context, out io.Writer, cluster *localcluster.Cluster) error {
	cl, err := client.New(cluster.ClientAddrs(), client.Options{Credentials: cluster.Credentials()})
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
	fmt.Fprintf(out, "\n%s is PRIMARY, %d STANDBY\n", cluster.Nodes[p].ID, cluster.N()-1)
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
