package bench

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// The watchers' records sum up: a generation's delivery runs from the
// earliest apply time any node reported for it; every watcher's
// deliveries count, per node too; a watcher below the highest generation
// is behind; full copies after the first are resyncs.
func TestWatchResult(t *testing.T) {
	ms := int64(time.Millisecond)
	s := &watchSet{nodes: []WatchNode{{Endpoint: "a", Watchers: 2}, {Endpoint: "b", Watchers: 1}}}
	mk := func(gen uint64, fulls int64, got ...delivery) *watcher {
		w := &watcher{got: got, fulls: fulls, messages: int64(len(got)) + fulls}
		w.gen.Store(gen)
		return w
	}
	s.watchers = []*watcher{
		// On node a (the PRIMARY's apply times: 100 and 200 ms).
		mk(2, 1, delivery{1, 100 * ms, 110 * ms}, delivery{2, 200 * ms, 205 * ms}),
		// On node b (a STANDBY, which applied later).
		mk(2, 2, delivery{1, 130 * ms, 150 * ms}, delivery{2, 220 * ms, 240 * ms}),
		// On node a again, one generation behind.
		mk(1, 1, delivery{1, 100 * ms, 101 * ms}),
	}
	s.watchers[1].reconnects, s.watchers[1].cutOff = 1, 1
	r := s.result()
	if r.Watchers != 3 || r.Generations != 2 || r.Deliveries != 5 || r.Messages != 9 {
		t.Fatalf("result %+v", r)
	}
	if r.Behind != 1 || r.Resyncs != 1 || r.Reconnects != 1 || r.CutOff != 1 || r.Failed != 0 {
		t.Errorf("behind %d resyncs %d reconnects %d cut off %d failed %d", r.Behind, r.Resyncs, r.Reconnects, r.CutOff, r.Failed)
	}
	// Delays: 10, 5, 1 on a; 50, 40 on b (from the PRIMARY's 100 and 200).
	if d := r.DeliveryMs; d["p50"] != 10 || d["max"] != 50 {
		t.Errorf("delivery %v, want p50 10 and max 50", d)
	}
	if len(r.Nodes) != 2 || r.Nodes[0].Deliveries != 3 || r.Nodes[0].DeliveryMs["max"] != 10 ||
		r.Nodes[1].Deliveries != 2 || r.Nodes[1].DeliveryMs["p50"] != 40 {
		t.Errorf("nodes %+v", r.Nodes)
	}
}

// A real run with watchers and reads: a three-node cluster, 20 watchers
// over its nodes, synthetic workers placing the run's tasks. The report
// has generations delivered to every watcher, delivery figures, the idle
// watchers' cost on each node, and the writes and reads apart.
func TestBenchWatchers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xce and runs a cluster")
	}
	exe := buildXCE(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Bench(ctx, Options{Local: 3, Exe: exe, Profile: Profiles["default"], Clients: 4, Duration: 2 * time.Second,
		Reads: 0.3, Watchers: 20, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	w := rep.Watch
	if w == nil {
		t.Fatal("no watch in the report")
	}
	if rep.Workers != DefaultWatchWorkers || w.Watchers != 20 || w.Generations == 0 || w.Deliveries < w.Generations ||
		w.Messages < int64(w.Deliveries) || w.Failed != 0 {
		t.Errorf("workers %d, watch %+v", rep.Workers, w)
	}
	if d := w.DeliveryMs; d["p50"] <= 0 || d["p50"] > d["p99"] || d["p99"] > d["max"] || d["max"] > 60_000 {
		t.Errorf("delivery ms %v", d)
	}
	sum := 0
	for _, n := range w.Nodes {
		sum += n.Watchers
		if n.Watchers == 0 || n.ID == "" || n.Role == "" {
			t.Errorf("node %+v", n)
		}
	}
	if len(w.Nodes) != 3 || sum != 20 {
		t.Errorf("nodes %+v, want 3 serving 20 watchers", w.Nodes)
	}
	m := w.Memory
	if m == nil || !m.GCForced || len(m.Nodes) != 3 || m.GoroutinesPerWatcher < 1 || m.HeapBytesPerWatcher <= 0 {
		t.Errorf("memory %+v", m)
	}
	if rep.WritesPerSec <= 0 || rep.ReadsPerSec <= 0 || rep.WriteLatencyMs["p99"] <= 0 || rep.ReadLatencyMs["p99"] <= 0 {
		t.Errorf("writes %.0f/s %v, reads %.0f/s %v", rep.WritesPerSec, rep.WriteLatencyMs, rep.ReadsPerSec, rep.ReadLatencyMs)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Watch struct {
			Generations *int               `json:"generations"`
			DeliveryMs  map[string]float64 `json:"delivery_ms"`
			Memory      map[string]any     `json:"memory"`
		} `json:"watch"`
		ReadsPerSec *float64 `json:"reads_per_sec"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Watch.Generations == nil || len(got.Watch.DeliveryMs) != 3 || got.Watch.Memory["heap_bytes_per_watcher"] == nil || got.ReadsPerSec == nil {
		t.Errorf("JSON lacks the watch or read figures: %s", b)
	}
}

// TestSkimCodec: the watchers' codec decodes a generation without its
// placements, and every other field as it was sent.
func TestSkimCodec(t *testing.T) {
	in := &xcev1.WatchAssignmentResponse{Generation: 9, Full: true, More: true, Index: 40, AppliedIndex: 41, CommitIndex: 42,
		AppliedAtUnixNano: 7, Removed: []string{"x"}, WorkerAddrs: map[string]string{"w1": "h:1"},
		Tasks: []*xcev1.TaskPlacement{{TaskId: "a", Active: "w1", Epoch: 3}}}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out xcev1.WatchAssignmentResponse
	if err := (skimCodec{}).Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	want := proto.Clone(in).(*xcev1.WatchAssignmentResponse)
	want.Tasks = nil
	if !proto.Equal(&out, want) {
		t.Fatalf("decoded %v, want %v", &out, want)
	}
	if err := (skimCodec{}).Unmarshal(b[:len(b)-1], &out); err == nil {
		t.Fatal("a cut message decoded")
	}
}
