package bench

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"
)

// Bounds of the watch phases.
const (
	// registerWait bounds the synthetic workers' registration and the
	// placement of the tasks already there.
	registerWait = time.Minute
	// watchSettle bounds the wait, after the run, for the generations it
	// made to reach every watcher.
	watchSettle = 10 * time.Second
	// fdHeadroom is the file descriptors the bench keeps for everything
	// but its connections.
	fdHeadroom = 256
)

// checkFDs refuses watchers whose connections (each watch holds its own)
// would not fit this process's file descriptors.
func checkFDs(o Options) error {
	if o.Watchers == 0 {
		return nil
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil
	}
	pc := o.PrefillClients
	if pc <= 0 {
		pc = DefaultPrefillClients
	}
	if need := uint64(o.Watchers + max(o.Clients, pc) + fdHeadroom); need > lim.Cur {
		return fmt.Errorf("%d watchers and %d clients need about %d file descriptors; this process may open %d (ulimit -n)",
			o.Watchers, o.Clients, need, lim.Cur)
	}
	return nil
}

// workers is the number of synthetic workers the run starts.
func (o Options) workers() int {
	if o.Workers == 0 && o.Watchers > 0 {
		return DefaultWatchWorkers
	}
	return o.Workers
}

// localSpec is the run's local cluster. With watchers, each node takes
// their connections, and serves /debug/pprof so that the bench can have
// it collect its garbage before reading its memory.
func (r *run) localSpec() localSpec {
	s := localSpec{n: r.o.Local, profile: r.o.Profile, secure: r.o.TLS}
	if r.o.Watchers > 0 {
		pc := r.o.PrefillClients
		if pc <= 0 {
			pc = DefaultPrefillClients
		}
		s.conns = (r.o.Watchers+r.o.Local-1)/r.o.Local + max(r.o.Clients, pc) + fdHeadroom
		s.env = []string{"XCE_PPROF=1"}
	}
	return s
}

// startWatch starts the synthetic workers, waits until they hold every
// task there is, then opens the watchers, reading the nodes' memory
// before and after.
func (r *run) startWatch(ctx context.Context) error {
	n := r.o.workers()
	if n == 0 {
		return nil
	}
	var err error
	if r.workers, err = startWorkers(r.endpoints, r.creds, n); err != nil {
		return err
	}
	if err := r.workers.waitPlaced(ctx, r.ctl, r.o.Prefill, registerWait); err != nil {
		return err
	}
	fmt.Fprintf(r.o.Log, "%d synthetic workers registered\n", n)
	if r.o.Watchers == 0 {
		return nil
	}
	before := r.sizes.memSamples(ctx, r.endpoints)
	timeout := 30*time.Second + time.Duration(r.o.Watchers)*5*time.Millisecond
	if r.watch, err = openWatchers(ctx, r.endpoints, r.copts, r.o.Watchers, timeout); err != nil {
		return fmt.Errorf("open watchers: %w", err)
	}
	after := r.sizes.memSamples(ctx, r.endpoints)
	r.identify(ctx)
	r.watchMem = watchMemory(r.watch.nodes, before, after)
	fmt.Fprintf(r.o.Log, "%d watchers open over %d nodes in %.2fs\n", r.o.Watchers, len(r.endpoints), r.watch.opened.Seconds())
	PrintWatchMemory(r.o.Log, r.watchMem)
	return nil
}

// identify names the watchers' nodes and their roles, from their Status.
func (r *run) identify(ctx context.Context) {
	for i := range r.watch.nodes {
		n := &r.watch.nodes[i]
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if st, err := r.ctl.Status(sctx, n.Endpoint); err == nil {
			n.ID = st.GetNodeId()
			n.Role = strings.ToLower(strings.TrimPrefix(st.GetRole().String(), "ROLE_"))
		}
		cancel()
	}
}

// endWatch, after the run, waits for its generations to reach every
// watcher (unless ctx ended: the run was interrupted), stops the watchers and the workers, and sums what the watchers
// saw (nil without watchers).
func (r *run) endWatch(ctx context.Context) *WatchResult {
	var out *WatchResult
	if w := r.watch; w != nil {
		w.settle(ctx, watchSettle)
		w.stop()
		r.watch = nil
		out = w.result()
		out.Memory = r.watchMem
		if err := w.err(); err != nil {
			fmt.Fprintf(r.o.Log, "watch: %v\n", err)
		}
	}
	if r.workers != nil {
		r.workers.stop()
		r.workers = nil
	}
	return out
}
