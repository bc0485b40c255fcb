package kvworker

import (
	"context"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Lags of stores no copy holds. The worker library sends a Lagger's lags
// in place of what running copies report, so that a task's state on this
// worker does not vanish from the assignor's view the moment its copy
// stops (a move, a restart): a worker that held a task keeps a store that
// is caught up, or nearly, and the assignor brings the task back there
// without a restore from the start, and does not mistake a copy stopping for
// state lost (docs/design.md, "A stateful worker on Kafka").

// lagRefresh spaces the changelog end lookups behind the idle stores' lags.
const lagRefresh = 5 * time.Second

// lagBook is what the handler knows of its stores' lags.
type lagBook struct {
	mu sync.Mutex
	// held: the lag each running copy last reported, by task.
	held map[string]int64
	// idle: the changelog position of each store no copy holds, and its
	// lag at the last lookup of the changelog's end (-1: not looked up).
	idle map[string]idleStore
}

type idleStore struct {
	next, lag int64
}

// setHeld records a running copy's lag.
func (b *lagBook) setHeld(task string, lag int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held == nil {
		b.held = map[string]int64{}
	}
	b.held[task] = lag
	delete(b.idle, task)
}

// release records that task's copy stopped with its store at next: from
// now on its lag grows with the changelog.
func (b *lagBook) release(task string, next int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	lag, ok := b.held[task]
	delete(b.held, task)
	if b.idle == nil {
		b.idle = map[string]idleStore{}
	}
	if !ok {
		// A copy stopped before it reported: the store's lag is what it
		// was (a task must not vanish from the lags for a moment, or the
		// assignor takes it for state lost).
		lag = -1
		if prev, ok := b.idle[task]; ok {
			lag = prev.lag
		}
	}
	b.idle[task] = idleStore{next: next, lag: lag}
}

// Lags implements worker.Lagger: every running copy's lag, and the lag
// of every store on disk that no copy holds, as of the last lookup.
func (h *Handler) Lags() map[string]int64 {
	b := &h.lags
	b.mu.Lock()
	defer b.mu.Unlock()
	out := maps.Clone(b.held)
	if out == nil {
		out = map[string]int64{}
	}
	for t, s := range b.idle {
		if _, ok := out[t]; !ok && s.lag >= 0 {
			out[t] = s.lag
		}
	}
	return out
}

// scanStores notes every store in the store directory that no copy holds,
// at its changelog position.
func (h *Handler) scanStores(ctx context.Context) {
	entries, err := os.ReadDir(h.cfg.StoreDir)
	if err != nil {
		return // none yet
	}
	for _, e := range entries {
		task, ok := strings.CutSuffix(e.Name(), ".db")
		if !ok || e.IsDir() {
			continue
		}
		if _, err := Partition(task); err != nil {
			continue
		}
		h.lags.mu.Lock()
		_, held := h.lags.held[task]
		_, known := h.lags.idle[task]
		h.lags.mu.Unlock()
		if held || known {
			continue
		}
		st, err := openStore(ctx, h.cfg.StoreDir, task)
		if err != nil {
			continue
		}
		next, err := st.next()
		st.close()
		if err == nil {
			h.lags.release(task, next)
		}
	}
}

// refreshLags looks the changelog's end up once and sets the lag of every
// idle store from it.
func (h *Handler) refreshLags(ctx context.Context, adm *kadm.Client) {
	h.lags.mu.Lock()
	n := len(h.lags.idle)
	h.lags.mu.Unlock()
	if n == 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, lagRefresh)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(lctx, h.cfg.ChangelogTopic)
	if err != nil {
		h.log.Debug().Err(err).Msg("the changelog's end is unknown: the lags of idle stores stay as they were")
		return
	}
	b := &h.lags
	b.mu.Lock()
	defer b.mu.Unlock()
	for t, s := range b.idle {
		p, _ := Partition(t)
		if o, ok := ends.Lookup(h.cfg.ChangelogTopic, p); ok && o.Err == nil {
			s.lag = max(o.Offset-s.next, 0)
			b.idle[t] = s
		}
	}
}

// firstLags looks the idle stores' lags up once, waiting at most
// lagRefresh for the brokers.
func (h *Handler) firstLags(ctx context.Context) {
	cl, err := kgo.NewClient(h.clientOpts()...)
	if err != nil {
		return
	}
	defer cl.Close()
	h.refreshLags(ctx, kadm.NewClient(cl))
}

// watchLags keeps the idle stores' lags fresh until ctx ends.
func (h *Handler) watchLags(ctx context.Context) {
	cl, err := kgo.NewClient(h.clientOpts()...)
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	t := time.NewTicker(lagRefresh)
	defer t.Stop()
	for {
		h.refreshLags(ctx, adm)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
