package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xce/xce/internal/localcluster"
	"github.com/xce/xce/internal/testutil"
)

// TestDevNodes: xce dev runs 1, 3, 5 or 7 nodes; any other count is a
// usage error before anything starts.
func TestDevNodes(t *testing.T) {
	for _, n := range []string{"0", "2", "4", "6", "8", "-1"} {
		if _, code := runCmd(t, devCmd(), "--nodes", n, "--dir", t.TempDir()); code != exitUsage {
			t.Errorf("--nodes %s: exit %d, want %d", n, code, exitUsage)
		}
	}
}

// A negative --restart-after is a usage error before anything starts.
func TestDevRestartAfterFlag(t *testing.T) {
	if _, code := runCmd(t, devCmd(), "--restart-after", "-1s", "--dir", t.TempDir()); code != exitUsage {
		t.Errorf("--restart-after -1s: exit %d, want %d", code, exitUsage)
	}
}

// A child that ended starts again --restart-after later, each time it
// ends; with 0 it never does.
func TestRestartPolicy(t *testing.T) {
	ended := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		after     time.Duration
		wantAgain bool
		wantAt    time.Time
	}{
		{"never", 0, false, time.Time{}},
		{"the default", 5 * time.Second, true, ended.Add(5 * time.Second)},
		{"soon", time.Millisecond, true, ended.Add(time.Millisecond)},
		{"negative: never", -time.Second, false, time.Time{}},
	} {
		at, again := restartPolicy{after: tc.after}.next(ended)
		if again != tc.wantAgain || !at.Equal(tc.wantAt) {
			t.Errorf("%s: next = %v, %v; want %v, %v", tc.name, at, again, tc.wantAt, tc.wantAgain)
		}
	}
}

// A report names the child, how it ended, its log and the log's last
// lines, and whether it starts again.
func TestExitReport(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		tail         []string
		after        time.Duration
		want         string
	}{
		{"w2", "exited (signal: killed)", []string{"a", "b"}, 5 * time.Second,
			"w2 exited (signal: killed); the last lines of logs/w2.log:\n    | a\n    | b\n  w2 starts again in 5s\n"},
		{"n1", "exited (exit status 1)", nil, 0,
			"n1 exited (exit status 1); its log logs/n1.log is empty\n  n1 is not started again (--restart-after 0)\n"},
		{"input", "failed: kafka sasl password file: missing", []string{"x"}, 2 * time.Second,
			"input failed: kafka sasl password file: missing; the last lines of logs/input.log:\n    | x\n  input starts again in 2s\n"},
	} {
		if got := exitReport(tc.name, tc.status, "logs/"+tc.name+".log", tc.tail, tc.after); got != tc.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tc.name, got, tc.want)
		}
	}
	if got := restartLine("w2", 42); got != "w2 started again, pid 42\n" {
		t.Errorf("restartLine: %q", got)
	}
	if got := restartLine("input", 0); got != "input started again\n" {
		t.Errorf("restartLine in process: %q", got)
	}
}

// lastLines reads only the end of a log: its last lines, the first one
// read dropped when it may be cut, long lines shortened.
func TestLastLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var lines []string
	for i := range 15 {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	long := strings.Repeat("x", devTailBytes) + "\nlast\n"
	for _, tc := range []struct {
		name string
		path string
		n    int
		want []string
	}{
		{"more lines than asked", write("15", strings.Join(lines, "\n")+"\n"), 10, lines[5:]},
		{"fewer lines than asked", write("3", "a\nb\nc"), 10, []string{"a", "b", "c"}},
		{"empty", write("empty", ""), 10, nil},
		{"missing", filepath.Join(dir, "missing"), 10, nil},
		{"a cut first line is dropped", write("big", "head\n"+long), 10, []string{"last"}},
		{"a long line is shortened", write("wide", strings.Repeat("y", devTailWidth+5)+"\n"), 10, []string{strings.Repeat("y", devTailWidth) + "…"}},
	} {
		if got := lastLines(tc.path, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A child process that keeps exiting is reported each time and started
// again at the policy's pace, never sooner; Stop cancels the pending
// restart and leaves nothing running.
func TestSupervisorRestartsAChildThatExits(t *testing.T) {
	const after = 100 * time.Millisecond
	log := filepath.Join(t.TempDir(), "c.log")
	var mu sync.Mutex
	var starts []time.Time
	c := &procChild{run: func() (*localcluster.Process, error) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return localcluster.StartProcess("/bin/sh", log, true, "-c", "echo the child ran; exit 3")
	}}
	var out testutil.SyncBuffer
	s := newSupervisor(context.Background(), &out, restartPolicy{after: after})
	if err := s.add(stageWorkers, "c", log, c); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "three restarts", func() bool {
		return strings.Count(out.String(), "c started again, pid ") >= 3
	})
	s.Stop(time.Second)
	mu.Lock()
	n := len(starts)
	for i := 1; i < n; i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < after {
			t.Errorf("start %d came %v after the one before, within --restart-after %v", i, gap, after)
		}
	}
	mu.Unlock()
	report := "c exited (exit status 3); the last lines of " + log + ":\n    | the child ran\n"
	if !strings.Contains(out.String(), report) || !strings.Contains(out.String(), "c starts again in 100ms\n") {
		t.Errorf("output:\n%s\nwant the report %q", out.String(), report)
	}
	if !c.current().Exited() {
		t.Error("the child runs after Stop")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != n {
		t.Errorf("%d starts after Stop", len(starts)-n)
	}
}

// Stop ends the running children with SIGTERM, stage by stage (the
// workers before the broker), ends the generator, and cancels a pending
// restart.
func TestSupervisorStop(t *testing.T) {
	dir := t.TempDir()
	order := filepath.Join(dir, "order")
	// sh runs the trap once its sleep is done.
	stoppable := func(name string) *procChild {
		script := fmt.Sprintf("trap 'echo %s >> %s; exit 0' TERM; while :; do sleep 0.05; done", name, order)
		return &procChild{run: func() (*localcluster.Process, error) {
			return localcluster.StartProcess("/bin/sh", filepath.Join(dir, name+".log"), true, "-c", script)
		}}
	}
	broker, worker := stoppable("kafka"), stoppable("w1")
	crashing := &procChild{run: func() (*localcluster.Process, error) {
		return localcluster.StartProcess("/bin/sh", filepath.Join(dir, "w2.log"), true, "-c", "exit 1")
	}}
	generated := make(chan struct{})
	input := &goChild{run: func(ctx context.Context) error {
		<-ctx.Done()
		close(generated)
		return nil
	}}
	var out testutil.SyncBuffer
	s := newSupervisor(context.Background(), &out, restartPolicy{after: time.Hour})
	for _, c := range []struct {
		stage devStage
		name  string
		c     devChild
	}{{stageBroker, "kafka", broker}, {stageInput, "input", input}, {stageWorkers, "w1", worker}, {stageWorkers, "w2", crashing}} {
		if err := s.add(c.stage, c.name, filepath.Join(dir, c.name+".log"), c.c); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the crashing child's report", func() bool {
		return strings.Contains(out.String(), "w2 starts again in 1h0m0s")
	})
	s.Stop(10 * time.Second)
	for _, c := range []*procChild{worker, broker, crashing} {
		if !c.current().Exited() {
			t.Errorf("pid %d runs after Stop", c.pid())
		}
	}
	select {
	case <-generated:
	default:
		t.Error("the generator runs after Stop")
	}
	if b, _ := os.ReadFile(order); string(b) != "w1\nkafka\n" {
		t.Errorf("stopped in the order %q, want the worker, then the broker", b)
	}
	if strings.Contains(out.String(), "started again") {
		t.Errorf("a restart after Stop:\n%s", out.String())
	}
}

// A generator that fails is reported with its error and run again.
func TestSupervisorRestartsAFailedGenerator(t *testing.T) {
	var out testutil.SyncBuffer
	s := newSupervisor(context.Background(), &out, restartPolicy{after: 10 * time.Millisecond})
	var mu sync.Mutex
	runs := 0
	g := &goChild{run: func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		runs++
		if runs == 1 {
			return errors.New("no broker")
		}
		return nil
	}}
	if err := s.add(stageInput, "input", filepath.Join(t.TempDir(), "input.log"), g); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the restart", func() bool {
		return strings.Contains(out.String(), "input started again\n")
	})
	s.Stop(time.Second)
	if !strings.Contains(out.String(), "input failed: no broker; its log ") {
		t.Errorf("output:\n%s", out.String())
	}
}
