package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// WatchMemory is what the idle watchers cost the nodes: each node's live
// heap, goroutine stacks and goroutines before the watchers opened and
// once they had all had their first message (no write in between), and
// the differences summed over the nodes, per watcher.
type WatchMemory struct {
	// GCForced: every node collected its garbage right before each
	// reading (the bench asks through /debug/pprof, which a --local
	// cluster serves for it), so the live heap is exact. Otherwise it is
	// as of each node's last collection, which may predate the watchers.
	GCForced             bool              `json:"gc_forced"`
	HeapBytesPerWatcher  float64           `json:"heap_bytes_per_watcher"`
	StackBytesPerWatcher float64           `json:"stack_bytes_per_watcher"`
	GoroutinesPerWatcher float64           `json:"goroutines_per_watcher"`
	Nodes                []WatchNodeMemory `json:"nodes"`
}

// WatchNodeMemory is one node's figures before and after the watchers
// opened.
type WatchNodeMemory struct {
	Endpoint         string `json:"endpoint"`
	ID               string `json:"id,omitempty"`
	Watchers         int    `json:"watchers"`
	HeapLiveBefore   uint64 `json:"heap_live_before"`
	HeapLiveAfter    uint64 `json:"heap_live_after"`
	StackBefore      uint64 `json:"stack_inuse_before"`
	StackAfter       uint64 `json:"stack_inuse_after"`
	GoroutinesBefore uint64 `json:"goroutines_before"`
	GoroutinesAfter  uint64 `json:"goroutines_after"`
	Error            string `json:"error,omitempty"`
}

// memSample is one node's reading.
type memSample struct {
	m      memMetrics
	forced bool
	err    error
}

// memSamples reads every endpoint's memory, each right after asking it to
// collect its garbage.
func (s *scraper) memSamples(ctx context.Context, endpoints []string) []memSample {
	out := make([]memSample, len(endpoints))
	for i, ep := range endpoints {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out[i].forced = s.collect(sctx, ep)
		out[i].m, out[i].err = s.metrics(sctx, ep)
		cancel()
	}
	return out
}

// collect asks a node for a heap profile after a collection
// (/debug/pprof/heap?gc=1), for the collection; false when the node does
// not serve profiles.
func (s *scraper) collect(ctx context.Context, ep string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.scheme+"://"+ep+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return false
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// watchMemory puts the readings before and after together, node by node
// (before and after are in the order of nodes).
func watchMemory(nodes []WatchNode, before, after []memSample) *WatchMemory {
	out := &WatchMemory{GCForced: true}
	var heap, stack, gor int64
	n := 0
	for i, node := range nodes {
		b, a := before[i], after[i]
		nm := WatchNodeMemory{Endpoint: node.Endpoint, ID: node.ID, Watchers: node.Watchers}
		out.GCForced = out.GCForced && b.forced && a.forced
		if b.err != nil || a.err != nil {
			nm.Error = fmt.Sprintf("before: %v; after: %v", b.err, a.err)
			out.Nodes = append(out.Nodes, nm)
			continue
		}
		nm.HeapLiveBefore, nm.HeapLiveAfter = b.m.HeapLive, a.m.HeapLive
		nm.StackBefore, nm.StackAfter = b.m.StackInuse, a.m.StackInuse
		nm.GoroutinesBefore, nm.GoroutinesAfter = b.m.Goroutines, a.m.Goroutines
		heap += int64(a.m.HeapLive) - int64(b.m.HeapLive)
		stack += int64(a.m.StackInuse) - int64(b.m.StackInuse)
		gor += int64(a.m.Goroutines) - int64(b.m.Goroutines)
		n += node.Watchers
		out.Nodes = append(out.Nodes, nm)
	}
	if n > 0 {
		out.HeapBytesPerWatcher = float64(heap) / float64(n)
		out.StackBytesPerWatcher = float64(stack) / float64(n)
		out.GoroutinesPerWatcher = float64(gor) / float64(n)
	}
	return out
}

// PrintWatchMemory writes the idle watchers' cost, a line per node.
func PrintWatchMemory(w io.Writer, m *WatchMemory) {
	if m == nil {
		return
	}
	gc := "after a forced GC"
	if !m.GCForced {
		gc = "live heap as of each node's last GC (no /debug/pprof to force one)"
	}
	fmt.Fprintf(w, "idle watcher, per watcher on the nodes: heap %.0f B  stacks %.0f B  goroutines %.2f  (%s)\n",
		m.HeapBytesPerWatcher, m.StackBytesPerWatcher, m.GoroutinesPerWatcher, gc)
	for _, n := range m.Nodes {
		if n.Error != "" {
			fmt.Fprintf(w, "  %-4s %s  %d watchers  (%s)\n", n.ID, n.Endpoint, n.Watchers, n.Error)
			continue
		}
		fmt.Fprintf(w, "  %-4s %s  %d watchers  live heap %.1f -> %.1f MiB  stacks %.1f -> %.1f MiB  goroutines %d -> %d\n",
			n.ID, n.Endpoint, n.Watchers, mib(n.HeapLiveBefore), mib(n.HeapLiveAfter), mib(n.StackBefore), mib(n.StackAfter),
			n.GoroutinesBefore, n.GoroutinesAfter)
	}
}
