package bench

import (
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A real run: a one-node cluster of the xce binary, 2000 tasks prefilled,
// a one-second measured run; the report carries the prefill, the clients'
// warm-up and every node's size, and the node holds at least the
// prefilled tasks.
func TestBenchPrefillReport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xce and runs a server")
	}
	exe := buildXCE(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Bench(ctx, Options{Local: 1, Exe: exe, Profile: Profiles["default"], Clients: 4, Duration: time.Second,
		Prefill: 2000, PrefillClients: 64, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Prefill   map[string]any   `json:"prefill"`
		NodeStats []map[string]any `json:"node_stats"`
		WarmupS   *float64         `json:"warmup_s"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.WarmupS == nil || *got.WarmupS <= 0 {
		t.Errorf("warmup_s %v, want the clients' warm-up before the run", got.WarmupS)
	}
	for _, k := range []string{"tasks", "seconds", "per_second"} {
		if _, ok := got.Prefill[k]; !ok {
			t.Errorf("prefill lacks %q: %s", k, b)
		}
	}
	if got.Prefill["tasks"] != 2000.0 {
		t.Errorf("prefill tasks %v, want 2000", got.Prefill["tasks"])
	}
	if len(got.NodeStats) != 1 {
		t.Fatalf("nodes %v, want one", got.NodeStats)
	}
	n := got.NodeStats[0]
	for _, k := range []string{"id", "tasks", "heap_inuse_bytes", "heap_alloc_bytes", "rss_bytes", "data_dir_bytes", "gc_pause_max_seconds"} {
		if _, ok := n[k]; !ok {
			t.Errorf("node lacks %q: %s", k, b)
		}
	}
	if e, ok := n["error"]; ok {
		t.Errorf("node error %v", e)
	}
	if n["id"] != "n1" || n["tasks"].(float64) < 2000 || n["heap_inuse_bytes"].(float64) <= 0 || n["rss_bytes"].(float64) <= 0 || n["data_dir_bytes"].(float64) <= 0 {
		t.Errorf("node %v", n)
	}
	if pn := rep.Prefill.NodeStats; len(pn) != 1 || pn[0].Tasks != 2000 {
		t.Errorf("nodes after the prefill %+v, want one holding 2000 tasks", pn)
	}
}

// buildXCE builds the xce binary for a live test.
func buildXCE(t *testing.T) string {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "xce")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/xce/xce/cmd/xce").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// A real run with a snapshot and the restarts: a three-node cluster, 2000
// tasks prefilled, a two-second run with the PRIMARY's snapshot half a
// second in, then a STANDBY's catch-up (stopped by a SIGTERM) and a cold
// restart. The snapshot
// shows in the report and in its taker's node stats; the restarts report
// a follower that fell behind and caught up, a first write after the cold
// restart, every node ready, and no acknowledged task lost, each measured
// in two rounds whose medians are the figures.
func TestBenchRestartsAndSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xce and runs a cluster")
	}
	exe := buildXCE(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Bench(ctx, Options{Local: 3, Exe: exe, Profile: Profiles["default"], Clients: 4, Duration: 2 * time.Second,
		Prefill: 2000, PrefillClients: 64, SnapshotAt: 500 * time.Millisecond, Restarts: true, RestartRounds: 2, FollowerTerm: true, Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	s := rep.Snapshot
	if s == nil || s.Error != "" || s.Bytes == 0 || s.Index == 0 || s.TookSeconds <= 0 || s.AtSeconds < 0.5 ||
		s.MaxLatencyMsRun <= 0 || s.MaxLatencyMsAround > s.MaxLatencyMsRun {
		t.Errorf("snapshot %+v", s)
	}
	taken := false
	for _, n := range rep.NodeStats {
		if n.Snapshots > 0 && n.SnapshotBytes > 0 && n.SnapshotPersistSeconds > 0 && n.SnapshotCaptureSeconds > 0 {
			taken = true
		}
	}
	if !taken {
		t.Errorf("no node shows the snapshot: %+v", rep.NodeStats)
	}
	r := rep.Restarts
	if r == nil {
		t.Fatal("no restarts in the report")
	}
	if r.FollowerBehindEntries == 0 || r.FollowerCatchupSeconds <= 0 || r.ColdRestartSeconds <= 0 || r.FollowerSignal != "SIGTERM" {
		t.Errorf("restarts %+v", r)
	}
	for _, runs := range []struct {
		name   string
		xs     []float64
		median float64
	}{{"follower", r.FollowerCatchupRuns, r.FollowerCatchupSeconds}, {"cold", r.ColdRestartRuns, r.ColdRestartSeconds}} {
		if len(runs.xs) != 2 || runs.median != (runs.xs[0]+runs.xs[1])/2 {
			t.Errorf("%s rounds %v, median %v", runs.name, runs.xs, runs.median)
		}
	}
	if want := uint64(2000 + rep.Acked + 1); r.TasksAcked < want || r.TasksAfter < r.TasksAcked {
		t.Errorf("tasks acknowledged %d (want at least %d), after %d", r.TasksAcked, want, r.TasksAfter)
	}
	if len(r.ColdRestartReadySeconds) != 3 || len(r.NodeStats) != 3 {
		t.Errorf("ready %v, nodes %+v: want all three", r.ColdRestartReadySeconds, r.NodeStats)
	}
	for _, n := range r.NodeStats {
		if n.Error != "" || n.Tasks == 0 {
			t.Errorf("node after the cold restart %+v", n)
		}
	}
}
