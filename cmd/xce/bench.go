package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"

	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/client"
)

type benchFlags struct {
	addr        string
	local       int
	clients     int
	duration    time.Duration
	ops         int64
	reads       float64
	killPrimary int
	profile     string
	json        bool
	keep        bool
	history     string
	cpuprofile  string
	nice        int
}

// benchJSON is `xce bench --json`.
type benchJSON struct {
	Clients         int                `json:"clients"`
	Nodes           int                `json:"nodes,omitempty"`
	Profile         string             `json:"profile,omitempty"`
	DurationS       float64            `json:"duration_s"`
	Ops             int64              `json:"ops"`
	OpsPerSec       float64            `json:"ops_per_sec"`
	Errors          int64              `json:"errors"`
	NotReadyRetries int64              `json:"not_ready_retries"`
	LatencyMs       map[string]float64 `json:"latency_ms"`
	FsyncP50Ms      float64            `json:"fsync_p50_ms"`
	// TermStart and TermEnd bracket the run: without kills, any growth is
	// a spurious election.
	TermStart    uint64    `json:"term_start"`
	TermEnd      uint64    `json:"term_end"`
	FailoversMs  []float64 `json:"failovers_ms,omitempty"`
	Linearizable bool      `json:"linearizable"`
	CheckResult  string    `json:"check_result"`
	Acked        int       `json:"acked"`
	Lost         int       `json:"lost"`
	Duplicates   int       `json:"duplicates"`
	HistoryFile  string    `json:"history_file,omitempty"`
	Dir          string    `json:"dir,omitempty"`
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Drive a cluster with concurrent clients; optionally SIGKILL the primary and check the history",
		Long: `Drive a cluster (--addr, or --local N to start N child server processes in a temp
dir) with concurrent clients doing SubmitTask (and with --reads, linearizable
GetTask). Prints throughput and latency; with --kill-primary K (needs --local),
SIGKILLs the current primary K times, restarting each killed node before the
next kill, and reports the client-visible failover of each. At the end the whole
history is checked: linearizable (porcupine), every acknowledged submit present,
none applied twice. A violation exits 1 and keeps the history visualisation.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd.OutOrStdout(), cmd.ErrOrStderr(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "addr", "", "comma-separated client addresses of a running cluster")
	fl.IntVar(&f.local, "local", 0, "start a local cluster of this many nodes")
	fl.IntVar(&f.clients, "clients", 16, "concurrent clients")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "how long to run")
	fl.Int64Var(&f.ops, "ops", 0, "stop after this many calls (0: run for --duration)")
	fl.Float64Var(&f.reads, "reads", 0, "fraction of calls that are linearizable reads")
	fl.IntVar(&f.killPrimary, "kill-primary", 0, "SIGKILL the primary this many times (with --local)")
	fl.StringVar(&f.profile, "profile", "default", "raft timings of a --local cluster: default or fast")
	fl.BoolVar(&f.json, "json", false, "print one JSON object")
	fl.BoolVar(&f.keep, "keep", false, "keep the local cluster's directory")
	fl.StringVar(&f.cpuprofile, "cpuprofile", "", "write the load generator's own CPU profile here")
	fl.IntVar(&f.nice, "nice", 0, "run the load generator at this nice level (0-19) so that it yields the CPU to servers on the same machine")
	fl.StringVar(&f.history, "history", "", "where to write the history visualisation on a violation (default: in the run's directory)")
	return cmd
}

func runBench(stdout, stderr io.Writer, f benchFlags) error {
	switch {
	case f.clients <= 0:
		return usageErr("--clients must be positive")
	case f.reads < 0 || f.reads > 1:
		return usageErr("--reads must be between 0 and 1")
	case (f.addr == "") == (f.local == 0):
		return usageErr("give exactly one of --addr and --local")
	case f.killPrimary > 0 && f.local == 0:
		return usageErr("--kill-primary needs --local")
	case f.local < 0 || f.local > 7:
		return usageErr("--local must be between 1 and 7")
	case f.killPrimary > 0 && f.local < 3:
		return usageErr("--kill-primary needs --local 3 or more")
	case f.nice < 0 || f.nice > 19:
		return usageErr("--nice must be between 0 and 19")
	}
	prof, ok := bench.Profiles[f.profile]
	if !ok {
		return usageErr("--profile %q: want default or fast", f.profile)
	}
	dir, err := os.MkdirTemp("", "xce-bench-")
	if err != nil {
		return err
	}
	keep := f.keep
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	fsync, err := bench.FsyncLatency(dir, 200)
	if err != nil {
		return fmt.Errorf("measure fsync: %w", err)
	}
	fmt.Fprintf(stderr, "xce bench: %d clients, %v, reads %.2f; disk fsync p50 %.3f ms (bounds a write's latency)\n",
		f.clients, f.duration, f.reads, ms(fsync))

	ctl, err := client.New([]string{"127.0.0.1:1"}, client.Options{})
	if err != nil {
		return err
	}
	var cluster *bench.LocalCluster
	endpoints := strings.Split(f.addr, ",")
	if f.local > 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cluster, err = bench.StartLocal(exe, dir, f.local, prof)
		if err != nil {
			return err
		}
		defer cluster.Stop()
		endpoints = cluster.Client
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = cluster.WaitPrimary(wctx, ctl, f.local-1)
		cancel()
		if err != nil {
			keep = true
			return fmt.Errorf("local cluster did not elect: %w (logs in %s)", err, dir)
		}
		fmt.Fprintf(stderr, "local cluster of %d (%s timings) up in %s\n", f.local, prof.Name, dir)
	}

	// The servers are started: from here on the load generator may yield
	// the CPU to them. By default it does not, like etcd's benchmark tool,
	// so that figures compare.
	if f.nice > 0 {
		bench.Yield(f.nice)
	}

	// Ctrl-C or SIGTERM ends the run early; the deferred Stop still takes
	// the local cluster down rather than leaving its servers behind.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var hist bench.History
	load := bench.Load{
		Endpoints: endpoints, Clients: f.clients, Duration: f.duration, Ops: f.ops, Reads: f.reads,
		Progress: func(p bench.Progress) {
			fmt.Fprintf(stderr, "%6.1fs  ops %d  %.0f/s  retries %d  errors %d\n",
				p.Elapsed.Seconds(), p.Ops, float64(p.Ops)/p.Elapsed.Seconds(), p.Retries, p.Errors)
		},
	}
	termStart := maxTerm(ctx, ctl, endpoints)
	killErr := make(chan error, 1)
	var kills []time.Time
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if f.killPrimary > 0 {
		// The load runs for --duration and, should the kills take longer
		// (each waits for a caught-up cluster), until the last kill's
		// failover is behind it, so every kill gets its figure.
		killDone := make(chan struct{})
		go func() {
			defer close(killDone)
			killErr <- killLoop(ctx, stderr, cluster, ctl, f, &kills)
		}()
		if f.ops == 0 {
			load.Duration = 0
			go func() {
				select {
				case <-time.After(f.duration):
				case <-loadCtx.Done():
					return
				}
				select {
				case <-killDone:
				case <-loadCtx.Done():
				}
				stopLoad()
			}()
		}
	} else {
		killErr <- nil
	}
	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pf.Close()
	}
	res, err := bench.Run(loadCtx, load, &hist)
	if f.cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	if err := <-killErr; err != nil {
		keep = true
		return fmt.Errorf("kill loop: %w (logs in %s)", err, dir)
	}

	// The final state, read linearizably.
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	lc, err := client.New(endpoints, client.Options{})
	if err != nil {
		return err
	}
	tasks, err := lc.List(fctx, false)
	if err != nil {
		keep = true
		return fmt.Errorf("final read of every task: %w", err)
	}
	final := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		final[t.TaskId] = true
	}
	htmlPath := f.history
	if htmlPath == "" {
		htmlPath = filepath.Join(dir, "history.html")
	}
	ops := hist.Ops()
	verdict, err := bench.Check(ops, final, time.Minute, htmlPath)
	if err != nil {
		return err
	}
	out := benchJSON{
		Clients: f.clients, Nodes: f.local, DurationS: res.Elapsed.Seconds(), Ops: res.Ops,
		OpsPerSec: float64(res.Ops) / res.Elapsed.Seconds(), Errors: res.Errors, NotReadyRetries: res.Retries,
		LatencyMs: map[string]float64{
			"p50": ms(res.Percentile(50)), "p95": ms(res.Percentile(95)), "p99": ms(res.Percentile(99)), "max": ms(res.Percentile(100)),
		},
		FsyncP50Ms: ms(fsync), Linearizable: verdict.Linearizable, CheckResult: verdict.CheckResult,
		Acked: verdict.Acked, Lost: verdict.Lost, Duplicates: verdict.Duplicates, HistoryFile: verdict.HistoryFile,
	}
	out.TermStart, out.TermEnd = termStart, maxTerm(context.Background(), ctl, endpoints)
	if f.local > 0 {
		out.Profile = prof.Name
	}
	for _, k := range kills {
		if d, ok := bench.FailoverAfter(ops, k); ok {
			out.FailoversMs = append(out.FailoversMs, ms(d))
		} else {
			out.FailoversMs = append(out.FailoversMs, -1)
		}
	}
	if !verdict.OK() {
		keep = true
		out.Dir = dir
	}
	if f.json {
		if err := printJSON(stdout, out); err != nil {
			return err
		}
	} else {
		printBench(stdout, out)
	}
	if !verdict.OK() {
		return fmt.Errorf("history check failed: linearizable=%v (%s) lost=%d duplicates=%d; history in %s",
			verdict.Linearizable, verdict.CheckResult, verdict.Lost, verdict.Duplicates, dir)
	}
	return nil
}

// maxTerm is the highest term any endpoint reports.
func maxTerm(ctx context.Context, cl *client.Client, endpoints []string) uint64 {
	var t uint64
	for _, ep := range endpoints {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		if s, err := cl.Status(sctx, ep); err == nil {
			t = max(t, s.Term)
		}
		cancel()
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func printBench(w io.Writer, o benchJSON) {
	fmt.Fprintf(w, "clients %d  ops %d in %.1fs  %.0f ops/s  errors %d  not-ready retries %d\n",
		o.Clients, o.Ops, o.DurationS, o.OpsPerSec, o.Errors, o.NotReadyRetries)
	fmt.Fprintf(w, "latency ms  p50 %.2f  p95 %.2f  p99 %.2f  max %.2f   (fsync p50 %.3f)\n",
		o.LatencyMs["p50"], o.LatencyMs["p95"], o.LatencyMs["p99"], o.LatencyMs["max"], o.FsyncP50Ms)
	if len(o.FailoversMs) > 0 {
		fmt.Fprintf(w, "failovers ms %v\n", o.FailoversMs)
	}
	fmt.Fprintf(w, "terms %d -> %d\n", o.TermStart, o.TermEnd)
	fmt.Fprintf(w, "history: linearizable=%v (%s)  acked %d  lost %d  duplicates %d\n",
		o.Linearizable, o.CheckResult, o.Acked, o.Lost, o.Duplicates)
}

// killLoop SIGKILLs the primary f.killPrimary times, evenly over the run,
// restarting each killed node and waiting for a full, caught-up cluster
// before the next.
func killLoop(ctx context.Context, stderr io.Writer, c *bench.LocalCluster, ctl *client.Client, f benchFlags, kills *[]time.Time) error {
	interval := f.duration / time.Duration(f.killPrimary+1)
	start := time.Now()
	for k := 1; k <= f.killPrimary; k++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(time.Duration(k) * interval))):
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		p, err := c.WaitPrimary(wctx, ctl, c.N-1)
		var lag uint64
		if err == nil {
			lag, err = c.WaitCaughtUp(wctx, ctl, 5*time.Second)
		}
		cancel()
		if err != nil {
			return err
		}
		if lag > bench.MaxKillLag {
			fmt.Fprintf(stderr, "kill %d: a STANDBY still trails the PRIMARY by %d entries (the machine is saturated); this failover includes its catch-up\n", k, lag)
		}
		t := time.Now()
		c.Kill(p)
		*kills = append(*kills, t)
		wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		np, err := c.WaitPrimary(wctx, ctl, c.N-2)
		cancel()
		if err != nil {
			return fmt.Errorf("after killing n%d: %w", p+1, err)
		}
		fmt.Fprintf(stderr, "kill %d: SIGKILLed n%d; n%d PRIMARY after %v (status poll)\n", k, p+1, np+1, time.Since(t).Round(time.Millisecond))
		if err := c.Start(p); err != nil {
			return err
		}
		wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		_, err = c.WaitPrimary(wctx, ctl, c.N-1)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("after restarting n%d: %w", p+1, err)
		}
	}
	return nil
}
