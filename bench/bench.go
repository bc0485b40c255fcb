package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/localcluster"
)

// Options configure one `xce bench` run.
type Options struct {
	// Endpoints of a running cluster; or Local nodes of a cluster of Exe
	// started for the run, with the Profile's timings.
	Endpoints []string
	Local     int
	Exe       string
	Profile   Profile
	// Credentials reach the Endpoints; TLS runs the Local cluster with
	// TLS on every port and an admin token (localcluster.Options.Secure).
	Credentials client.Credentials
	TLS         bool

	Clients  int
	Duration time.Duration
	Ops      int64
	Reads    float64
	// Prefill tasks are created before the measured run by PrefillClients
	// concurrent submitters (DefaultPrefillClients when 0); see Prefill.
	Prefill        int
	PrefillClients int
	// KillPrimary SIGKILLs the primary of the local cluster this many
	// times, evenly over the run.
	KillPrimary int
	// Keep keeps the run's directory (it is kept anyway on a failure).
	Keep bool
	// HistoryPath is where the history visualisation goes on a violation
	// (default: in the run's directory).
	HistoryPath string
	// CPUProfile, when set, receives the load generator's own CPU profile.
	CPUProfile string
	// Restarts, with a Local cluster of 3 or more, measures after the run
	// what restarting nodes costs (see Restarts).
	Restarts bool
	// SnapshotAt, when set, has the PRIMARY take a raft snapshot this far
	// into the run (see SnapshotResult).
	SnapshotAt time.Duration
	// Nice, when set, lowers the load generator's priority once the
	// servers run (see Yield).
	Nice int
	// Log receives the progress lines.
	Log io.Writer
}

// Report is the outcome of a run; `xce bench --json` prints it.
type Report struct {
	Clients int `json:"clients"`
	// LocalNodes is the size of a --local cluster (JSON "nodes", as
	// before the per-node report, which is "node_stats").
	LocalNodes      int     `json:"nodes,omitempty"`
	Profile         string  `json:"profile,omitempty"`
	DurationS       float64 `json:"duration_s"`
	Ops             int64   `json:"ops"`
	OpsPerSec       float64 `json:"ops_per_sec"`
	Errors          int64   `json:"errors"`
	NotReadyRetries int64   `json:"not_ready_retries"`
	// WarmupS is what the clients took to find the PRIMARY and open their
	// connections before the run (not measured in it).
	WarmupS    float64            `json:"warmup_s"`
	LatencyMs  map[string]float64 `json:"latency_ms"`
	FsyncP50Ms float64            `json:"fsync_p50_ms"`
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
	// Prefill is the load before the run, when asked; Nodes are the
	// nodes' sizes after the run.
	Prefill   *PrefillResult `json:"prefill,omitempty"`
	NodeStats []NodeStats    `json:"node_stats,omitempty"`
	// Snapshot is the snapshot taken during the run, when asked.
	Snapshot *SnapshotResult `json:"snapshot,omitempty"`
	// Restarts are the restart measurements after the run, when asked.
	Restarts *Restarts `json:"restarts,omitempty"`

	violation bool
}

// Err is the history check's failure, nil when the history holds no
// violation.
func (r *Report) Err() error {
	var errs []error
	if r.violation {
		errs = append(errs, fmt.Errorf("history check failed: linearizable=%v (%s) lost=%d duplicates=%d; history in %s",
			r.Linearizable, r.CheckResult, r.Lost, r.Duplicates, r.Dir))
	}
	if r.Restarts != nil && r.Restarts.Lost() {
		errs = append(errs, fmt.Errorf("cold restart lost tasks: %d acknowledged before it, %d after; logs in %s",
			r.Restarts.TasksAcked, r.Restarts.TasksAfter, r.Dir))
	}
	return errors.Join(errs...)
}

// Bench runs one bench: it starts the local cluster (if any), drives the
// load (killing the primary as asked), reads the final state and checks
// the whole history. ctx ending stops the load early; the local cluster
// is stopped before Bench returns.
func Bench(ctx context.Context, o Options) (*Report, error) {
	switch {
	case o.Restarts && o.Local < 3:
		return nil, errors.New("restarts need a local cluster of 3 or more nodes")
	case o.SnapshotAt < 0:
		return nil, errors.New("the snapshot's time into the run must not be negative")
	}
	dir, err := os.MkdirTemp("", "xce-bench-")
	if err != nil {
		return nil, err
	}
	keep := o.Keep
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	fsync, err := FsyncLatency(dir, 200)
	if err != nil {
		return nil, fmt.Errorf("measure fsync: %w", err)
	}
	fmt.Fprintf(o.Log, "xce bench: %d clients, %v, reads %.2f; disk fsync p50 %.3f ms (bounds a write's latency)\n",
		o.Clients, o.Duration, o.Reads, ms(fsync))

	creds := o.Credentials
	var cluster *localcluster.Cluster
	endpoints := o.Endpoints
	if o.Local > 0 {
		cluster, err = startLocal(o.Exe, dir, o.Local, o.Profile, o.TLS)
		if err != nil {
			return nil, err
		}
		defer cluster.Stop(stopGrace)
		endpoints = cluster.ClientAddrs()
		if o.TLS {
			creds = cluster.Credentials()
		}
	}
	tlsCfg, err := creds.TLSConfig()
	if err != nil {
		return nil, err
	}
	copts := client.Options{TLS: tlsCfg, Credentials: creds}
	ctl, err := client.New([]string{"127.0.0.1:1"}, copts)
	if err != nil {
		return nil, err
	}
	if o.Local > 0 {
		wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err = cluster.WaitPrimary(wctx, ctl, o.Local-1)
		cancel()
		if err != nil {
			keep = true
			return nil, fmt.Errorf("local cluster did not elect: %w (logs in %s)", err, dir)
		}
		secure := ""
		if o.TLS {
			secure = ", TLS and tokens"
		}
		fmt.Fprintf(o.Log, "local cluster of %d (%s timings%s) up in %s\n", o.Local, o.Profile.Name, secure, dir)
	}

	// The servers are started: from here on the load generator may yield
	// the CPU to them. By default it does not, like etcd's benchmark tool,
	// so that figures compare.
	if o.Nice > 0 {
		Yield(o.Nice)
	}

	var dataDirs []string
	if cluster != nil {
		for _, n := range cluster.Nodes {
			dataDirs = append(dataDirs, n.DataDir)
		}
	}
	sizes := newScraper(tlsCfg, creds, ctl)
	defer sizes.close()
	var prefill *PrefillResult
	if o.Prefill > 0 {
		pc := o.PrefillClients
		if pc <= 0 {
			pc = DefaultPrefillClients
		}
		fmt.Fprintf(o.Log, "prefill: %d tasks, %d submitters\n", o.Prefill, pc)
		prefill, err = RunPrefill(ctx, Prefill{
			Endpoints: endpoints, TLS: tlsCfg, Credentials: creds, Tasks: o.Prefill, Clients: pc,
			Progress: func(p Progress) {
				fmt.Fprintf(o.Log, "%6.1fs  prefill %d/%d  %.0f/s  retries %d  errors %d\n",
					p.Elapsed.Seconds(), p.Ops, o.Prefill, float64(p.Ops)/p.Elapsed.Seconds(), p.Retries, p.Errors)
			},
		})
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted during the prefill, %d of %d tasks in: %w", prefill.Tasks, o.Prefill, ctx.Err())
		}
		fmt.Fprintf(o.Log, "prefill: %d tasks in %.1fs, %.0f/s\n", prefill.Tasks, prefill.Seconds, prefill.PerSecond)
		prefill.NodeStats = sizes.nodes(ctx, endpoints, dataDirs)
		PrintNodes(o.Log, prefill.NodeStats)
	}

	var hist History
	load := Load{
		Endpoints: endpoints, TLS: tlsCfg, Credentials: creds, Clients: o.Clients, Duration: o.Duration, Ops: o.Ops, Reads: o.Reads,
		Progress: func(p Progress) {
			fmt.Fprintf(o.Log, "%6.1fs  ops %d  %.0f/s  retries %d  errors %d\n",
				p.Elapsed.Seconds(), p.Ops, float64(p.Ops)/p.Elapsed.Seconds(), p.Retries, p.Errors)
		},
	}
	termStart := maxTerm(ctx, ctl, endpoints)
	killErr := make(chan error, 1)
	var kills []time.Time
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if o.KillPrimary > 0 {
		// The load runs for Duration and, should the kills take longer
		// (each waits for a caught-up cluster), until the last kill's
		// failover is behind it, so every kill gets its figure.
		killDone := make(chan struct{})
		go func() {
			defer close(killDone)
			killErr <- killLoop(ctx, o, cluster, ctl, &kills)
		}()
		if o.Ops == 0 {
			load.Duration = 0
			go func() {
				select {
				case <-time.After(o.Duration):
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
	if o.CPUProfile != "" {
		pf, err := os.Create(o.CPUProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			return nil, err
		}
		defer pf.Close()
	}
	snapDone := make(chan *SnapshotResult, 1)
	snapCtx, stopSnap := context.WithCancel(loadCtx)
	defer stopSnap()
	if o.SnapshotAt > 0 {
		sc, err := client.New(endpoints, copts)
		if err != nil {
			return nil, err
		}
		defer sc.Close()
		runStart := time.Now()
		go func() { snapDone <- takeSnapshot(snapCtx, sc, runStart, o.SnapshotAt) }()
	} else {
		snapDone <- nil
	}
	res, err := Run(loadCtx, load, &hist)
	if o.CPUProfile != "" {
		pprof.StopCPUProfile()
	}
	// A snapshot not yet due is not taken; one under way is waited for.
	stopSnap()
	snap := <-snapDone
	if err != nil {
		return nil, err
	}
	if err := <-killErr; err != nil {
		keep = true
		return nil, fmt.Errorf("kill loop: %w (logs in %s)", err, dir)
	}

	// The final state, read linearizably.
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	lc, err := client.New(endpoints, copts)
	if err != nil {
		return nil, err
	}
	tasks, err := lc.List(fctx, false)
	if err != nil {
		keep = true
		return nil, fmt.Errorf("final read of every task: %w", err)
	}
	final := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		final[t.TaskId] = true
	}
	htmlPath := o.HistoryPath
	if htmlPath == "" {
		htmlPath = filepath.Join(dir, "history.html")
	}
	ops := hist.Ops()
	verdict, err := Check(ops, final, time.Minute, htmlPath)
	if err != nil {
		return nil, err
	}
	out := &Report{
		Clients: o.Clients, LocalNodes: o.Local, DurationS: res.Elapsed.Seconds(), Ops: res.Ops,
		OpsPerSec: float64(res.Ops) / res.Elapsed.Seconds(), Errors: res.Errors, NotReadyRetries: res.Retries,
		WarmupS: res.Warmup.Seconds(),
		LatencyMs: map[string]float64{
			"p50": ms(res.Percentile(50)), "p95": ms(res.Percentile(95)), "p99": ms(res.Percentile(99)), "max": ms(res.Percentile(100)),
		},
		FsyncP50Ms: ms(fsync), Linearizable: verdict.Linearizable, CheckResult: verdict.CheckResult,
		Acked: verdict.Acked, Lost: verdict.Lost, Duplicates: verdict.Duplicates, HistoryFile: verdict.HistoryFile,
	}
	out.TermStart, out.TermEnd = termStart, maxTerm(context.Background(), ctl, endpoints)
	out.Prefill = prefill
	out.NodeStats = sizes.nodes(context.Background(), endpoints, dataDirs)
	if o.Local > 0 {
		out.Profile = o.Profile.Name
	}
	if snap != nil {
		if snap.Error == "" {
			snap.MaxLatencyMsAround = ms(MaxWriteLatency(ops, snap.start, snap.end))
		}
		snap.MaxLatencyMsRun = ms(MaxWriteLatency(ops, time.Time{}, time.Time{}))
		out.Snapshot = snap
	}
	for _, k := range kills {
		if d, ok := FailoverAfter(ops, k); ok {
			out.FailoversMs = append(out.FailoversMs, ms(d))
		} else {
			out.FailoversMs = append(out.FailoversMs, -1)
		}
	}
	if !verdict.OK() {
		keep = true
		out.Dir = dir
		out.violation = true
	}
	if o.Restarts {
		rs := &restarter{c: cluster, ctl: ctl, load: load, copts: copts, log: o.Log, sizes: sizes, dirs: dataDirs,
			before: uint64(verdict.Acked)}
		if prefill != nil {
			rs.before += uint64(prefill.Tasks)
		}
		r, err := rs.run(ctx)
		if err != nil {
			keep = true
			return nil, fmt.Errorf("restarts: %w (logs in %s)", err, dir)
		}
		out.Restarts = r
		if r.Lost() {
			keep = true
			out.Dir = dir
		}
	}
	return out, nil
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

// killLoop SIGKILLs the primary o.KillPrimary times, evenly over the run,
// restarting each killed node and waiting for a full, caught-up cluster
// before the next.
func killLoop(ctx context.Context, o Options, c *localcluster.Cluster, ctl *client.Client, kills *[]time.Time) error {
	interval := o.Duration / time.Duration(o.KillPrimary+1)
	start := time.Now()
	n := c.N()
	for k := 1; k <= o.KillPrimary; k++ {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(start.Add(time.Duration(k) * interval))):
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		p, err := c.WaitPrimary(wctx, ctl, n-1)
		var lag uint64
		if err == nil {
			lag, err = waitCaughtUp(wctx, c, ctl, 5*time.Second)
		}
		cancel()
		if err != nil {
			return err
		}
		if lag > MaxKillLag {
			fmt.Fprintf(o.Log, "kill %d: a STANDBY still trails the PRIMARY by %d entries (the machine is saturated); this failover includes its catch-up\n", k, lag)
		}
		t := time.Now()
		if _, err := c.Kill(p); err != nil {
			return err
		}
		*kills = append(*kills, t)
		wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		np, err := c.WaitPrimary(wctx, ctl, n-2)
		cancel()
		if err != nil {
			return fmt.Errorf("after killing n%d: %w", p+1, err)
		}
		fmt.Fprintf(o.Log, "kill %d: SIGKILLed n%d; n%d PRIMARY after %v (status poll)\n", k, p+1, np+1, time.Since(t).Round(time.Millisecond))
		if err := c.Start(p); err != nil {
			return err
		}
		wctx, cancel = context.WithTimeout(ctx, 15*time.Second)
		_, err = c.WaitPrimary(wctx, ctl, n-1)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("after restarting n%d: %w", p+1, err)
		}
	}
	return nil
}
