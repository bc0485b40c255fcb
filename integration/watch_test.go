package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

type watchLine struct {
	Generation uint64 `json:"generation"`
	Full       bool   `json:"full"`
	Tasks      []struct {
		TaskID   string   `json:"task_id"`
		Active   string   `json:"active"`
		Epoch    uint64   `json:"epoch"`
		Standbys []string `json:"standbys"`
	} `json:"tasks"`
	Removed []string `json:"removed"`
}

// watchState applies `xce assignment --watch --json` output: it checks
// that the first line is a full copy and that each later one is the next
// generation (or a full copy), and returns the placements it ends with
// (task: active@epoch) and the last generation.
func watchState(t *testing.T, out string) (map[string]string, uint64, int) {
	t.Helper()
	state := map[string]string{}
	var last uint64
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l watchLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d: %v: %s", lines+1, err, sc.Text())
		}
		switch {
		case lines == 0 && !l.Full:
			t.Fatalf("the first line is not a full copy: %s", sc.Text())
		case l.Full:
			clear(state)
			if l.Generation < last {
				t.Fatalf("line %d: a full copy of generation %d after generation %d", lines+1, l.Generation, last)
			}
		case l.Generation != last+1:
			t.Fatalf("line %d: generation %d after %d (missed or repeated)", lines+1, l.Generation, last)
		}
		for _, p := range l.Tasks {
			state[p.TaskID] = fmt.Sprintf("%s@%d", p.Active, p.Epoch)
		}
		for _, id := range l.Removed {
			delete(state, id)
		}
		last = l.Generation
		lines++
	}
	return state, last, lines
}

// TestAssignmentWatchAcrossFailover: `xce assignment --watch --json`
// against three nodes prints the assignment, then every generation as
// tasks are added, deleted and moved, through a SIGKILL of the primary:
// no generation missed, none twice, and it ends where the cluster is.
func TestAssignmentWatchAcrossFailover(t *testing.T) {
	c, ws := placementCluster(t, 6)
	settledPlacement(t, c, 6, []string{"w1", "w2", "w3"}, raceSlack(30*time.Second))
	watch := startXCE(t, "assignment", "--watch", "--json", "--addr", strings.Join(c.Addrs(), ","))
	testutil.Eventually(t, raceSlack(10*time.Second), "the watch prints the assignment", func() bool {
		return strings.Contains(watch.stdout(), "\n")
	})
	cl := c.Client()
	// A task watch, in this process, from the index the assignment (and
	// so the task set) was read at.
	at, err := c.assignment()
	if err != nil {
		t.Fatal(err)
	}
	var (
		evMu   sync.Mutex
		events []string
		lastAt uint64
	)
	wctx, wstop := context.WithCancel(context.Background())
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- cl.WatchTasks(wctx, at.AppliedIndex, false, func(es []*xcev1.TaskEvent, upTo uint64) error {
			evMu.Lock()
			defer evMu.Unlock()
			for _, e := range es {
				if e.Index <= lastAt {
					return fmt.Errorf("event at index %d after index %d", e.Index, lastAt)
				}
				kind := "+"
				if e.Deleted {
					kind = "-"
				}
				events = append(events, kind+e.Task.TaskId)
			}
			lastAt = max(lastAt, upTo)
			return nil
		})
	}()
	defer func() {
		wstop()
		if err := <-watchDone; err != nil {
			t.Errorf("task watch: %v", err)
		}
		evMu.Lock()
		defer evMu.Unlock()
		if got := strings.Join(events, " "); got != "+t06 -t00 +t07" {
			t.Errorf("task events through the failover: %q, want +t06 -t00 +t07", got)
		}
	}()
	submit := func(id string) {
		ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
		defer cancel()
		if _, err := cl.Submit(ctx, client.Task{ID: id, Stateful: true}); err != nil {
			t.Fatalf("submit %s: %v", id, err)
		}
	}
	seen := func(what string, ok func(a map[string]string) bool) {
		t.Helper()
		testutil.Eventually(t, raceSlack(15*time.Second), "the watch shows "+what, func() bool {
			a, _, _ := watchState(t, watch.stdout())
			return ok(a)
		})
	}
	submit("t06")
	seen("t06 placed", func(a map[string]string) bool { return a["t06"] != "" && !strings.HasPrefix(a["t06"], "@") })
	ctx, cancel := context.WithTimeout(context.Background(), raceSlack(20*time.Second))
	if _, err := cl.Delete(ctx, "t00"); err != nil {
		t.Fatal(err)
	}
	cancel()
	seen("t00 removed", func(a map[string]string) bool { _, ok := a["t00"]; return !ok })
	ws.kill("w3")
	p := c.WaitRoles(raceSlack(5 * time.Second))
	c.Kill(p)
	submit("t07")
	want := []string{"w1", "w2"}
	settledPlacement(t, c, 7, want, itSessionTimeout+raceSlack(30*time.Second))

	// The watcher ends where the cluster is.
	defer func() {
		if t.Failed() {
			out := watch.stdout()
			t.Logf("watch stderr:\n%s\nwatch stdout (last 2,000 bytes):\n%s", watch.stderr(), out[max(0, len(out)-2000):])
		}
	}()
	var a map[string]string
	var gen uint64
	testutil.Eventually(t, raceSlack(10*time.Second), "the watch reaches the cluster's generation", func() bool {
		r, err := c.assignment()
		if err != nil {
			return false
		}
		a, gen, _ = watchState(t, watch.stdout())
		if r.Generation != gen || len(a) != len(r.Tasks) {
			return false
		}
		for _, ta := range r.Tasks {
			if a[ta.Placement.TaskId] != fmt.Sprintf("%s@%d", ta.Placement.Active, ta.Placement.Epoch) {
				return false
			}
		}
		return true
	})
	watch.stop(t)
	_, _, lines := watchState(t, watch.stdout())
	if lines < 4 {
		t.Errorf("the watch printed %d generations, want the first and at least three more", lines)
	}
	t.Logf("the watch printed %d generations up to %d through the failover", lines, gen)
}
