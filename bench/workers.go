package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/xce/xce/client"
	"github.com/xce/xce/worker"
)

// DefaultWatchWorkers is how many synthetic workers a run with watchers
// starts when Options.Workers is 0.
const DefaultWatchWorkers = 3

// idle is a worker.Handler that holds every copy it is given and does
// nothing with it: the synthetic workers exist so that the run's tasks
// get placed, and each placement makes a generation watchers receive.
type idle struct{}

func (idle) Run(ctx context.Context, _ worker.Copy, report func(lag int64)) error {
	report(0)
	<-ctx.Done()
	return nil
}

// workerPool is the run's in-process synthetic workers; stop ends them.
type workerPool struct {
	ids    []string
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startWorkers starts n workers of the idle handler against endpoints,
// each on its own goroutine until stop. They leave at once when stopped
// (no hand-over): the run is over by then.
func startWorkers(endpoints []string, creds client.Credentials, n int) (*workerPool, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &workerPool{cancel: cancel}
	nonce := fmt.Sprintf("%x", rand.Uint32())
	for i := range n {
		id := fmt.Sprintf("bench-%s-w%d", nonce, i)
		w, err := worker.New(worker.Config{ID: id, Controllers: endpoints, Capacity: 1, Credentials: creds,
			DrainTimeout: -1}, idle{})
		if err != nil {
			p.stop()
			return nil, err
		}
		p.ids = append(p.ids, id)
		p.wg.Go(func() { _ = w.Run(ctx) })
	}
	return p, nil
}

// waitPlaced polls the PRIMARY's worker sessions until every worker of
// the pool has one and together they hold at least tasks actives (the
// tasks already there, placed before the run).
func (p *workerPool) waitPlaced(ctx context.Context, ctl *client.Client, tasks int, timeout time.Duration) error {
	missing, actives := len(p.ids), 0
	err := pollUntil(ctx, timeout, func() (bool, error) {
		ws, err := ctl.ListWorkers(ctx)
		if err != nil {
			return false, nil
		}
		have := map[string]bool{}
		actives = 0
		for _, w := range ws.Workers {
			have[w.WorkerId] = true
			actives += len(w.Actives)
		}
		missing = 0
		for _, id := range p.ids {
			if !have[id] {
				missing++
			}
		}
		return missing == 0 && actives >= tasks, nil
	})
	if err != nil {
		return fmt.Errorf("synthetic workers: %d of %d not registered, %d of %d tasks placed: %w",
			missing, len(p.ids), actives, tasks, err)
	}
	return nil
}

// stop ends every worker and waits for them.
func (p *workerPool) stop() {
	p.cancel()
	p.wg.Wait()
}
