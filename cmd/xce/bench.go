package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/dispatch"
)

type benchFlags struct {
	addr        string
	local       int
	clients     int
	duration    time.Duration
	ops         int64
	reads       float64
	rate        float64
	killPrimary int
	prefill     int
	prefillCl   int
	profile     string
	json        bool
	keep        bool
	history     string
	cpuprofile  string
	nice        int
	tls         bool
	restarts    bool
	rounds      int
	followerSig string
	snapshotAt  time.Duration
	watchers    int
	workers     int
	creds       credFlags
}

func benchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Drive a cluster with concurrent clients; optionally SIGKILL the primary and check the history",
		Long: `Drive a cluster (--addr, or --local N to start N child server processes in a temp
dir, with --tls secure on every port) with concurrent clients doing SubmitTask (and with --reads, linearizable
GetTask). Before the clock starts, each client finds the primary and opens its
connection (over TLS, its handshake); the time that took is reported apart, and
throughput and latency are those of the run that follows; writes (SubmitTask)
and reads (GetTask) are also reported apart, calls per second and latency
percentiles of each. With --kill-primary K (needs --local),
SIGKILLs the current primary K times, restarting each killed node before the
next kill, and reports the client-visible failover of each. At the end the whole
history is checked: linearizable (porcupine), every acknowledged submit present,
none applied twice. A violation exits 1 and keeps the history visualisation.

With --prefill N, N tasks are created first, as fast as the cluster takes them
(--prefill-clients concurrent submitters), so that the run measures a registry
of that size; the prefill is not part of the checked history. After the
prefill and after the run, each node's task count, Go heap, resident memory and
longest recent GC pause and last raft snapshot's cost (from its /metrics) are
reported, with --local also its data dir's size.

With --snapshot-at D, the primary takes a raft snapshot D into the run; the
report gives its size and time, and the largest latency of the writes in
flight meanwhile against the run's largest. With --restarts (needs --local 3
or more), after the run a standby is SIGKILLed (with --follower-signal term,
SIGTERMed and waited for), writes go on for 2s without it, and the time it
takes to catch up once it listens again is reported; then
every node is SIGKILLed at once and restarted, and the time to the first
acknowledged write is reported, with the nodes' sizes after it. Fewer tasks
after the cold restart than were acknowledged before it exits 1. With
--restart-rounds K, each of the two is measured K times, one after another,
and every round's figure is reported with the medians.

With --watchers N, before the run the bench starts --workers synthetic workers
in its own process (3 unless given; they hold every task they are given and do
nothing with it, so that the run's tasks get placed), then opens N
WatchAssignment streams with STALE consistency, spread evenly over the nodes
(the primary serves some, standbys the rest), each on its own connection. While
the run's clients write, every plan of the placement loop is a generation the
watchers receive. The report gives the generations received, the messages, the
streams that broke (and of those, cut off for falling behind), and watch
delivery p50/p99/max: from the earliest time any node reported applying the
generation (the primary applies right after the commit) to the watcher's
receiving it. Those times come from the nodes' clocks and the receipt from the
bench's, so the figure holds for a cluster on the bench's machine (--local);
against --addr it is off by the clocks' difference. It also gives what an idle
watcher costs the nodes: each node's live Go heap, goroutine stacks and
goroutines (from its /metrics) before the watchers opened and after, the
differences over the watchers. A --local cluster serves /debug/pprof for it,
so that each reading follows a garbage collection; without one, the live heap
is as of the node's last collection. Compare the write rate with a run of the
same --workers and no --watchers.`,
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
	fl.Float64Var(&f.rate, "rate", 0, "pace the calls of all clients together to this many a second (0: as fast as they go)")
	fl.IntVar(&f.prefill, "prefill", 0, "create this many tasks before the measured run (not checked)")
	fl.IntVar(&f.prefillCl, "prefill-clients", bench.DefaultPrefillClients, "concurrent submitters of the --prefill")
	fl.IntVar(&f.killPrimary, "kill-primary", 0, "SIGKILL the primary this many times (with --local)")
	fl.StringVar(&f.profile, "profile", "default", "raft timings of a --local cluster: default or fast")
	fl.BoolVar(&f.json, "json", false, "print one JSON object")
	fl.BoolVar(&f.keep, "keep", false, "keep the local cluster's directory")
	fl.StringVar(&f.cpuprofile, "cpuprofile", "", "write the load generator's own CPU profile here")
	fl.IntVar(&f.nice, "nice", 0, "run the load generator at this nice level (0-19) so that it yields the CPU to servers on the same machine")
	fl.StringVar(&f.history, "history", "", "where to write the history visualisation on a violation (default: in the run's directory)")
	fl.BoolVar(&f.restarts, "restarts", false, "after the run, measure a standby's catch-up and a cold restart of every node (with --local 3 or more)")
	fl.IntVar(&f.rounds, "restart-rounds", 1, "with --restarts, make each restart measurement this many times and report every round and the medians (1 to 20)")
	fl.StringVar(&f.followerSig, "follower-signal", "kill", "with --restarts, how the standby whose catch-up is timed is stopped: kill (SIGKILL) or term (SIGTERM, waiting for it to exit)")
	fl.DurationVar(&f.snapshotAt, "snapshot-at", 0, "have the primary take a raft snapshot this far into the run (0: none)")
	fl.BoolVar(&f.tls, "tls", false, "run the --local cluster with TLS on every port, certificates from its own CA, and an admin token")
	fl.IntVar(&f.watchers, "watchers", 0, "open this many assignment watches over the nodes and report watch delivery after commit")
	fl.IntVar(&f.workers, "workers", 0, "start this many in-process synthetic workers so that tasks get placed (0: none, or 3 with --watchers)")
	f.creds.register(fl)
	return cmd
}

func runBench(stdout, stderr io.Writer, f benchFlags) error {
	switch {
	case f.clients <= 0:
		return usageErr("--clients must be positive")
	case f.reads < 0 || f.reads > 1:
		return usageErr("--reads must be between 0 and 1")
	case f.rate < 0:
		return usageErr("--rate must not be negative")
	case (f.addr == "") == (f.local == 0):
		return usageErr("give exactly one of --addr and --local")
	case f.killPrimary > 0 && f.local == 0:
		return usageErr("--kill-primary needs --local")
	case f.local < 0 || f.local > 7:
		return usageErr("--local must be between 1 and 7")
	case f.killPrimary > 0 && f.local < 3:
		return usageErr("--kill-primary needs --local 3 or more")
	case f.prefill < 0:
		return usageErr("--prefill must not be negative")
	case f.prefillCl <= 0:
		return usageErr("--prefill-clients must be positive")
	case f.nice < 0 || f.nice > 19:
		return usageErr("--nice must be between 0 and 19")
	case f.restarts && f.local == 0:
		return usageErr("--restarts needs --local (it kills and restarts the nodes)")
	case f.restarts && f.local < 3:
		return usageErr("--restarts needs --local 3 or more (a standby is down while writes go on)")
	case f.rounds < 1 || f.rounds > 20:
		return usageErr("--restart-rounds must be between 1 and 20")
	case f.rounds > 1 && !f.restarts:
		return usageErr("--restart-rounds needs --restarts")
	case f.followerSig != "kill" && f.followerSig != "term":
		return usageErr("--follower-signal must be kill or term, not %q", f.followerSig)
	case f.followerSig != "kill" && !f.restarts:
		return usageErr("--follower-signal needs --restarts")
	case f.snapshotAt < 0:
		return usageErr("--snapshot-at must not be negative")
	case f.snapshotAt > 0 && f.ops == 0 && f.snapshotAt >= f.duration:
		return usageErr("--snapshot-at %v falls after the run's --duration %v", f.snapshotAt, f.duration)
	case f.tls && f.local == 0:
		return usageErr("--tls needs --local (with --addr, give --ca-file and --token or a certificate)")
	}
	if err := checkWatchFlags(f); err != nil {
		return err
	}
	prof, ok := bench.Profiles[f.profile]
	if !ok {
		return usageErr("--profile %q: want default or fast", f.profile)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// Ctrl-C or SIGTERM ends the run early; the local cluster still goes
	// down rather than leaving its servers behind.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	o := bench.Options{
		Local: f.local, Exe: exe, Profile: prof, TLS: f.tls,
		Clients: f.clients, Duration: f.duration, Ops: f.ops, Reads: f.reads, Rate: f.rate, KillPrimary: f.killPrimary,
		Prefill: f.prefill, PrefillClients: f.prefillCl, Restarts: f.restarts, RestartRounds: f.rounds, FollowerTerm: f.followerSig == "term", SnapshotAt: f.snapshotAt,
		Keep: f.keep, HistoryPath: f.history, CPUProfile: f.cpuprofile, Nice: f.nice, Log: stderr,
		Watchers: f.watchers, Workers: f.workers,
	}
	if f.addr != "" {
		o.Endpoints = strings.Split(f.addr, ",")
		o.Credentials = f.creds.credentials()
	}
	rep, err := bench.Bench(ctx, o)
	if err != nil {
		return err
	}
	if f.json {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		printBench(stdout, rep)
	}
	return rep.Err()
}

func printBench(w io.Writer, o *bench.Report) {
	if p := o.Prefill; p != nil {
		fmt.Fprintf(w, "prefill %d tasks in %.1fs  %.0f tasks/s  errors %d  not-ready retries %d\n",
			p.Tasks, p.Seconds, p.PerSecond, p.Errors, p.Retries)
	}
	fmt.Fprintf(w, "clients %d  ops %d in %.1fs  %.0f ops/s  errors %d  not-ready retries %d  (connected in %.2fs before)\n",
		o.Clients, o.Ops, o.DurationS, o.OpsPerSec, o.Errors, o.NotReadyRetries, o.WarmupS)
	if o.Workers > 0 {
		fmt.Fprintf(w, "synthetic workers %d (the run's tasks were placed)\n", o.Workers)
	}
	fmt.Fprintf(w, "latency ms  p50 %.2f  p95 %.2f  p99 %.2f  max %.2f   (fsync p50 %.3f)\n",
		o.LatencyMs["p50"], o.LatencyMs["p95"], o.LatencyMs["p99"], o.LatencyMs["max"], o.FsyncP50Ms)
	printKind(w, "writes", o.WritesPerSec, o.WriteLatencyMs)
	if o.ReadLatencyMs != nil {
		printKind(w, "reads", o.ReadsPerSec, o.ReadLatencyMs)
	}
	if len(o.FailoversMs) > 0 {
		fmt.Fprintf(w, "failovers ms %v\n", o.FailoversMs)
	}
	fmt.Fprintf(w, "terms %d -> %d\n", o.TermStart, o.TermEnd)
	fmt.Fprintf(w, "history: linearizable=%v (%s)  acked %d  lost %d  duplicates %d\n",
		o.Linearizable, o.CheckResult, o.Acked, o.Lost, o.Duplicates)
	bench.PrintNodes(w, o.NodeStats)
	bench.PrintSnapshot(w, o.Snapshot)
	bench.PrintRestarts(w, o.Restarts)
	bench.PrintWatch(w, o.Watch)
}

// printKind writes one kind of call's rate and latencies.
func printKind(w io.Writer, kind string, perSec float64, lat map[string]float64) {
	fmt.Fprintf(w, "%-6s %.0f/s  latency ms  p50 %.2f  p95 %.2f  p99 %.2f  max %.2f\n",
		kind, perSec, lat["p50"], lat["p95"], lat["p99"], lat["max"])
}

// checkWatchFlags refuses watcher and worker counts the cluster cannot
// serve: each node serves at most dispatch.MaxWatchers watches.
func checkWatchFlags(f benchFlags) error {
	nodes := f.local
	if f.addr != "" {
		nodes = len(strings.Split(f.addr, ","))
	}
	switch {
	case f.watchers < 0:
		return usageErr("--watchers must not be negative")
	case f.workers < 0:
		return usageErr("--workers must not be negative")
	case f.watchers > dispatch.MaxWatchers*nodes:
		return usageErr("--watchers %d: %d nodes serve at most %d (%d each)", f.watchers, nodes, dispatch.MaxWatchers*nodes, dispatch.MaxWatchers)
	}
	return nil
}
