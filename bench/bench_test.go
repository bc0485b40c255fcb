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
// a one-second measured run; the report carries the prefill and every
// node's size, and the node holds at least the prefilled tasks.
func TestBenchPrefillReport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds xce and runs a server")
	}
	exe := filepath.Join(t.TempDir(), "xce")
	if out, err := exec.Command("go", "build", "-o", exe, "github.com/xce/xce/cmd/xce").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
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
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
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
