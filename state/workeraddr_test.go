package state

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func addrCmd(id, addr string) Command {
	return Command{Type: CmdSetWorkerAddr, Worker: id, Addr: addr}
}

// A worker's address is set, replaced and forgotten by the log; the same
// address twice, or forgetting an unknown worker, changes nothing (not
// even the version).
func TestWorkerAddrApply(t *testing.T) {
	f := NewFSM("c")
	steps := []struct {
		c       Command
		addrs   map[string]string
		version uint64
	}{
		{addrCmd("w1", "h1:7000"), map[string]string{"w1": "h1:7000"}, 1},
		{addrCmd("w2", "h2:7000"), map[string]string{"w1": "h1:7000", "w2": "h2:7000"}, 2},
		{addrCmd("w1", "h1:7000"), map[string]string{"w1": "h1:7000", "w2": "h2:7000"}, 2},
		{addrCmd("w1", "h1:7001"), map[string]string{"w1": "h1:7001", "w2": "h2:7000"}, 3},
		{addrCmd("w2", ""), map[string]string{"w1": "h1:7001"}, 4},
		{addrCmd("w2", ""), map[string]string{"w1": "h1:7001"}, 4},
		{addrCmd("w9", ""), map[string]string{"w1": "h1:7001"}, 4},
	}
	for i, st := range steps {
		if r := apply(t, f, uint64(i+1), st.c); r.Code != CodeOK {
			t.Fatalf("step %d: %+v", i, r)
		}
		got, ver := f.WorkerAddrs()
		if !reflect.DeepEqual(got, st.addrs) || ver != st.version || f.WorkerAddrVersion() != ver {
			t.Fatalf("step %d: addrs %v version %d, want %v version %d", i, got, ver, st.addrs, st.version)
		}
	}
	// The map handed out is a copy.
	got, _ := f.WorkerAddrs()
	got["w1"] = "changed:1"
	if again, _ := f.WorkerAddrs(); again["w1"] != "h1:7001" {
		t.Fatalf("WorkerAddrs shares its map: %v", again)
	}
	b, err := EncodeWorkerAddr("w1", "h:1")
	if err != nil || !reflect.DeepEqual(b, enc(addrCmd("w1", "h:1"))) {
		t.Fatalf("EncodeWorkerAddr % x, %v", b, err)
	}
}

// Worker ids the worker API would refuse and addresses longer than it
// takes are refused at encode and at decode; no replica stores them.
func TestWorkerAddrRefusesBadInput(t *testing.T) {
	for _, tc := range []struct{ id, addr string }{
		{"", "h:1"},
		{"w 1", "h:1"},
		{"w/1", ""},
		{strings.Repeat("w", 129), "h:1"},
		{"w1", strings.Repeat("a", MaxWorkerAddrLen+1)},
		{"w1", "h\xff:1"},
	} {
		if _, err := EncodeWorkerAddr(tc.id, tc.addr); !errors.Is(err, ErrBadWorkerAddr) {
			t.Errorf("EncodeWorkerAddr(%q, %q): %v", tc.id, tc.addr, err)
		}
		b := enc(addrCmd(tc.id, tc.addr))
		if _, err := DecodeCommand(b); !errors.Is(err, ErrBadCommand) {
			t.Errorf("DecodeCommand(addr %q %q): %v", tc.id, tc.addr, err)
		}
		f := NewFSM("c")
		if r := f.Apply(1, 1, b).(Result); r.Code != CodeInvalid {
			t.Errorf("apply addr %q %q: %+v", tc.id, tc.addr, r)
		}
		if got, ver := f.WorkerAddrs(); len(got) != 0 || ver != 0 {
			t.Errorf("apply addr %q %q stored %v (version %d)", tc.id, tc.addr, got, ver)
		}
	}
	for _, b := range [][]byte{
		{commandVersion, byte(CmdSetWorkerAddr)},
		{commandVersion, byte(CmdSetWorkerAddr), 1, 'w'},
		{commandVersion, byte(CmdSetWorkerAddr), 1, 'w', 1, 'h', 0},
	} {
		if _, err := DecodeCommand(b); !errors.Is(err, ErrBadCommand) {
			t.Errorf("DecodeCommand(% x): %v", b, err)
		}
	}
}

// The map is bounded: a new worker beyond MaxWorkerAddrs is refused and
// changes nothing, while known workers still change and go.
func TestWorkerAddrBound(t *testing.T) {
	f := NewFSM("c")
	for i := range MaxWorkerAddrs {
		f.workerAddrs[fmt.Sprintf("w%d", i)] = "h:1"
	}
	r := apply(t, f, 1, addrCmd("one-more", "h:2"))
	if got, _ := f.WorkerAddrs(); r.Code != CodeInvalid || !strings.Contains(r.Err, "address already") || got["one-more"] != "" {
		t.Fatalf("address beyond the bound: %+v", r)
	}
	if r := apply(t, f, 2, addrCmd("w0", "h:3")); r.Code != CodeOK {
		t.Fatalf("changing a known worker at the bound: %+v", r)
	}
	if r := apply(t, f, 3, addrCmd("w1", "")); r.Code != CodeOK {
		t.Fatalf("forgetting at the bound: %+v", r)
	}
	if r := apply(t, f, 4, addrCmd("one-more", "h:2")); r.Code != CodeOK {
		t.Fatalf("address below the bound: %+v", r)
	}
}

const goldenV9 = "testdata/snapshot-v9.bin"

// buildWorkerAddrFSM is buildPlacementFSM with worker addresses, one of
// them forgotten again.
func buildWorkerAddrFSM(t testing.TB, cluster string) *FSM {
	f := buildPlacementFSM(t, cluster)
	for i, c := range []Command{addrCmd("w1", "w1.workers.test:7000"), addrCmd("w2", "[::1]:7000"), addrCmd("w3", "h:1"), addrCmd("w3", "")} {
		if r := applyTerm(t, f, uint64(39+i), 9, c); r.Code != CodeOK {
			t.Fatalf("%+v: %+v", c, r)
		}
	}
	return f
}

var builtWorkerAddrs = map[string]string{"w1": "w1.workers.test:7000", "w2": "[::1]:7000"}

// The addresses survive a snapshot; snapshots written before them restore
// with none (replacing what the FSM held).
func TestWorkerAddrSnapshot(t *testing.T) {
	f := buildWorkerAddrFSM(t, "c")
	g := NewFSM("c")
	if err := restoreBytes(g, persistSnapshot(t, f)); err != nil {
		t.Fatal(err)
	}
	if a, b := stateOf(t, f), stateOf(t, g); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored state differs:\n%+v\n%+v", a, b)
	}
	if got, _ := g.WorkerAddrs(); !reflect.DeepEqual(got, builtWorkerAddrs) {
		t.Fatalf("restored addresses %v", got)
	}
	checkPlacementBuilt(t, g)

	for _, path := range []string{goldenV7, goldenV8} {
		old := NewFSM("golden-cluster")
		apply(t, old, 1, addrCmd("w1", "h:1"))
		_, before := old.WorkerAddrs()
		if err := restoreBytes(old, readFile(t, path)); err != nil {
			t.Fatal(err)
		}
		if got, ver := old.WorkerAddrs(); len(got) != 0 || ver == before {
			t.Fatalf("%s restored addresses %v (version %d, was %d)", path, got, ver, before)
		}
	}
}

// A snapshot with addresses the log would refuse does not restore.
func TestWorkerAddrSnapshotRefusesBadAddrs(t *testing.T) {
	for _, addrs := range []map[string]string{
		{"w 1": "h:1"},
		{"w1": ""},
		{"w1": strings.Repeat("a", MaxWorkerAddrLen+1)},
	} {
		f := NewFSM("c")
		f.workerAddrs = addrs
		b := persistSnapshot(t, f)
		if err := restoreBytes(NewFSM("c"), b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("snapshot with addresses %v: %v", addrs, err)
		}
	}
	// A version 8 snapshot must not carry them.
	b := persistSnapshotVersion(t, buildWorkerAddrFSM(t, "c"), 9)
	if err := restoreBytes(NewFSM("c"), b); err != nil {
		t.Fatalf("version 9: %v", err)
	}
	b[len(snapshotMagic)+3] = 8
	if err := restoreBytes(NewFSM("c"), b); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("version 8 snapshot with worker_addrs: %v", err)
	}
}

// TestSnapshotGoldenV9 restores a snapshot written by the release that
// introduced format version 9 (worker addresses). Never regenerate it to
// make this test pass. `go test -run 'GoldenV9$' -update` rewrites it
// (only when the file must be recreated).
func TestSnapshotGoldenV9(t *testing.T) {
	f := goldenSnapshot(t, goldenV9, 9, buildWorkerAddrFSM)
	if got, _ := f.WorkerAddrs(); !reflect.DeepEqual(got, builtWorkerAddrs) {
		t.Fatalf("addresses %v", got)
	}
	if f.AppliedIndex() != 42 {
		t.Fatalf("applied %d, want 42", f.AppliedIndex())
	}
	checkPlacementBuilt(t, f)
}
