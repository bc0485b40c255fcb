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
	"github.com/xce/xce/state"
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

// TestSnapshotRestoreKafka restores a cluster that publishes to a
// kafka-dev broker: the old cluster goes on publishing past the snapshot
// before it is killed, the restore reads the topic's last event and
// continues above it, and a read_committed consumer of the whole topic
// sees every change once, in index order, across the restore: no
// duplicate, and no acknowledged write of either cluster missing.
func TestSnapshotRestoreKafka(t *testing.T) {
	k := startKafkaDev(t, false)
	c := kafkaCluster(t, 3, k.Addr)
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	ec := consumeEvents(t, k.Addr)
	load := startLoad(t, c.Addrs(), 8)
	load.waitProgress(t, 100, 30*time.Second)
	file := filepath.Join(t.TempDir(), "cluster.xce")
	r := runXCE(t, time.Minute, "snapshot", "save", file, "--addr", strings.Join(c.Addrs(), ","), "--json")
	if r.Code != 0 {
		t.Fatalf("snapshot save: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	var saved struct {
		Index uint64 `json:"index"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &saved); err != nil {
		t.Fatal(err)
	}
	// Events past the snapshot reach the topic before the old cluster dies.
	load.waitProgress(t, 100, 30*time.Second)
	oldOps := load.stopAndCheck(t, c.Client())
	if _, err := ec.waitUntil(raceSlack(15*time.Second), caughtUp(oldOps, finalTasks(t, c))); err != nil {
		t.Fatalf("downstream did not catch up with the old cluster: %v", err)
	}
	oldLast := ec.records()[len(ec.records())-1].Index
	for i := range c.N() {
		c.Signal(i, syscall.SIGKILL)
	}
	for i := range c.N() {
		c.Wait(i)
	}

	nc := kafkaCluster(t, 3, k.Addr)
	for i := range nc.N() {
		r := runXCE(t, time.Minute, "snapshot", "restore", file, "--config", nc.Node(i).ConfigPath, "--json")
		if r.Code != 0 {
			t.Fatalf("restore %s: exit %d\n%s%s", nc.Node(i).ID, r.Code, r.Stdout, r.Stderr)
		}
		var res struct {
			Index          uint64 `json:"index"`
			TopicLastIndex uint64 `json:"topic_last_index"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil {
			t.Fatal(err)
		}
		if res.TopicLastIndex != oldLast || res.Index != oldLast || oldLast <= saved.Index {
			t.Fatalf("restore %s: %+v; the snapshot is at index %d, the topic's last event at %d", nc.Node(i).ID, res, saved.Index, oldLast)
		}
	}
	nc.StartAll()
	nc.WaitRoles(raceSlack(20 * time.Second))
	load = startLoad(t, nc.Addrs(), 8)
	load.waitProgress(t, 100, 30*time.Second)
	newOps := load.stopAndCheck(t, nc.Client())
	recs, err := ec.waitUntil(raceSlack(15*time.Second), caughtUp(newOps, finalTasks(t, nc)))
	if err != nil {
		t.Fatalf("downstream did not catch up with the restored cluster: %v", err)
	}
	// In offset order, (index, seq) strictly increases over both clusters:
	// no change twice, none out of order.
	for i := 1; i < len(recs); i++ {
		p, r := recs[i-1], recs[i]
		if r.Index < p.Index || r.Index == p.Index && r.Seq <= p.Seq {
			t.Errorf("offset %d: index %d.%d after index %d.%d", r.Offset, r.Index, r.Seq, p.Index, p.Seq)
		}
	}
	published := map[string]int{}
	for _, r := range recs {
		if r.Event.Kind == state.EventTaskSubmitted {
			published[r.Event.TaskID]++
		}
	}
	for _, op := range append(oldOps, newOps...) {
		if op.Kind == bench.Submit && op.Outcome == bench.OK && published[op.TaskID] != 1 {
			t.Errorf("acked submit %s (index %d) published %d times", op.TaskID, op.Index, published[op.TaskID])
		}
	}
	for _, op := range newOps {
		if op.Kind == bench.Submit && op.Outcome == bench.OK && op.Index <= oldLast {
			t.Errorf("the restored cluster wrote %s at index %d, not above the topic's %d", op.TaskID, op.Index, oldLast)
		}
	}
	t.Logf("snapshot at index %d, topic's last event %d at the restore; %d records in all", saved.Index, oldLast, len(recs))
}
