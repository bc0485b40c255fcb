package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
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
	// Rate, when set, paces the calls of all clients to this many a second.
	Rate float64
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
	// RestartRounds is how many times the restarts are measured (0 or 1:
	// once).
	RestartRounds int
	// FollowerTerm stops the STANDBY of the restarts' catch-up with a
	// SIGTERM, waiting for it to exit, instead of a SIGKILL.
	FollowerTerm bool
	// SnapshotAt, when set, has the PRIMARY take a raft snapshot this far
	// into the run (see SnapshotResult).
	SnapshotAt time.Duration
	// Nice, when set, lowers the load generator's priority once the
	// servers run (see Yield).
	Nice int
	// Watchers, when set, opens that many assignment watches (STALE,
	// spread over the endpoints) before the run and measures how long
	// after its commit each generation reaches them (WatchResult).
	Watchers int
	// Workers starts that many in-process synthetic workers before the
	// run, so that its tasks get placed and each plan makes a generation
	// (DefaultWatchWorkers with Watchers when 0).
	Workers int
	// Log receives the progress lines.
	Log io.Writer
}

// Report is the outcome of a run; `xce bench --json` prints it.
type Report struct {
	Clients int `json:"clients"`
	// LocalNodes is the size of a --local cluster (JSON "nodes", as
	// before the per-node report, which is "node_stats").
	LocalNodes int     `json:"nodes,omitempty"`
	Profile    string  `json:"profile,omitempty"`
	DurationS  float64 `json:"duration_s"`
	Ops        int64   `json:"ops"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	// Writes (SubmitTask) and reads (GetTask, with Reads above 0) apart:
	// calls per second and the answered calls' latencies.
	WritesPerSec    float64            `json:"writes_per_sec"`
	WriteLatencyMs  map[string]float64 `json:"write_latency_ms"`
	ReadsPerSec     float64            `json:"reads_per_sec,omitempty"`
	ReadLatencyMs   map[string]float64 `json:"read_latency_ms,omitempty"`
	Errors          int64              `json:"errors"`
	NotReadyRetries int64              `json:"not_ready_retries"`
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
	// Workers is the number of synthetic workers that placed the run's
	// tasks (Options.Workers); Watch is what the assignment watchers saw,
	// when asked.
	Workers int          `json:"workers,omitempty"`
	Watch   *WatchResult `json:"watch,omitempty"`

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
// is stopped before Bench returns. The run's directory is removed unless
// Keep is set, the history shows a violation, or the run failed with a
// local cluster whose logs explain it.
func Bench(ctx context.Context, o Options) (*Report, error) {
	switch {
	case o.Restarts && o.Local < 3:
		return nil, errors.New("restarts need a local cluster of 3 or more nodes")
	case o.SnapshotAt < 0:
		return nil, errors.New("the snapshot's time into the run must not be negative")
	case o.Watchers < 0 || o.Workers < 0:
		return nil, errors.New("watchers and workers must not be negative")
	}
	if err := checkFDs(o); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "xce-bench-")
	if err != nil {
		return nil, err
	}
	r := &run{o: o, dir: dir}
	out, err := r.bench(ctx)
	r.close()
	if err != nil && r.cluster != nil {
		err = fmt.Errorf("%w (logs in %s)", err, dir)
	}
	if !(o.Keep || err != nil && r.cluster != nil || out != nil && out.Dir != "") {
		os.RemoveAll(dir)
	}
	return out, err
}

// run is one bench's state, from its cluster to its history.
type run struct {
	o   Options
	dir string

	fsync     time.Duration
	cluster   *localcluster.Cluster // nil against Endpoints
	endpoints []string
	creds     client.Credentials
	tlsCfg    *tls.Config
	copts     client.Options
	ctl       *client.Client // Status by address
	dataDirs  []string
	sizes     *scraper
	load      Load
	// workers and watch run from before the measured run to its end.
	workers *workerPool
	watch   *watchSet
	// watchMem is what opening the watchers cost the nodes.
	watchMem *WatchMemory
}

// bench runs the phases in order; the caller closes what it opened.
func (r *run) bench(ctx context.Context) (*Report, error) {
	var err error
	if r.fsync, err = FsyncLatency(r.dir, 200); err != nil {
		return nil, fmt.Errorf("measure fsync: %w", err)
	}
	fmt.Fprintf(r.o.Log, "xce bench: %d clients, %v, reads %.2f; disk fsync p50 %.3f ms (bounds a write's latency)\n",
		r.o.Clients, r.o.Duration, r.o.Reads, ms(r.fsync))
	if err := r.connect(); err != nil {
		return nil, err
	}
	// The servers are started: from here on the load generator may yield
	// the CPU to them. By default it does not, like etcd's benchmark tool,
	// so that figures compare.
	if r.o.Nice > 0 {
		Yield(r.o.Nice)
	}
	prefill, err := r.prefill(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.startWatch(ctx); err != nil {
		return nil, err
	}
	m, err := r.measure(ctx)
	if err != nil {
		return nil, err
	}
	watch := r.endWatch(ctx)
	verdict, err := r.check(m.hist.Ops())
	if err != nil {
		return nil, err
	}
	out := r.report(m, verdict)
	out.Prefill, out.Watch, out.Workers = prefill, watch, r.o.workers()
	if r.o.Restarts {
		before := uint64(verdict.Acked)
		if prefill != nil {
			before += uint64(prefill.Tasks)
		}
		if out.Restarts, err = r.restarts(ctx, before); err != nil {
			return nil, fmt.Errorf("restarts: %w", err)
		}
		if out.Restarts.Lost() {
			out.Dir = r.dir
		}
	}
	return out, nil
}

// connect starts the local cluster, if asked, and waits for its PRIMARY;
// then the run has its endpoints, credentials and control client.
func (r *run) connect() error {
	r.creds, r.endpoints = r.o.Credentials, r.o.Endpoints
	if r.o.Local > 0 {
		c, err := startLocal(r.o.Exe, r.dir, r.localSpec())
		if err != nil {
			return err
		}
		r.cluster = c
		r.endpoints = c.ClientAddrs()
		if r.o.TLS {
			r.creds = c.Credentials()
		}
		for _, n := range c.Nodes {
			r.dataDirs = append(r.dataDirs, n.DataDir)
		}
	}
	var err error
	if r.tlsCfg, err = r.creds.TLSConfig(); err != nil {
		return err
	}
	r.copts = client.Options{TLS: r.tlsCfg, Credentials: r.creds}
	if r.ctl, err = client.New(r.endpoints, r.copts); err != nil {
		return err
	}
	r.sizes = newScraper(r.tlsCfg, r.creds, r.ctl)
	r.load = Load{
		Endpoints: r.endpoints, TLS: r.tlsCfg, Credentials: r.creds,
		Clients: r.o.Clients, Duration: r.o.Duration, Ops: r.o.Ops, Reads: r.o.Reads, Rate: r.o.Rate,
		Progress: func(p Progress) {
			fmt.Fprintf(r.o.Log, "%6.1fs  ops %d  %.0f/s  retries %d  errors %d\n",
				p.Elapsed.Seconds(), p.Ops, float64(p.Ops)/p.Elapsed.Seconds(), p.Retries, p.Errors)
		},
	}
	if r.cluster == nil {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.cluster.WaitPrimary(wctx, r.ctl, r.o.Local-1); err != nil {
		return fmt.Errorf("local cluster did not elect: %w", err)
	}
	secure := ""
	if r.o.TLS {
		secure = ", TLS and tokens"
	}
	fmt.Fprintf(r.o.Log, "local cluster of %d (%s timings%s) up in %s\n", r.o.Local, r.o.Profile.Name, secure, r.dir)
	return nil
}

// close stops the watchers, the workers and the local cluster, and closes
// the run's clients.
func (r *run) close() {
	if r.watch != nil {
		r.watch.stop()
	}
	if r.workers != nil {
		r.workers.stop()
	}
	if r.cluster != nil {
		r.cluster.Stop(stopGrace)
	}
	if r.sizes != nil {
		r.sizes.close()
	}
	if r.ctl != nil {
		r.ctl.Close()
	}
}

// prefill loads the tasks asked for before the measured run (nil when
// none are).
func (r *run) prefill(ctx context.Context) (*PrefillResult, error) {
	if r.o.Prefill <= 0 {
		return nil, nil
	}
	pc := r.o.PrefillClients
	if pc <= 0 {
		pc = DefaultPrefillClients
	}
	fmt.Fprintf(r.o.Log, "prefill: %d tasks, %d submitters\n", r.o.Prefill, pc)
	res, err := RunPrefill(ctx, Prefill{
		Endpoints: r.endpoints, TLS: r.tlsCfg, Credentials: r.creds, Tasks: r.o.Prefill, Clients: pc,
		Progress: func(p Progress) {
			fmt.Fprintf(r.o.Log, "%6.1fs  prefill %d/%d  %.0f/s  retries %d  errors %d\n",
				p.Elapsed.Seconds(), p.Ops, r.o.Prefill, float64(p.Ops)/p.Elapsed.Seconds(), p.Retries, p.Errors)
		},
	})
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted during the prefill, %d of %d tasks in: %w", res.Tasks, r.o.Prefill, ctx.Err())
	}
	fmt.Fprintf(r.o.Log, "prefill: %d tasks in %.1fs, %.0f/s\n", res.Tasks, res.Seconds, res.PerSecond)
	res.NodeStats = r.sizes.nodes(ctx, r.endpoints, r.dataDirs)
	PrintNodes(r.o.Log, res.NodeStats)
	return res, nil
}

// measured is what the measured run leaves: its result and history, the
// times of its kills, its snapshot and the term it started in.
type measured struct {
	res       *Result
	hist      History
	kills     []time.Time
	snap      *SnapshotResult
	termStart uint64
}

// measure drives the load, with the primary's kills and the snapshot when
// asked, and the load generator's CPU profile.
func (r *run) measure(ctx context.Context) (*measured, error) {
	m := &measured{termStart: maxTerm(ctx, r.ctl, r.endpoints)}
	loadCtx, stopLoad := context.WithCancel(ctx)
	killCtx, stopKills := context.WithCancel(ctx)
	var bg sync.WaitGroup
	var sc *client.Client
	defer func() {
		// On success the load is over and the kills are done: this only
		// stops what an error left running.
		stopLoad()
		stopKills()
		bg.Wait()
		if sc != nil {
			sc.Close()
		}
	}()
	load := r.load
	var killErr error
	if r.o.KillPrimary > 0 {
		// The load runs for Duration and, should the kills take longer
		// (each waits for a caught-up cluster), until the last kill's
		// failover is behind it, so every kill gets its figure.
		killDone := make(chan struct{})
		bg.Go(func() {
			defer close(killDone)
			killErr = killLoop(killCtx, r.o, r.cluster, r.ctl, &m.kills)
		})
		if r.o.Ops == 0 {
			load.Duration = 0
			bg.Go(func() {
				select {
				case <-time.After(r.o.Duration):
				case <-loadCtx.Done():
					return
				}
				select {
				case <-killDone:
				case <-loadCtx.Done():
				}
				stopLoad()
			})
		}
	}
	if r.o.SnapshotAt > 0 {
		var err error
		if sc, err = client.New(r.endpoints, r.copts); err != nil {
			return nil, err
		}
		runStart := time.Now()
		// The snapshot ends with the load: one not yet due is not taken,
		// one under way is waited for.
		bg.Go(func() { m.snap = takeSnapshot(loadCtx, sc, runStart, r.o.SnapshotAt) })
	}
	stopProfile, err := startCPUProfile(r.o.CPUProfile)
	if err != nil {
		return nil, err
	}
	m.res, err = Run(loadCtx, load, &m.hist)
	stopProfile()
	if err != nil {
		return nil, err
	}
	stopLoad()
	bg.Wait()
	if killErr != nil {
		return nil, fmt.Errorf("kill loop: %w", killErr)
	}
	return m, nil
}

// startCPUProfile writes this process's CPU profile to path until the
// returned func is called; with no path it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// finalReadWait bounds the final read of every task: a linearizable page
// of 1,000 at a time, so it grows with the registry.
func finalReadWait(tasks int) time.Duration {
	return 30*time.Second + time.Duration(tasks/1_000_000)*10*time.Second
}

// check reads the final state linearizably and checks the history
// against it.
func (r *run) check(ops []Op) (Verdict, error) {
	fctx, fcancel := context.WithTimeout(context.Background(), finalReadWait(r.o.Prefill+len(ops)))
	defer fcancel()
	tasks, err := r.ctl.List(fctx, false)
	if err != nil {
		return Verdict{}, fmt.Errorf("final read of every task: %w", err)
	}
	final := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		final[t.TaskId] = true
	}
	htmlPath := r.o.HistoryPath
	if htmlPath == "" {
		htmlPath = filepath.Join(r.dir, "history.html")
	}
	return Check(ops, final, time.Minute, htmlPath)
}

// report puts the run's figures together.
func (r *run) report(m *measured, verdict Verdict) *Report {
	res, ops := m.res, m.hist.Ops()
	out := &Report{
		Clients: r.o.Clients, LocalNodes: r.o.Local, DurationS: res.Elapsed.Seconds(), Ops: res.Ops,
		OpsPerSec: float64(res.Ops) / res.Elapsed.Seconds(), Errors: res.Errors, NotReadyRetries: res.Retries,
		WarmupS: res.Warmup.Seconds(), LatencyMs: latencyMs(res.Latencies),
		WritesPerSec: float64(res.Writes) / res.Elapsed.Seconds(), WriteLatencyMs: latencyMs(res.WriteLatencies),
		FsyncP50Ms: ms(r.fsync), Linearizable: verdict.Linearizable, CheckResult: verdict.CheckResult,
		Acked: verdict.Acked, Lost: verdict.Lost, Duplicates: verdict.Duplicates, HistoryFile: verdict.HistoryFile,
		TermStart: m.termStart, TermEnd: maxTerm(context.Background(), r.ctl, r.endpoints),
		NodeStats: r.sizes.nodes(context.Background(), r.endpoints, r.dataDirs),
	}
	if r.o.Local > 0 {
		out.Profile = r.o.Profile.Name
	}
	if res.Reads > 0 {
		out.ReadsPerSec, out.ReadLatencyMs = float64(res.Reads)/res.Elapsed.Seconds(), latencyMs(res.ReadLatencies)
	}
	if snap := m.snap; snap != nil {
		if snap.Error == "" {
			snap.MaxLatencyMsAround = ms(MaxWriteLatency(ops, snap.start, snap.end))
		}
		snap.MaxLatencyMsRun = ms(MaxWriteLatency(ops, time.Time{}, time.Time{}))
		out.Snapshot = snap
	}
	for _, k := range m.kills {
		if d, ok := FailoverAfter(ops, k); ok {
			out.FailoversMs = append(out.FailoversMs, ms(d))
		} else {
			out.FailoversMs = append(out.FailoversMs, -1)
		}
	}
	if !verdict.OK() {
		out.Dir = r.dir
		out.violation = true
	}
	return out
}

// restarts measures what restarting nodes costs, after the run.
func (r *run) restarts(ctx context.Context, before uint64) (*Restarts, error) {
	rs := &restarter{c: r.cluster, ctl: r.ctl, load: r.load, copts: r.copts, log: r.o.Log, sizes: r.sizes,
		dirs: r.dataDirs, before: before, rounds: r.o.RestartRounds, term: r.o.FollowerTerm}
	return rs.run(ctx)
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

// latencyMs is the percentiles the report gives of sorted latencies.
func latencyMs(sorted []time.Duration) map[string]float64 {
	return map[string]float64{"p50": ms(percentile(sorted, 50)), "p95": ms(percentile(sorted, 95)),
		"p99": ms(percentile(sorted, 99)), "max": ms(percentile(sorted, 100))}
}

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
