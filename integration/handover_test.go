package integration

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/worker/kvworker"
)

// Planned handovers (docs/design.md, "Draining and leaving"): the workers of
// the Kafka rig are restarted one after another with SIGTERM, or drained in
// turn, under the generator's steady input (100 records/s). Every input
// record must reach the output exactly once and, since each active is
// handed to a caught-up standby that is granted it within round trips,
// within a short delay: the input record's timestamp to its output
// record's. The figures are logged; the bound asserted is loose, for a
// noisy machine (docs/benchmarks.md has the measured ones).

// handoverRounds repeats the rolling restart, for figures over more
// inputs than CI needs (docs/benchmarks.md).
var handoverRounds = flag.Int("handover.rounds", 1, "rolling restarts of every worker in TestWorkerRollingRestartHandsOver")

// handoverLimit is the delay every input must stay within.
func handoverLimit() time.Duration { return raceSlack(750 * time.Millisecond) }

// inputTimes reads the input topic to its end: each record's timestamp by
// partition and offset.
func (r *kvRig) inputTimes() map[[2]int64]time.Time {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
	defer cancel()
	ends, err := r.adm.ListEndOffsets(ctx, kvworker.DefaultInputTopic)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[[2]int64]time.Time{}
	consumeToEnd(r.t, ctx, r.brokers, kvworker.DefaultInputTopic, ends, func(rec *kgo.Record) {
		out[[2]int64{int64(rec.Partition), rec.Offset}] = rec.Timestamp
	})
	return out
}

// delay is one input record's time to its output.
type delay struct {
	task, off int64
	in        time.Time
	d         time.Duration
}

// delays pairs every output record with its input record.
func (r *kvRig) delays(byTask map[int64][]outRec) []delay {
	r.t.Helper()
	in := r.inputTimes()
	var out []delay
	for task, recs := range byTask {
		for _, o := range recs {
			at, ok := in[[2]int64{task, o.off}]
			if !ok {
				r.t.Fatalf("output for input %d:%d, which the input topic does not hold", task, o.off)
			}
			out = append(out, delay{task: task, off: o.off, in: at, d: o.at.Sub(at)})
		}
	}
	slices.SortFunc(out, func(a, b delay) int { return int(a.d - b.d) })
	return out
}

// since keeps the delays of inputs produced at or after from: before the
// first settle, the tasks were still starting.
func since(ds []delay, from time.Time) []delay {
	return slices.DeleteFunc(ds, func(d delay) bool { return d.in.Before(from) })
}

// delayStats is "p50 …, p99 …, max … over n inputs".
func delayStats(ds []delay) string {
	if len(ds) == 0 {
		return "no inputs"
	}
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))].d }
	return fmt.Sprintf("p50 %v, p99 %v, max %v over %d inputs", q(0.50), q(0.99), ds[len(ds)-1].d, len(ds))
}

// checkDelays logs the delays and fails for an input above the limit.
func (r *kvRig) checkDelays(what string, ds []delay) {
	r.t.Helper()
	r.t.Logf("%s: input to output %s", what, delayStats(ds))
	for i := len(ds) - 1; i >= max(len(ds)-3, 0); i-- {
		r.t.Logf("%s: input %d:%d at %s waited %v", what, ds[i].task, ds[i].off, ds[i].in.Format("15:04:05.000"), ds[i].d)
	}
	limit := handoverLimit()
	bad := 0
	for i := len(ds) - 1; i >= 0 && ds[i].d > limit; i-- {
		if bad++; bad <= 10 {
			r.t.Errorf("%s: input %d:%d (at %s) waited %v for its output, more than %v", what, ds[i].task, ds[i].off,
				ds[i].in.Format("15:04:05.000"), ds[i].d, limit)
		}
	}
}

// registrations are worker id's "registered" log lines.
func (r *kvRig) registrations(id string) []logLine {
	var out []logLine
	for _, l := range r.logLines(id) {
		if l.Message == "registered" {
			out = append(out, l)
		}
	}
	return out
}

// restart sends worker id SIGTERM, expects it to hand its actives over and
// exit 0, starts it again on its store and waits until the placement has
// settled with it.
func (r *kvRig) restart(id string) {
	r.t.Helper()
	p := r.proc(id)
	start := time.Now()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	code, ok := p.Wait(raceSlack(40 * time.Second))
	switch {
	case !ok:
		r.t.Fatalf("%s did not exit within %v of SIGTERM", id, raceSlack(40*time.Second))
	case code != 0:
		r.t.Fatalf("%s exited %d after SIGTERM, want 0", id, code)
	}
	if _, ok := first(r.logLines(id), func(l logLine) bool { return l.Message == "every active handed over" }); !ok {
		r.t.Errorf("%s did not hand every active over before it exited", id)
	}
	r.t.Logf("%s: SIGTERM to exit 0 in %v", id, time.Since(start).Round(time.Millisecond))
	runs := len(r.registrations(id))
	r.startWorker(id, r.c.Addrs())
	// Registered, so its signal handler is in place for the next round.
	testutil.Eventually(r.t, raceSlack(20*time.Second), id+" registers again", func() bool {
		return len(r.registrations(id)) > runs
	})
	r.settle()
}

// TestWorkerRollingRestartHandsOver: each worker in turn gets SIGTERM,
// hands its actives over, exits 0 and starts again on its store; the input
// keeps flowing to the output exactly once and without a long wait.
func TestWorkerRollingRestartHandsOver(t *testing.T) {
	r := newKVRig(t, nil)
	r.settle()
	from := time.Now()
	for round := range *handoverRounds {
		start := time.Now()
		for _, id := range kvWorkerIDs {
			r.restart(id)
		}
		t.Logf("rolling restart %d of %d workers took %v", round+1, len(kvWorkerIDs), time.Since(start).Round(time.Millisecond))
	}
	r.checkDelays("rolling restart", since(r.delays(r.checkExactlyOnce()), from))
}

// drainCLI runs `xce workers drain|undrain id --json`.
func (r *kvRig) drainCLI(verb, id string) drainJSONOut {
	r.t.Helper()
	res := runXCE(r.t, 20*time.Second, "workers", verb, id, "--json", "--addr", strings.Join(r.c.Addrs(), ","), "--timeout", "10s")
	if res.Code != 0 {
		r.t.Fatalf("xce workers %s %s: exit %d: %s", verb, id, res.Code, res.Stderr)
	}
	var out drainJSONOut
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		r.t.Fatalf("xce workers %s --json: %v: %s", verb, err, res.Stdout)
	}
	return out
}

type drainJSONOut struct {
	WorkerID string   `json:"worker_id"`
	Drained  bool     `json:"drained"`
	OnlyCopy []string `json:"only_copy"`
}

// drainState is worker id's drain state in `xce workers --json`.
func (r *kvRig) drainState(id string) (string, error) {
	res := runXCE(r.t, 20*time.Second, "workers", "--json", "--addr", strings.Join(r.c.Addrs(), ","), "--timeout", "5s")
	if res.Code != 0 {
		return "", fmt.Errorf("xce workers: exit %d: %s", res.Code, res.Stderr)
	}
	var out struct {
		Workers []struct {
			ID    string `json:"worker_id"`
			State string `json:"drain_state"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		return "", err
	}
	for _, w := range out.Workers {
		if w.ID == id {
			return w.State, nil
		}
	}
	return "", fmt.Errorf("%s has no session", id)
}

// drainInTurn drains worker id until it runs no active (its state
// "drained"), then undrains it and waits for the placement to settle.
func (r *kvRig) drainInTurn(id string) {
	r.t.Helper()
	start := time.Now()
	if out := r.drainCLI("drain", id); !out.Drained || len(out.OnlyCopy) != 0 {
		r.t.Fatalf("drain %s: %+v", id, out)
	}
	if err := testutil.Poll(raceSlack(30*time.Second), 50*time.Millisecond, func() error {
		st, err := r.drainState(id)
		if err == nil && st != "drained" {
			err = fmt.Errorf("%s is %q", id, st)
		}
		return err
	}); err != nil {
		r.t.Fatalf("drain of %s: %v", id, err)
	}
	r.t.Logf("%s: drained in %v", id, time.Since(start).Round(time.Millisecond))
	r.drainCLI("undrain", id)
	r.settle()
}

// TestWorkerDrainInTurnHandsOver: each worker in turn is drained with `xce
// workers drain` (its actives move to other workers as planned handovers)
// and undrained; in the middle one worker is SIGKILLed and its tasks move
// within the session timeout and a second. Every input reaches the output
// exactly once; those not held up by the kill, without a long wait.
func TestWorkerDrainInTurnHandsOver(t *testing.T) {
	r := newKVRig(t, nil)
	before := r.settle()
	from := time.Now()
	r.drainInTurn("w1")

	// A SIGKILL in the middle: w2's tasks move once its session expires.
	victim := "w2"
	tasks := activesOf(before, victim)
	if a, err := r.c.assignment(); err == nil {
		tasks = activesOf(placements(a), victim)
	}
	killed := time.Now()
	if _, err := r.proc(victim).Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(itSessionTimeout+raceSlack(5*time.Second), 50*time.Millisecond, func() error {
		a, err := r.c.assignment()
		if err != nil {
			return err
		}
		for _, task := range tasks {
			if p := placements(a)[task]; p == nil || p.Active == "" || p.Active == victim {
				return fmt.Errorf("%s: %v", task, p)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%s's tasks %v did not move: %v", victim, tasks, err)
	}
	moved := time.Since(killed)
	t.Logf("SIGKILL of %s: its tasks %v moved after %v (session timeout %v)", victim, tasks, moved.Round(time.Millisecond), itSessionTimeout)
	if limit := itSessionTimeout + raceSlack(time.Second); moved > limit {
		t.Errorf("%s's tasks moved %v after its SIGKILL, more than the session timeout and a second (%v)", victim, moved, limit)
	}
	r.startWorker(victim, r.c.Addrs())
	r.settle()
	recovered := time.Now()

	r.drainInTurn("w3")
	r.drainInTurn("w2")

	ds := since(r.delays(r.checkExactlyOnce()), from)
	var planned, kill []delay
	for _, d := range ds {
		// Inputs of the killed worker's tasks from before the kill until it
		// was back and settled waited for its session to expire.
		if d.in.After(killed.Add(-time.Second)) && d.in.Before(recovered) && slices.Contains(tasks, kvTask(int(d.task))) {
			kill = append(kill, d)
			continue
		}
		planned = append(planned, d)
	}
	t.Logf("the killed worker's tasks: input to output %s", delayStats(kill))
	r.checkDelays("drains", planned)
}
