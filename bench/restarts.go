package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/restoreheap"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// Restarts is what restarting the local cluster's nodes costs, measured
// after the run (Options.Restarts); the report's "restarts".
type Restarts struct {
	// FollowerCatchupSeconds runs from the moment a restarted STANDBY
	// listens (it was stopped by FollowerSignal, SIGKILL or SIGTERM, and
	// fell FollowerBehindEntries behind:
	// FollowerLagLoad of writes went on without it) until its applied
	// index reaches the PRIMARY's commit index, both polled. The caught_up
	// phase of FollowerPhases is the same moment counted from the restart.
	FollowerCatchupSeconds float64 `json:"follower_catchup_seconds"`
	FollowerBehindEntries  uint64  `json:"follower_behind_entries"`
	FollowerSignal         string  `json:"follower_signal"`
	// With more than one round (Options.RestartRounds), each
	// measurement is made that many times: FollowerCatchupRuns and
	// ColdRestartRuns hold every round's figure, in order, and
	// FollowerCatchupSeconds and ColdRestartSeconds their medians. The
	// other fields are the last round's.
	FollowerCatchupRuns []float64 `json:"follower_catchup_runs,omitempty"`
	ColdRestartRuns     []float64 `json:"cold_restart_runs,omitempty"`
	// ColdRestartSeconds runs from restarting every node, all SIGKILLed
	// at once, until a new task's submit is acknowledged;
	// ColdRestartReadySeconds until each node (by id) answers Status as
	// PRIMARY or STANDBY.
	ColdRestartSeconds      float64            `json:"cold_restart_seconds"`
	ColdRestartReadySeconds map[string]float64 `json:"cold_restart_ready_seconds,omitempty"`
	// TasksAcked are the tasks acknowledged before the cold restart (the
	// prefill, the run's and the catch-up load's acknowledged submits);
	// TasksAfter is the PRIMARY's task count after it. Fewer after than
	// acknowledged fails the bench.
	TasksAcked uint64 `json:"tasks_acked"`
	TasksAfter uint64 `json:"tasks_after"`
	// NodeStats are the nodes' sizes after the cold restart.
	NodeStats []NodeStats `json:"node_stats,omitempty"`
	// FollowerPhases are the restarted STANDBY's startup phases, as it
	// reports them (Status's startup), then caught_up as the bench saw it;
	// ColdPhases each node's after the cold restart, then first_write for
	// the PRIMARY. Each is in seconds since the node (or for the bench's
	// phases, its process) started.
	FollowerPhases []Phase            `json:"follower_phases,omitempty"`
	ColdPhases     map[string][]Phase `json:"cold_phases,omitempty"`
	// TransparentHugePages is the host's transparent huge page mode
	// (always, madvise, never; empty where there is none), which decides
	// what a restore's page faults cost (docs/design.md, "The data dir
	// and durability").
	TransparentHugePages string `json:"transparent_hugepages,omitempty"`
}

// Phase is one phase of a restart: when it ended, in seconds since the
// node started, and how long it alone took where a node measures that (a
// snapshot restore, the leader's log replay).
type Phase struct {
	Name        string  `json:"name"`
	AtSeconds   float64 `json:"at_seconds"`
	TookSeconds float64 `json:"took_seconds,omitempty"`
}

// phasesOf are the startup phases st reports.
func phasesOf(st *xcev1.StatusResponse) []Phase {
	var out []Phase
	for _, p := range st.GetStartup() {
		out = append(out, Phase{Name: p.Name, AtSeconds: p.AtSeconds, TookSeconds: p.TookSeconds})
	}
	return out
}

// phaseLine is phases on one line.
func phaseLine(phases []Phase) string {
	var b strings.Builder
	for i, p := range phases {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.3fs", p.Name, p.AtSeconds)
		if p.TookSeconds > 0 {
			fmt.Fprintf(&b, " (took %.3fs)", p.TookSeconds)
		}
	}
	return b.String()
}

// Lost reports whether the cold restart lost acknowledged tasks.
func (r *Restarts) Lost() bool { return r.TasksAfter < r.TasksAcked }

// FollowerLagLoad is how long the writes go on, at the run's client
// count, while the killed STANDBY is down: long enough that it restarts
// thousands of entries behind.
const FollowerLagLoad = 2 * time.Second

// restartWait bounds each restart measurement: a cold restart of a large
// registry reads its whole snapshot and log first.
const restartWait = 5 * time.Minute

// coldAttempt is each attempt's deadline of the first write after the
// cold restart: short, so that the attempt that succeeds is one begun
// soon after the cluster could take it.
const coldAttempt = time.Second

// restarter measures Restarts on a local cluster.
type restarter struct {
	c      *localcluster.Cluster
	ctl    *client.Client // Status by address
	load   Load           // the run's load, for the catch-up writes
	copts  client.Options
	log    io.Writer
	sizes  *scraper
	dirs   []string
	before uint64 // tasks acknowledged before the measurements
	rounds int    // how many times each measurement is made
	term   bool   // stop the follower with SIGTERM, not SIGKILL
}

// run measures the follower's catch-up, then the cold restart, and
// checks that no acknowledged task was lost.
func (rs *restarter) run(ctx context.Context) (*Restarts, error) {
	out := &Restarts{TransparentHugePages: restoreheap.Mode()}
	rounds := max(rs.rounds, 1)
	for i := range rounds {
		if rounds > 1 {
			fmt.Fprintf(rs.log, "restarts: follower round %d of %d\n", i+1, rounds)
		}
		s, err := rs.follower(ctx, out)
		if err != nil {
			return nil, fmt.Errorf("follower catch-up: %w", err)
		}
		out.FollowerCatchupRuns = append(out.FollowerCatchupRuns, out.FollowerCatchupSeconds)
		if rounds > 1 {
			rs.settle(ctx, s)
		}
	}
	for i := range rounds {
		if rounds > 1 {
			fmt.Fprintf(rs.log, "restarts: cold round %d of %d\n", i+1, rounds)
		}
		if err := rs.cold(ctx, out); err != nil {
			return nil, fmt.Errorf("cold restart: %w", err)
		}
		out.ColdRestartRuns = append(out.ColdRestartRuns, out.ColdRestartSeconds)
		if out.Lost() {
			break
		}
	}
	if rounds == 1 {
		out.FollowerCatchupRuns, out.ColdRestartRuns = nil, nil
		return out, nil
	}
	out.FollowerCatchupSeconds, out.ColdRestartSeconds = median(out.FollowerCatchupRuns), median(out.ColdRestartRuns)
	return out, nil
}

// median is the middle of xs (the mean of the middle two of an even
// count); xs is not empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// follower stops a STANDBY (rs.signal), writes for FollowerLagLoad without it,
// restarts it and times its catch-up; it returns the STANDBY's index.
func (rs *restarter) follower(ctx context.Context, out *Restarts) (int, error) {
	n := rs.c.N()
	wctx, cancel := context.WithTimeout(ctx, restartWait)
	defer cancel()
	p, err := rs.c.WaitPrimary(wctx, rs.ctl, n-1)
	if err != nil {
		return 0, err
	}
	if _, err := waitCaughtUp(wctx, rs.c, rs.ctl, 5*time.Second); err != nil {
		return 0, err
	}
	s := (p + 1) % n
	// The run is over: the STANDBY's applied index no longer moves but
	// for raft's own entries.
	var applied uint64
	if st := rs.status(wctx, s); st != nil {
		applied = st.AppliedIndex
	}
	out.FollowerSignal = rs.signal()
	if err := rs.stop(s); err != nil {
		return 0, err
	}
	var h History
	l := rs.load
	l.Duration, l.Ops, l.Reads, l.Progress = FollowerLagLoad, 0, 0, nil
	if _, err := Run(wctx, l, &h); err != nil {
		return 0, err
	}
	rs.before += uint64(acknowledgedSubmits(h.Ops()))
	var commit uint64
	if st := rs.status(wctx, p); st != nil {
		commit = st.CommitIndex
	}
	if commit > applied {
		out.FollowerBehindEntries = commit - applied
	}
	fmt.Fprintf(rs.log, "restarts: stopped STANDBY n%d (%s), %v of writes without it; restarting it %d entries behind\n",
		s+1, out.FollowerSignal, FollowerLagLoad, out.FollowerBehindEntries)
	start := time.Now()
	if err := rs.c.Start(s); err != nil {
		return 0, err
	}
	tick := time.NewTicker(catchUpPoll)
	defer tick.Stop()
	var since float64 // from the restart
	for {
		sts := rs.c.Statuses(wctx, rs.ctl)
		if caughtUp(sts, s) {
			since = time.Since(start).Seconds()
			break
		}
		select {
		case <-wctx.Done():
			return 0, fmt.Errorf("n%d not caught up: %w", s+1, wctx.Err())
		case <-tick.C:
		}
	}
	var phases []Phase
	if st := rs.status(wctx, s); st != nil {
		phases = phasesOf(st)
	}
	out.FollowerCatchupSeconds = sinceListen(since, phases)
	fmt.Fprintf(rs.log, "restarts: n%d caught up %.3fs after it listened (%.3fs after its restart)\n", s+1, out.FollowerCatchupSeconds, since)
	if phases != nil {
		out.FollowerPhases = append(phases, Phase{Name: "caught_up", AtSeconds: since})
		fmt.Fprintf(rs.log, "restarts: n%d: %s\n", s+1, phaseLine(out.FollowerPhases))
	}
	return s, nil
}

// signal is how the follower's STANDBY is stopped, by name.
func (rs *restarter) signal() string {
	if rs.term {
		return "SIGTERM"
	}
	return "SIGKILL"
}

// stop stops node s by rs.signal and waits until it is gone.
func (rs *restarter) stop(s int) error {
	if !rs.term {
		_, err := rs.c.Kill(s)
		return err
	}
	p := rs.c.Process(s)
	if p == nil {
		return fmt.Errorf("n%d: never started", s+1)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if _, ok := p.Wait(stopGrace); !ok {
		return fmt.Errorf("n%d did not exit within %v of its SIGTERM", s+1, stopGrace)
	}
	return nil
}

// sinceListen is a time since a node's restart counted from its listen
// phase instead, where the node reported one.
func sinceListen(since float64, phases []Phase) float64 {
	for _, p := range phases {
		if p.Name == "listen" && p.AtSeconds <= since {
			return since - p.AtSeconds
		}
	}
	return since
}

// caughtUp reports whether node s has applied what the PRIMARY (another
// node, in the same look) has committed.
func caughtUp(sts []*xcev1.StatusResponse, s int) bool {
	if s >= len(sts) || sts[s] == nil {
		return false
	}
	for i, st := range sts {
		if i != s && st != nil && st.Role == xcev1.Role_ROLE_PRIMARY {
			return sts[s].AppliedIndex >= st.CommitIndex
		}
	}
	return false
}

// cold SIGKILLs every node at once, restarts them all, and times the
// first acknowledged write and each node's readiness; then it counts the
// tasks.
func (rs *restarter) cold(ctx context.Context, out *Restarts) error {
	n := rs.c.N()
	wctx, cancel := context.WithTimeout(ctx, restartWait)
	defer cancel()
	if _, err := rs.c.WaitPrimary(wctx, rs.ctl, n-1); err != nil {
		return err
	}
	if err := rs.c.KillAll(10 * time.Second); err != nil {
		return err
	}
	fmt.Fprintf(rs.log, "restarts: SIGKILLed all %d nodes, %d tasks acknowledged; restarting them\n", n, rs.before)
	start := time.Now()
	for i := range n {
		if err := rs.c.Start(i); err != nil {
			return err
		}
	}
	ready := make(map[string]float64, n)
	readyDone := make(chan struct{})
	rctx, stopReady := context.WithCancel(wctx)
	defer stopReady()
	go func() {
		defer close(readyDone)
		tick := time.NewTicker(pollEvery)
		defer tick.Stop()
		for len(ready) < n {
			for i, st := range rs.c.Statuses(rctx, rs.ctl) {
				id := fmt.Sprintf("n%d", i+1)
				if _, seen := ready[id]; !seen && st != nil && (st.Role == xcev1.Role_ROLE_PRIMARY || st.Role == xcev1.Role_ROLE_STANDBY) {
					ready[id] = time.Since(start).Seconds()
				}
			}
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	acked, err := rs.firstWrite(wctx)
	if err != nil {
		stopReady()
		<-readyDone
		return err
	}
	out.ColdRestartSeconds = acked.Sub(start).Seconds()
	rs.before++
	// A node that is not ready soon after the first write is left out of
	// the figures rather than holding up the bench.
	select {
	case <-readyDone:
	case <-time.After(readyWait):
		stopReady()
		<-readyDone
	}
	if len(ready) > 0 {
		out.ColdRestartReadySeconds = ready
	}
	fmt.Fprintf(rs.log, "restarts: first write acknowledged %.3fs after the cold restart\n", out.ColdRestartSeconds)

	p, err := rs.c.WaitPrimary(wctx, rs.ctl, n-1)
	if err != nil {
		return err
	}
	st := rs.status(wctx, p)
	if st == nil {
		return fmt.Errorf("no status from the PRIMARY n%d", p+1)
	}
	out.ColdPhases = map[string][]Phase{}
	for i := range n {
		nst := rs.status(wctx, i)
		if nst == nil {
			continue
		}
		phases := phasesOf(nst)
		if i == p {
			phases = append(phases, Phase{Name: "first_write", AtSeconds: out.ColdRestartSeconds})
		}
		out.ColdPhases[nst.NodeId] = phases
		fmt.Fprintf(rs.log, "restarts: %s (%s): %s\n", nst.NodeId, strings.ToLower(strings.TrimPrefix(nst.Role.String(), "ROLE_")), phaseLine(phases))
	}
	out.TasksAcked, out.TasksAfter = rs.before, st.Tasks
	out.NodeStats = rs.sizes.nodes(ctx, rs.c.ClientAddrs(), rs.dirs)
	return nil
}

// firstWrite submits one new task, attempt after attempt of coldAttempt
// each (the client retrying NOT_READY within), until it is acknowledged,
// and returns when. Every attempt carries the same request id, so that an
// attempt cut off after the task applied gets the first answer (or finds
// the task already there, which is as good).
func (rs *restarter) firstWrite(ctx context.Context) (time.Time, error) {
	cl, err := client.New(rs.c.ClientAddrs(), rs.copts)
	if err != nil {
		return time.Time{}, err
	}
	defer cl.Close()
	id := fmt.Sprintf("cold-%x", rand.Uint32())
	for {
		actx, cancel := context.WithTimeout(ctx, coldAttempt)
		_, err := cl.SubmitWithID(actx, client.Task{ID: id}, id)
		cancel()
		if err == nil || errors.Is(err, client.ErrAlreadyExists) {
			return time.Now(), nil
		}
		if permanent(err) {
			return time.Time{}, err
		}
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("no write acknowledged: %w (last: %v)", ctx.Err(), err)
		}
	}
}

func (rs *restarter) status(ctx context.Context, i int) *xcev1.StatusResponse {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := rs.ctl.Status(sctx, rs.c.Nodes[i].ClientAddr)
	if err != nil {
		return nil
	}
	return st
}

// acknowledgedSubmits counts the submits acknowledged as created.
func acknowledgedSubmits(ops []Op) int {
	n := 0
	for _, op := range ops {
		if op.Kind == Submit && op.Outcome == OK {
			n++
		}
	}
	return n
}

// readyWait bounds the wait, after the first write, for every node's
// readiness.
const readyWait = 30 * time.Second

// pollEvery is the interval of the restart measurements' status polls.
const pollEvery = 20 * time.Millisecond

// catchUpPoll is the interval of the polls that time a follower's
// catch-up, finer than pollEvery: that measurement is a few hundred
// milliseconds long.
const catchUpPoll = 5 * time.Millisecond

// roundPause is how long, between rounds, the restarted node runs before
// the next round: a node restarted again at once would also replay the
// log of the round before, where one that has been up for a few seconds
// has taken a snapshot past it (the trigger is checked every second).
const roundPause = 3 * time.Second

// settle lets node i run for roundPause.
func (rs *restarter) settle(ctx context.Context, i int) {
	fmt.Fprintf(rs.log, "restarts: n%d runs for %v before the next round\n", i+1, roundPause)
	t := time.NewTimer(roundPause)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
