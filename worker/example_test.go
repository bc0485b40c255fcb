package worker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/worker"
)

// echo is a Handler. A real one restores the task's state for every copy,
// processes the task's input while active, and reports how far behind it
// is; this one has nothing to restore, and prints when an active acts.
type echo struct{ acted chan worker.Copy }

func (e echo) Run(ctx context.Context, c worker.Copy, report func(lag int64)) error {
	report(0) // caught up: nothing to restore
	if c.Role == worker.Active {
		// Fence right before every externally visible action: it says
		// no once the copy was taken away or the worker's lease ran out.
		if err := worker.Fence(ctx); err == nil {
			select {
			case e.acted <- c:
			default:
			}
		}
	}
	<-ctx.Done() // taken away, another role, the lease ran out, or stopping
	return nil   // an active writes nothing after Run returns
}

// A worker that runs the tasks a controller gives it, against a one-node
// controller in this process.
func Example() {
	addr, stopController := startController()
	defer stopController()

	h := echo{acted: make(chan worker.Copy, 1)}
	w, err := worker.New(worker.Config{ID: "w1", Controllers: []string{addr}, Capacity: 1}, h)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		fmt.Println("stopped:", <-done)
	}()

	// A client submits a task; the controller places it on w1.
	c, err := client.New([]string{addr}, client.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if _, err := c.Submit(sctx, client.Task{ID: "t1", Stateful: true}); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case cp := <-h.acted:
		fmt.Println(cp.Task, cp.Role)
	case <-time.After(60 * time.Second):
		fmt.Println("no active within a minute")
	}
	// Output:
	// t1 active
	// stopped: <nil>
}
