package state

import (
	"os"
	"reflect"
	"testing"
	"unsafe"
)

func freezeCmd(frozen bool) Command { return Command{Type: CmdSetPlacementFrozen, Frozen: frozen} }

// TestTaskItemSize: a weight costs the registry no memory per task (it
// sits in what was padding), as docs/design.md's numbers assume.
func TestTaskItemSize(t *testing.T) {
	if got := unsafe.Sizeof(taskItem{}); got != 24 {
		t.Fatalf("taskItem is %d bytes, want 24", got)
	}
}

// TestWeightApply: a submit's weight is stored and handed out; 0 and 1
// both mean 1 and read as 0, as a task submitted before weights does; the
// id's length, which shares the item's key with its place in the arena,
// survives beside it.
func TestWeightApply(t *testing.T) {
	f := NewFSM("c")
	long := string(make([]byte, maxIDLen))
	for i, tc := range []struct {
		id         string
		weight     uint32
		wantWeight uint32
	}{
		{"plain", 0, 0},
		{"one", 1, 0},
		{"two", 2, 2},
		{"max", MaxWeight, MaxWeight},
		{long, 300, 300},
	} {
		c := Command{Type: CmdSubmitTask, ClientID: "c", RequestID: tc.id, Task: Task{ID: tc.id, Stateful: true, StandbyReplicas: 3, Weight: tc.weight}}
		r := apply(t, f, uint64(i+1), c)
		if r.Code != CodeOK || r.Task.Weight != tc.wantWeight {
			t.Fatalf("submit %q weight %d: %+v", tc.id[:min(len(tc.id), 8)], tc.weight, r)
		}
		got, ok := f.Task(tc.id)
		if !ok || got.ID != tc.id || got.Weight != tc.wantWeight || got.StandbyReplicas != 3 || !got.Stateful {
			t.Fatalf("task %q: %+v", tc.id[:min(len(tc.id), 8)], got)
		}
	}
	// Retried, the submit answers the stored result, weight included.
	r := apply(t, f, 9, Command{Type: CmdSubmitTask, ClientID: "c", RequestID: "two", Task: Task{ID: "two", Weight: 2}})
	if r.Index != 3 || r.Task.Weight != 2 {
		t.Fatalf("retried submit %+v", r)
	}
	// Deleting and submitting again reuses the arena's room.
	apply(t, f, 10, Command{Type: CmdDeleteTask, Task: Task{ID: "two"}})
	apply(t, f, 11, Command{Type: CmdSubmitTask, Task: Task{ID: "tw", Weight: 9}})
	if got, _ := f.Task("tw"); got.Weight != 9 || got.ID != "tw" {
		t.Fatalf("resubmitted %+v", got)
	}
}

// TestFreezeApply: the placement freeze is set and cleared by the log.
func TestFreezeApply(t *testing.T) {
	f := NewFSM("c")
	if f.PlacementFrozen() {
		t.Fatal("a new FSM is frozen")
	}
	for i, frozen := range []bool{true, true, false, false, true} {
		if r := apply(t, f, uint64(i+1), freezeCmd(frozen)); r.Code != CodeOK {
			t.Fatalf("freeze %v: %+v", frozen, r)
		}
		if f.PlacementFrozen() != frozen {
			t.Fatalf("after freeze %v: frozen %v", frozen, f.PlacementFrozen())
		}
	}
	if got := EncodeFreeze(true); !reflect.DeepEqual(got, enc(freezeCmd(true))) {
		t.Fatalf("EncodeFreeze % x", got)
	}
}

// TestWeightAndFreezeSnapshot: weights (in the tasks and in the dedup
// table's results) and the freeze survive a snapshot; snapshots written
// before them restore with weight 1 (read as 0) everywhere and no freeze.
func TestWeightAndFreezeSnapshot(t *testing.T) {
	f := buildPlacementFSM(t, "c")
	g := NewFSM("c")
	if err := restoreBytes(g, persistSnapshot(t, f)); err != nil {
		t.Fatal(err)
	}
	if a, b := stateOf(t, f), stateOf(t, g); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored state differs:\n%+v\n%+v", a, b)
	}
	checkPlacementBuilt(t, g)

	for _, path := range []string{goldenV6, goldenV7} {
		old := NewFSM("golden-cluster")
		apply(t, old, 1, freezeCmd(true))
		b := readFile(t, path)
		if err := restoreBytes(old, b); err != nil {
			t.Fatal(err)
		}
		if old.PlacementFrozen() {
			t.Fatalf("%s restored a freeze", path)
		}
		tasks, _ := old.AllTasks()
		for _, task := range tasks {
			if task.Weight != 0 {
				t.Fatalf("%s: task %+v has a weight", path, task)
			}
		}
	}
}

const goldenV8 = "testdata/snapshot-v8.bin"

// buildPlacementFSM is buildDrainFSM with weighted tasks (one retried
// through the dedup table) and the placement frozen.
func buildPlacementFSM(t testing.TB, cluster string) *FSM {
	f := buildDrainFSM(t, cluster)
	for i, c := range []Command{
		{Type: CmdSubmitTask, ClientID: "cw", RequestID: "w1", Task: Task{ID: "heavy", Stateful: true, Weight: 40}},
		{Type: CmdSubmitTask, ClientID: "cw", RequestID: "w2", Task: Task{ID: "max", Weight: MaxWeight}},
		freezeCmd(true),
	} {
		if r := applyTerm(t, f, uint64(36+i), 8, c); r.Code != CodeOK {
			t.Fatalf("%+v: %+v", c, r)
		}
	}
	return f
}

func checkPlacementBuilt(t *testing.T, f *FSM) {
	t.Helper()
	if !f.PlacementFrozen() {
		t.Fatal("not frozen")
	}
	if h, _ := f.Task("heavy"); h.Weight != 40 || !h.Stateful {
		t.Fatalf("heavy %+v", h)
	}
	if m, _ := f.Task("max"); m.Weight != MaxWeight {
		t.Fatalf("max %+v", m)
	}
	// The dedup table answers a retried weighted submit with its weight.
	r := apply(t, f, f.AppliedIndex()+1, Command{Type: CmdSubmitTask, ClientID: "cw", RequestID: "w1", Task: Task{ID: "heavy", Weight: 40}})
	if r.Index != 36 || r.Task.Weight != 40 {
		t.Fatalf("retried weighted submit %+v", r)
	}
}

// TestSnapshotGoldenV8 restores a snapshot written by the release that
// introduced format version 8 (weights, the placement freeze). Never
// regenerate it to make this test pass. `go test -run 'GoldenV8$'
// -update` rewrites it (only when the file must be recreated).
func TestSnapshotGoldenV8(t *testing.T) {
	f := goldenSnapshot(t, goldenV8, 8, buildPlacementFSM)
	if got := f.Drained(); !reflect.DeepEqual(got, []string{"w2", "w9"}) {
		t.Fatalf("drained %v", got)
	}
	if f.AppliedIndex() != 38 {
		t.Fatalf("applied %d, want 38", f.AppliedIndex())
	}
	checkPlacementBuilt(t, f)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
