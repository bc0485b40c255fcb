package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/worker"
)

// starts is a Handler that tells when each active copy starts.
type starts chan worker.Copy

func (s starts) Run(ctx context.Context, c worker.Copy, report func(int64)) error {
	report(0)
	if c.Role == worker.Active {
		s <- c
	}
	<-ctx.Done()
	return nil
}

// TestGrantWithinARoundTripOfTheCommit: workers heartbeat at a long
// interval, yet a new task's active starts on its worker within a round
// trip of the commit that placed it, not at the next heartbeat: the primary
// holds each worker's heartbeat and answers it as soon as the worker's
// copies change (docs/design.md, "Draining and leaving"). The commit is
// when a watcher of the assignment first sees the task placed.
func TestGrantWithinARoundTripOfTheCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("a real controller with a long heartbeat interval")
	}
	const interval, n = 3 * time.Second, 3
	addr, stop := startControllerBeating(interval)
	defer stop()
	h := make(starts, n)
	w, err := worker.New(worker.Config{ID: "w1", Controllers: []string{addr}, Capacity: 1, DrainTimeout: -1}, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	c, err := client.New([]string{addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	placed := watchPlacements(t, c)
	var fromCommit []time.Duration
	for i := range n {
		task := fmt.Sprintf("t%d", i)
		started := submitAndStart(t, c, h, task, 2*interval)
		fromCommit = append(fromCommit, started.Sub(placed.at(task)).Round(time.Millisecond))
	}
	t.Logf("heartbeat interval %v: commit → active start %v", interval, fromCommit)
	if m := slices.Max(fromCommit); m > interval/4 {
		t.Errorf("an active started %v after the commit that placed it, want within %v", m, interval/4)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// submitAndStart submits task and returns when its active started (on h),
// failing the test past within.
func submitAndStart(t *testing.T, c *client.Client, h starts, task string, within time.Duration) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if _, err := c.Submit(ctx, client.Task{ID: task, Stateful: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case cp := <-h:
		if cp.Task != task {
			t.Fatalf("%s's active started, want %s's", cp.Task, task)
		}
		return time.Now()
	case <-ctx.Done():
		t.Fatalf("%s's active did not start within %v", task, within)
		return time.Time{}
	}
}

// placements records when a watcher of the assignment first sees each
// task placed.
type placements struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func watchPlacements(t *testing.T, c *client.Client) *placements {
	p := &placements{first: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.WatchAssignment(ctx, 0, false, func(u client.AssignmentUpdate) error {
			now := time.Now()
			p.mu.Lock()
			defer p.mu.Unlock()
			for _, tp := range u.Tasks {
				if _, ok := p.first[tp.TaskId]; !ok && tp.Active != "" {
					p.first[tp.TaskId] = now
				}
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

// at is when task was first seen placed (now if not yet: the watcher may
// see it after the worker started it).
func (p *placements) at(task string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if at, ok := p.first[task]; ok {
		return at
	}
	return time.Now()
}
