package kvworker

// DELETE AT MERGE. Stand-ins for the worker library's symbols that are not
// on this branch yet. At merge, replace this file's contents with:
//
//	type Copy = worker.Copy
//	var fenceCheck = worker.Fence
//	func runLibrary(ctx context.Context, cfg worker.Config, h *Handler) error {
//		w, err := worker.New(cfg, h)
//		if err != nil {
//			return err
//		}
//		return w.Run(ctx)
//	}
//
// The runner below only lets `xce worker --store` and `xce dev` run on
// this branch: no lease, no backoff, no facts.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/worker"
)

// Copy is worker.Copy: one copy of a task the worker holds.
type Copy struct {
	Task  string
	Role  worker.Role
	Epoch uint64
}

// fenceCheck is worker.Fence: an error once the copy may no longer write.
func fenceCheck(ctx context.Context) error { return ctx.Err() }

type standinCopy struct {
	c      Copy
	cancel context.CancelFunc
	done   chan struct{}
	lag    atomic.Int64
}

// runLibrary is worker.New + Run.
func runLibrary(ctx context.Context, cfg worker.Config, h *Handler) error {
	if cfg.ID == "" || len(cfg.Controllers) == 0 {
		return worker.ErrConfig
	}
	cl, err := client.New(cfg.Controllers, client.Options{Credentials: cfg.Credentials})
	if err != nil {
		return err
	}
	defer cl.Close()
	var wg sync.WaitGroup
	copies := map[string]*standinCopy{}
	stop := func(t string) {
		r := copies[t]
		r.cancel()
		<-r.done
		delete(copies, t)
	}
	defer func() {
		for t := range copies {
			stop(t)
		}
		wg.Wait()
	}()
	registered, interval := false, time.Second
	for {
		if !registered {
			r, err := cl.Register(ctx, cfg.ID, cfg.Capacity, cfg.ClientAddr)
			if err == nil {
				registered = true
				if r.HeartbeatIntervalMs > 0 {
					interval = time.Duration(r.HeartbeatIntervalMs) * time.Millisecond
				}
			} else if errors.Is(err, client.ErrUnauthenticated) || errors.Is(err, client.ErrPermissionDenied) {
				return err
			}
		}
		if registered {
			req := &xcev1.HeartbeatRequest{WorkerId: cfg.ID, Lags: map[string]int64{}}
			for t, r := range copies {
				if l := r.lag.Load(); l >= 0 {
					req.Lags[t] = l
				}
				select {
				case <-r.done:
				default:
					if r.c.Role == worker.Active {
						req.Running = append(req.Running, t)
					}
				}
			}
			resp, err := cl.Heartbeat(ctx, req)
			switch {
			case errors.Is(err, client.ErrUnknownWorker):
				registered = false
			case err == nil:
				want := map[string]Copy{}
				for _, l := range []struct {
					tasks []string
					role  worker.Role
				}{{resp.Warmups, worker.Warmup}, {resp.Standbys, worker.Standby}, {resp.PendingActives, worker.Standby}, {resp.Actives, worker.Active}} {
					for _, t := range l.tasks {
						want[t] = Copy{Task: t, Role: l.role, Epoch: resp.Epochs[t]}
					}
				}
				for t, r := range copies {
					if w, ok := want[t]; !ok || w != r.c {
						stop(t)
					}
				}
				for t, c := range want {
					if _, ok := copies[t]; ok {
						continue
					}
					cctx, cancel := context.WithCancel(ctx)
					r := &standinCopy{c: c, cancel: cancel, done: make(chan struct{})}
					r.lag.Store(-1)
					copies[t] = r
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer close(r.done)
						if err := h.Run(cctx, c, r.lag.Store); err != nil {
							h.log.Warn().Err(err).Str("task", c.Task).Msg("copy ended")
						}
					}()
				}
			}
		}
		if !backoff.Sleep(ctx, interval) {
			return nil
		}
	}
}
