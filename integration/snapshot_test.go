package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/client"
)

// TestSnapshotSaveRestore backs up a 3-node cluster under a write load
// with `xce snapshot save`, SIGKILLs every node, restores the file into
// three new data dirs (a new cluster on new ports) with `xce snapshot
// restore`, and starts them: every task acknowledged before the save
// began is there, and nothing that was never submitted. The old
// cluster's history is checked as in the failover tests.
func TestSnapshotSaveRestore(t *testing.T) {
	c := newCluster(t, 3, WithLogLevel("info"))
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	load := startLoad(t, c.Addrs(), 8)
	load.waitProgress(t, 100, 30*time.Second)

	file := filepath.Join(t.TempDir(), "cluster.xce")
	saveStart := time.Now()
	r := runXCE(t, time.Minute, "snapshot", "save", file, "--addr", strings.Join(c.Addrs(), ","), "--json")
	if r.Code != 0 {
		t.Fatalf("snapshot save: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var saved struct {
		Index uint64 `json:"index"`
		Size  uint64 `json:"size"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &saved); err != nil || saved.Index == 0 {
		t.Fatalf("save output %q: %v", r.Stdout, err)
	}
	if _, err := os.Stat(file + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("save left %s.tmp (%v)", file, err)
	}
	load.waitProgress(t, 20, 30*time.Second)
	old := load.stopAndCheck(t, c.Client())
	var before []string
	submitted := map[string]bool{}
	for _, op := range old {
		if op.Kind != bench.Submit {
			continue
		}
		submitted[op.TaskID] = true
		if op.Outcome == bench.OK && op.Return.Before(saveStart) {
			before = append(before, op.TaskID)
		}
	}

	r = runXCE(t, time.Minute, "snapshot", "inspect", file, "--json")
	if r.Code != 0 {
		t.Fatalf("snapshot inspect: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var sum struct {
		Tasks        int    `json:"tasks"`
		Index        uint64 `json:"index"`
		AppliedIndex uint64 `json:"applied_index"`
		ChecksumOK   bool   `json:"checksum_ok"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &sum); err != nil {
		t.Fatal(err)
	}
	if !sum.ChecksumOK || sum.Index != saved.Index || sum.AppliedIndex != saved.Index || sum.Tasks < len(before) {
		t.Fatalf("inspect %+v; saved at index %d, %d tasks acknowledged before the save", sum, saved.Index, len(before))
	}

	for i := range c.N() {
		c.Signal(i, syscall.SIGKILL)
	}
	for i := range c.N() {
		c.Wait(i)
	}

	nc := newCluster(t, 3, WithLogLevel("info"))
	for i := range nc.N() {
		r := runXCE(t, time.Minute, "snapshot", "restore", file, "--config", nc.Node(i).ConfigPath)
		if r.Code != 0 {
			t.Fatalf("restore %s: exit %d\n%s%s", nc.Node(i).ID, r.Code, r.Stdout, r.Stderr)
		}
		t.Logf("%s", strings.TrimSpace(r.Stdout))
	}
	// A data dir restored once is not restored over.
	if r := runXCE(t, time.Minute, "snapshot", "restore", file, "--config", nc.Node(0).ConfigPath); r.Code == 0 || !strings.Contains(r.Stderr, "not empty") {
		t.Errorf("restore over a restored dir: exit %d\n%s", r.Code, r.Stderr)
	}
	nc.StartAll()
	nc.WaitRoles(raceSlack(20 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := nc.Client()
	tasks, err := cl.List(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, tk := range tasks {
		have[tk.TaskId] = true
		if !submitted[tk.TaskId] {
			t.Errorf("restored task %s was never submitted", tk.TaskId)
		}
	}
	if len(tasks) != sum.Tasks {
		t.Errorf("restored cluster holds %d tasks, the file %d", len(tasks), sum.Tasks)
	}
	lost := 0
	for _, id := range before {
		if !have[id] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d tasks acknowledged before the save are missing after the restore", lost, len(before))
	}
	res, err := cl.Submit(ctx, client.Task{ID: "after-restore"})
	if err != nil {
		t.Fatalf("write after the restore: %v", err)
	}
	if res.Index <= saved.Index {
		t.Errorf("write after the restore at index %d, the snapshot's is %d", res.Index, saved.Index)
	}
	t.Logf("saved %d bytes at index %d; %d tasks acknowledged before the save, %d restored", saved.Size, saved.Index, len(before), len(tasks))
}
