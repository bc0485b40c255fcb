package state

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

func drainCmd(id string, drained bool) Command {
	return Command{Type: CmdSetWorkerDrain, Worker: id, Drained: drained}
}

// A drain is set and cleared by the log; the same state twice changes
// nothing (not even the version the assignor watches).
func TestDrainApply(t *testing.T) {
	f := NewFSM("c")
	steps := []struct {
		c       Command
		drained []string
		version uint64
	}{
		{drainCmd("w2", true), []string{"w2"}, 1},
		{drainCmd("w1", true), []string{"w1", "w2"}, 2},
		{drainCmd("w1", true), []string{"w1", "w2"}, 2},
		{drainCmd("w2", false), []string{"w1"}, 3},
		{drainCmd("w2", false), []string{"w1"}, 3},
		{drainCmd("w9", false), []string{"w1"}, 3},
	}
	for i, st := range steps {
		if r := apply(t, f, uint64(i+1), st.c); r.Code != CodeOK {
			t.Fatalf("step %d: %+v", i, r)
		}
		if got := f.Drained(); !reflect.DeepEqual(got, st.drained) {
			t.Fatalf("step %d: drained %v, want %v", i, got, st.drained)
		}
		if v := f.DrainVersion(); v != st.version {
			t.Fatalf("step %d: version %d, want %d", i, v, st.version)
		}
	}
	if !f.IsDrained("w1") || f.IsDrained("w2") {
		t.Fatalf("IsDrained: w1 %v, w2 %v", f.IsDrained("w1"), f.IsDrained("w2"))
	}
}

// A worker id the worker API would refuse is refused at encode and at
// decode; no replica stores it.
func TestDrainRefusesBadWorkerIDs(t *testing.T) {
	for _, id := range []string{"", "w 1", "w/1", strings.Repeat("w", 129), "ünï"} {
		if _, err := EncodeDrain(id, true); !errors.Is(err, ErrBadDrain) {
			t.Errorf("EncodeDrain(%q): %v", id, err)
		}
		b := (&Command{Type: CmdSetWorkerDrain, Worker: id, Drained: true}).Encode()
		if _, err := DecodeCommand(b); !errors.Is(err, ErrBadCommand) {
			t.Errorf("DecodeCommand(drain %q): %v", id, err)
		}
		f := NewFSM("c")
		if r := f.Apply(1, 1, b).(Result); r.Code != CodeInvalid || len(f.Drained()) != 0 {
			t.Errorf("apply drain %q: %+v, drained %v", id, r, f.Drained())
		}
	}
	if _, err := DecodeCommand([]byte{commandVersion, byte(CmdSetWorkerDrain), 1, 'w', 3}); !errors.Is(err, ErrBadCommand) {
		t.Errorf("unknown flags: %v", err)
	}
}

// The set is bounded: a drain beyond MaxDrained is refused and changes
// nothing, while an undrain still works.
func TestDrainBound(t *testing.T) {
	f := NewFSM("c")
	for i := range MaxDrained {
		f.drained[fmt.Sprintf("w%d", i)] = struct{}{}
	}
	r := apply(t, f, 1, drainCmd("one-more", true))
	if r.Code != CodeInvalid || !strings.Contains(r.Err, "drained already") || f.IsDrained("one-more") {
		t.Fatalf("drain beyond the bound: %+v", r)
	}
	if r := apply(t, f, 2, drainCmd("w0", false)); r.Code != CodeOK || f.IsDrained("w0") {
		t.Fatalf("undrain at the bound: %+v", r)
	}
}

// Drains survive a snapshot; a restore replaces them (an older snapshot
// has none), and refuses a malformed list, changing nothing.
func TestDrainSnapshot(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, drainCmd("w3", true))
	apply(t, f, 2, drainCmd("w1", true))
	snap := persistSnapshot(t, f)
	g := NewFSM("c")
	apply(t, g, 1, drainCmd("other", true))
	v := g.DrainVersion()
	if err := restoreBytes(g, snap); err != nil {
		t.Fatal(err)
	}
	if got := g.Drained(); !reflect.DeepEqual(got, []string{"w1", "w3"}) {
		t.Fatalf("restored drains %v", got)
	}
	if g.DrainVersion() == v {
		t.Fatal("a restore that changed the drains kept their version")
	}

	old := NewFSM("golden-cluster")
	apply(t, old, 1, drainCmd("w1", true))
	v6, err := os.ReadFile(goldenV6)
	if err != nil {
		t.Fatal(err)
	}
	if err := restoreBytes(old, v6); err != nil {
		t.Fatal(err)
	}
	if got := old.Drained(); len(got) != 0 {
		t.Fatalf("a version 6 snapshot restored drains %v", got)
	}

	for name, body := range map[string]string{
		"duplicate": `"drained":["w1","w1"]`,
		"bad id":    `"drained":["w 1"]`,
		"not ids":   `"drained":[1]`,
	} {
		bad := strings.Replace(string(snap), `"drained":["w1","w3"]`, body, 1)
		if bad == string(snap) {
			t.Fatalf("%s: no drained list in %q", name, snap)
		}
		h := NewFSM("c")
		apply(t, h, 1, drainCmd("keep", true))
		if err := restoreBytes(h, []byte(bad)); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
		if got := h.Drained(); !reflect.DeepEqual(got, []string{"keep"}) {
			t.Errorf("%s: a refused restore changed the drains to %v", name, got)
		}
	}
}

const goldenV7 = "testdata/snapshot-v7.bin"

// buildDrainFSM is buildEpochFSM with two drained workers.
func buildDrainFSM(t testing.TB, cluster string) *FSM {
	f := buildEpochFSM(t, cluster)
	for i, c := range []Command{drainCmd("w9", true), drainCmd("w2", true)} {
		if r := applyTerm(t, f, uint64(34+i), 7, c); r.Code != CodeOK {
			t.Fatalf("%+v: %+v", c, r)
		}
	}
	return f
}

// TestSnapshotGoldenV7 restores a snapshot written by the release that
// introduced format version 7 (drained workers). Never regenerate it to
// make this test pass. `go test -run 'GoldenV7$' -update` rewrites it
// (only when the file must be recreated).
func TestSnapshotGoldenV7(t *testing.T) {
	f := goldenSnapshot(t, goldenV7, 7, buildDrainFSM)
	if got := f.Drained(); !reflect.DeepEqual(got, []string{"w2", "w9"}) {
		t.Fatalf("drained %v", got)
	}
	if f.AppliedIndex() != 35 {
		t.Fatalf("applied %d, want 35", f.AppliedIndex())
	}
	checkEpochBuiltBehaviour(t, f)
}
