package state

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// failWriter fails every Write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// persistSnapshot takes a snapshot of f and returns its bytes.
func persistSnapshot(t testing.TB, f *FSM) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f.Snapshot().Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// persistSnapshotVersion is persistSnapshot in the layout of an older
// version (from 9 on).
func persistSnapshotVersion(t testing.TB, f *FSM, version uint32) []byte {
	t.Helper()
	var buf bytes.Buffer
	s := f.Snapshot()
	s.version = version
	if err := s.Write(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ids is the ids of a version 11 part, packed in one chunk.
func ids(ids ...string) []byte {
	var b []byte
	for _, id := range ids {
		b = append(b, id...)
		b = append(b, make([]byte, roundedSlots(len(id))*slotBytes-len(id))...)
	}
	return b
}

// item is an item of a version 11 part: an id of n bytes at ref, with
// flags and the padding byte.
func item(n int, ref uint64, flags, pad byte) []byte {
	return append(appendItem(nil, taskItem{key: itemKey(ref, n), flags: flags})[:itemBytes-1], pad)
}

// mappedPart is a version 11 part of these items and ids, unpadded.
func mappedPart(ids []byte, items ...[]byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(items)))
	b = binary.AppendUvarint(b, uint64(len(ids)))
	return append(append(append(b, 0), slices.Concat(items...)...), ids...)
}

func restoreBytes(f *FSM, b []byte) error {
	return f.Restore(bytes.NewReader(b))
}

// buildFSM applies a small history with every kind of result.
func buildFSM(t testing.TB, cluster string) *FSM {
	f := NewFSM(cluster)
	f.SetDedupLimits(1000, 50)
	stateful := submitCmd("cA", "r1", "alpha")
	stateful.Task.Stateful, stateful.Task.StandbyReplicas = true, 2
	gamma := submitCmd("cB", "r1", "gamma")
	gamma.Task.StandbyReplicas = 1
	apply(t, f, 1, stateful)
	apply(t, f, 2, submitCmd("cA", "r2", "beta"))
	apply(t, f, 3, gamma)
	apply(t, f, 4, submitCmd("cB", "r2", "alpha")) // AlreadyExists
	apply(t, f, 5, deleteCmd("cA", "r3", "beta"))  // OK
	apply(t, f, 6, deleteCmd("cA", "r4", "nope"))  // NotFound
	applyEntry(f, Entry{NoCommand: true, Index: 7})
	applyEntry(f, Entry{Index: 8, Data: []byte{1, 200}}) // Invalid
	apply(t, f, 9, submitCmd("", "", "delta"))
	apply(t, f, 10, Command{Type: CmdNoop})
	return f
}

// checkBuiltState checks an FSM holding buildFSM's state, spelled out so that
// a change of apply semantics cannot silently change what is expected of an
// old snapshot.
func checkBuiltState(t *testing.T, f *FSM) {
	t.Helper()
	alpha := pendingTask("alpha", 1)
	alpha.Stateful, alpha.StandbyReplicas = true, 2
	beta := pendingTask("beta", 2)
	gamma := pendingTask("gamma", 3)
	gamma.StandbyReplicas = 1
	want := fsmState{
		Tasks: []Task{alpha, pendingTask("delta", 9), gamma},
		Dedup: []dedupRecord{
			{"cA", "r1", Result{Index: 1, Task: alpha}},
			{"cA", "r2", Result{Index: 2, Task: beta}},
			{"cB", "r1", Result{Index: 3, Task: gamma}},
			{"cB", "r2", Result{Index: 4, Code: CodeAlreadyExists, Task: alpha}},
			{"cA", "r3", Result{Index: 5, Task: beta}},
			{"cA", "r4", Result{Index: 6, Code: CodeNotFound, Task: Task{ID: "nope"}}},
		},
		Applied: 10,
		Window:  1000,
		Max:     50,
	}
	if got := stateOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("state:\n got %+v\nwant %+v", got, want)
	}
	if f.AppliedIndex() != 10 || f.NumTasks() != 3 || f.DedupLen() != 6 {
		t.Fatalf("AppliedIndex %d NumTasks %d DedupLen %d", f.AppliedIndex(), f.NumTasks(), f.DedupLen())
	}
}

// checkBuiltBehaviour: after restoring buildFSM's state, retries dedup and the
// restored window expires entries at the right index.
func checkBuiltBehaviour(t *testing.T, f *FSM) {
	t.Helper()
	hits := f.DedupHits()
	if r := apply(t, f, 11, submitCmd("cA", "r2", "beta")); r != (Result{Index: 2, Task: pendingTask("beta", 2)}) {
		t.Fatalf("retried submit after restore: %+v", r)
	}
	if _, ok := f.Task("beta"); ok {
		t.Fatal("retried submit re-created beta")
	}
	if r := apply(t, f, 12, deleteCmd("cA", "r4", "nope")); r != (Result{Index: 6, Code: CodeNotFound, Task: Task{ID: "nope"}}) {
		t.Fatalf("retried delete after restore: %+v", r)
	}
	if f.DedupHits()-hits != 2 || f.NumTasks() != 3 {
		t.Fatalf("DedupHits +%d, NumTasks %d", f.DedupHits()-hits, f.NumTasks())
	}
	// Window 1000: at index 1003 the entries of indexes 1..3 expire.
	apply(t, f, 1002, Command{Type: CmdNoop})
	if f.DedupLen() != 4 {
		t.Fatalf("DedupLen at 1002 = %d, want 4", f.DedupLen())
	}
	apply(t, f, 1003, Command{Type: CmdNoop})
	if f.DedupLen() != 3 {
		t.Fatalf("DedupLen at 1003 = %d, want 3", f.DedupLen())
	}
	if r := apply(t, f, 1004, submitCmd("cA", "r1", "alpha")); r.Code != CodeAlreadyExists || r.Index != 1004 {
		t.Fatalf("expired request after restore: %+v", r)
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	src := buildFSM(t, "c1")
	checkBuiltState(t, src)
	b := persistSnapshot(t, src)
	if !bytes.HasPrefix(b, []byte(snapshotMagic)) {
		t.Fatalf("snapshot does not start with the magic: %q", b[:min(len(b), 16)])
	}
	if v := binary.BigEndian.Uint32(b[len(snapshotMagic):]); v != snapshotVersion {
		t.Fatalf("snapshot version %d", v)
	}

	dst := NewFSM("c1")
	if err := restoreBytes(dst, b); err != nil {
		t.Fatal(err)
	}
	checkBuiltState(t, dst)
	checkBuiltBehaviour(t, dst)

	// The source, fed the same entries, ends equal.
	checkBuiltBehaviour(t, src)
	if a, b := stateOf(t, src), stateOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("source and restored FSM diverged:\n%+v\n%+v", a, b)
	}
}

func TestRestoreReplacesState(t *testing.T) {
	b := persistSnapshot(t, buildFSM(t, "c1"))
	f := NewFSM("c1")
	f.SetDedupLimits(5, 5)
	apply(t, f, 1, submitCmd("x", "y", "other"))
	apply(t, f, 50, submitCmd("x", "z", "another"))
	if err := restoreBytes(f, b); err != nil {
		t.Fatal(err)
	}
	checkBuiltState(t, f)
	checkBuiltBehaviour(t, f)

	// An empty snapshot empties the FSM.
	empty := persistSnapshot(t, NewFSM("c1"))
	if err := restoreBytes(f, empty); err != nil {
		t.Fatal(err)
	}
	got := stateOf(t, f)
	if len(got.Tasks) != 0 || len(got.Dedup) != 0 || got.Applied != 0 {
		t.Fatalf("after restoring an empty snapshot: %+v", got)
	}
	apply(t, f, 1, submitCmd("c", "r", "t"))
	if r := apply(t, f, 2, submitCmd("c", "r", "t")); r.Index != 1 {
		t.Fatalf("dedup after restoring an empty snapshot: %+v", r)
	}
}

// TestSnapshotIsAPointInTimeCopy: entries applied after Snapshot and before
// Write are not in the snapshot.
func TestSnapshotIsAPointInTimeCopy(t *testing.T) {
	f := buildFSM(t, "c1")
	snap := f.Snapshot()
	apply(t, f, 11, submitCmd("cZ", "rZ", "zeta"))
	apply(t, f, 12, deleteCmd("cZ", "rY", "alpha"))
	var buf bytes.Buffer
	if err := snap.Write(&buf); err != nil {
		t.Fatal(err)
	}
	g := NewFSM("c1")
	if err := restoreBytes(g, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	checkBuiltState(t, g)
}

func TestSnapshotWriteError(t *testing.T) {
	if err := buildFSM(t, "c1").Snapshot().Write(failWriter{}); err == nil {
		t.Fatal("Write into a failing writer succeeded")
	}
}

func TestRestoreRefusesBadSnapshots(t *testing.T) {
	good := persistSnapshot(t, buildFSM(t, "c1"))
	hdr := len(snapshotMagic) + 4
	withVersion := func(v uint32) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint32(b[len(snapshotMagic):], v)
		return b
	}
	// The request id section follows the header, the task section
	// follows it, and the JSON body follows them.
	r := bytes.NewReader(good[hdr:])
	br := bufio.NewReaderSize(r, snapshotBuffer)
	if _, err := readDedupParts(br, nil, snapshotVersion).wait(); err != nil {
		t.Fatal(err)
	}
	tasksAt := len(good) - r.Len() - br.Buffered()
	if _, err := readTasks(br, snapshotVersion); err != nil {
		t.Fatal(err)
	}
	body := len(good) - r.Len() - br.Buffered()
	withBody := func(body string) []byte {
		return append(bytes.Clone(good[:hdr]), append([]byte{0, 0}, body...)...)
	}
	// withTasks is a version 10 snapshot of the same state with this task
	// section (records, in parts); withMapped a version 11 one with this.
	v10 := persistSnapshotVersion(t, buildFSM(t, "c1"), 10)
	r = bytes.NewReader(v10[hdr:])
	br = bufio.NewReaderSize(r, snapshotBuffer)
	if _, err := readDedupParts(br, nil, 10).wait(); err != nil {
		t.Fatal(err)
	}
	v10TasksAt := len(v10) - r.Len() - br.Buffered()
	if _, err := readTasks(br, 10); err != nil {
		t.Fatal(err)
	}
	v10Body := len(v10) - r.Len() - br.Buffered()
	withTasks := func(tasks ...byte) []byte {
		return append(append(bytes.Clone(v10[:v10TasksAt]), tasks...), v10[v10Body:]...)
	}
	withMapped := func(n byte, tasks []byte) []byte {
		return append(append(append(bytes.Clone(good[:tasksAt]), n), tasks...), good[body:]...)
	}
	withDedup := func(dedup ...byte) []byte {
		return append(append(bytes.Clone(good[:hdr]), dedup...), good[tasksAt:]...)
	}
	// part is one part of a section: its count, length and records
	// (each shorter than 128 bytes).
	part := func(count byte, records ...byte) []byte {
		return append([]byte{count, byte(len(records))}, records...)
	}
	parted := func(n byte, parts ...[]byte) []byte {
		return append([]byte{n}, slices.Concat(parts...)...)
	}
	// v9 is a version 9 snapshot of the same state (tasks first, then the
	// request ids, neither in parts), and v9Tasks one with this task
	// section.
	v9 := persistSnapshotVersion(t, buildFSM(t, "c1"), 9)
	r = bytes.NewReader(v9[hdr:])
	br = bufio.NewReaderSize(r, snapshotBuffer)
	if _, err := readTasks(br, 9); err != nil {
		t.Fatal(err)
	}
	v9Dedup := len(v9) - r.Len() - br.Buffered()
	v9Tasks := func(tasks ...byte) []byte {
		return append(append(bytes.Clone(v9[:hdr]), tasks...), v9[v9Dedup:]...)
	}
	wrongMagic := bytes.Clone(good)
	wrongMagic[0] = 'Y'
	otherCluster := persistSnapshot(t, buildFSM(t, "c2"))
	unknownField := bytes.Replace(good, []byte(`"cluster_id"`), []byte(`"cluster_id":"c1","extra_field":1,"x"`), 1)
	if bytes.Equal(unknownField, good) {
		t.Fatal("cluster_id not found in snapshot JSON")
	}

	cases := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"empty", nil, "header"},
		{"garbage", []byte("this is not a snapshot at all, just some text"), "not an xce snapshot"},
		{"binary garbage", bytes.Repeat([]byte{0xff, 0x00, 0x13}, 100), "not an xce snapshot"},
		{"magic only", []byte(snapshotMagic), "header"},
		{"short header", good[:hdr-1], "header"},
		{"wrong magic", wrongMagic, "not an xce snapshot"},
		{"next version", withVersion(snapshotVersion + 1), fmt.Sprintf("version %d", snapshotVersion+1)},
		{"version max", withVersion(0xffffffff), "newer"},
		{"version 0", withVersion(0), "version 0"},
		{"header only", good[:hdr], "request ids: count"},
		{"tasks truncated", good[:tasksAt+(body-tasksAt)/2], "tasks"},
		{"tasks out of order", withTasks(parted(2, part(2, 1, 'b', 1, 0, 0, 0, 1, 'a', 1, 0, 0, 0))...), "does not follow"},
		{"task listed twice", withTasks(parted(2, part(2, 1, 'a', 1, 0, 0, 0, 1, 'a', 1, 0, 0, 0))...), "does not follow"},
		{"parts out of order", withTasks(parted(2, part(1, 1, 'b', 1, 0, 0, 0), part(1, 1, 'a', 1, 0, 0, 0))...), "does not follow"},
		{"task listed in two parts", withTasks(parted(2, part(1, 1, 'a', 1, 0, 0, 0), part(1, 1, 'a', 1, 0, 0, 0))...), "does not follow"},
		{"empty task id", withTasks(parted(1, part(1, 0, 1, 0, 0, 0))...), "id of 0 bytes"},
		{"task id too long", withTasks(parted(1, part(1, 0x81, 0x02))...), "id of 257 bytes"},
		{"task flags", withTasks(parted(1, part(1, 1, 'a', 1, 0, 0x08, 0))...), "flags"},
		{"task state", withTasks(parted(1, part(1, 1, 'a', 1, 0, 0x06, 0))...), "flags"},
		{"task standby", withTasks(parted(1, part(1, 1, 'a', 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0))...), "standby"},
		{"task weight", withTasks(parted(1, part(1, 1, 'a', 1, 0, 0, 0x80, 0x80, 0x04))...), "weight 65537"},
		{"part of no tasks", withTasks(parted(1, part(0))...), "0 tasks"},
		{"part of more tasks than remain", withTasks(parted(1, part(2, 1, 'a', 1, 0, 0, 0, 1, 'b', 1, 0, 0, 0))...), "2 tasks"},
		{"part short of its records", withTasks(parted(2, part(2, 1, 'a', 1, 0, 0, 0))...), "unexpected EOF"},
		{"part longer than its records", withTasks(parted(1, part(1, 1, 'a', 1, 0, 0, 0, 7))...), "past their records"},
		{"part longer than the file", withTasks(1, 1, 0x80, 0x80, 0x01), "part at task 0"},
		{"part too long for its tasks", withTasks(1, 1, 0xff, 0xff, 0x7f), "bytes for 1 tasks"},
		{"item's key elsewhere", withMapped(1, mappedPart(ids("a"), item(1, 8, 0, 0))), "not the place of its id"},
		{"item of an empty id", withMapped(1, mappedPart(ids("a"), item(0, 0, 0, 0))), "id of 0 bytes"},
		{"item of too long an id", withMapped(1, mappedPart(ids("a"), item(maxIDLen+1, 0, 0, 0))), "id of 257 bytes"},
		{"items out of order", withMapped(2, mappedPart(ids("b", "a"), item(1, 0, 0, 0), item(1, 8, 0, 0))), "does not follow"},
		{"item listed twice", withMapped(2, mappedPart(ids("a", "a"), item(1, 0, 0, 0), item(1, 8, 0, 0))), "does not follow"},
		{"mapped parts out of order", withMapped(2, slices.Concat(mappedPart(ids("b"), item(1, 0, 0, 0)), mappedPart(ids("a"), item(1, 1<<arenaShift, 0, 0)))), "does not follow"},
		{"item flags", withMapped(1, mappedPart(ids("a"), item(1, 0, 0x08, 0))), "flags"},
		{"item state", withMapped(1, mappedPart(ids("a"), item(1, 0, 0x06, 0))), "flags"},
		{"item padding", withMapped(1, mappedPart(ids("a"), item(1, 0, 0, 1))), "padding is not zero"},
		{"ids past the items'", withMapped(1, mappedPart(append(ids("a"), make([]byte, 8)...), item(1, 0, 0, 0))), "bytes of ids past theirs"},
		{"ids short of an item's", withMapped(1, mappedPart([]byte("a"), item(1, 0, 0, 0))), "within its id"},
		{"ids too long for the part", withMapped(1, []byte{1, 0xff, 0xff, 0x7f, 0}), "bytes of ids for 1 tasks"},
		{"part padding too long", withMapped(1, []byte{1, 8, 8}), "padding of"},
		{"part padding not zero", withMapped(1, []byte{1, 8, 1, 7}), "padding is not zero"},
		{"mapped part of no tasks", withMapped(1, []byte{0, 8, 0}), "0 tasks"},
		{"mapped part cut short", append(append(bytes.Clone(good[:tasksAt]), 1), mappedPart(ids("a"), item(1, 0, 0, 0))[:20]...), "unexpected EOF"},
		{"v9 tasks out of order", v9Tasks(2, 1, 'b', 1, 0, 0, 0, 1, 'a', 1, 0, 0, 0), "does not follow"},
		{"v9 task id too long", v9Tasks(1, 0x81, 0x02), "id of 257 bytes"},
		{"result weight", withDedup(parted(1, part(1, 1, 'c', 1, 'r', 5, 0, 1, 'a', 5, 0, 0, 0x80, 0x80, 0x04, 0))...), "weight 65537"},
		{"more tasks than listed", withTasks(parted(3, part(1, 1, 'a', 1, 0, 0, 0))...), "tasks"},
		{"request ids truncated", good[:hdr+(tasksAt-hdr)/2], "request ids"},
		{"request id too long", withDedup(parted(1, part(1, 1, 'c', 0x81, 0x02))...), "257 bytes"},
		{"result code", withDedup(parted(1, part(1, 1, 'c', 1, 'r', 5, 9, 1, 'a', 5, 0, 0, 0, 0))...), "result code 9"},
		{"result flags", withDedup(parted(1, part(1, 1, 'c', 1, 'r', 5, 0, 1, 'a', 5, 0, 0x10, 0, 0))...), "flags"},
		{"request listed twice", withDedup(parted(2, part(2, 1, 'c', 1, 'r', 5, 0, 1, 'a', 5, 0, 0, 0, 0, 1, 'c', 1, 'r', 6, 0, 1, 'b', 6, 0, 0, 0, 0))...), "listed twice"},
		{"request listed in two parts", withDedup(parted(2, part(1, 1, 'c', 1, 'r', 5, 0, 1, 'a', 5, 0, 0, 0, 0), part(1, 1, 'c', 1, 'r', 6, 0, 1, 'b', 6, 0, 0, 0, 0))...), "listed twice"},
		{"request ids out of order", withDedup(parted(2, part(2, 1, 'c', 1, 'r', 6, 0, 1, 'a', 5, 0, 0, 0, 0, 1, 'c', 1, 's', 5, 0, 1, 'b', 6, 0, 0, 0, 0))...), "out of index order"},
		{"request id part of no entries", withDedup(parted(1, part(0))...), "0 entries"},
		{"request id part past its records", withDedup(parted(1, part(1, 1, 'c', 1, 'r', 5, 0, 1, 'a', 5, 0, 0, 0, 0, 9))...), "past their records"},
		{"request id part longer than the file", withDedup(1, 1, 0x80, 0x80, 0x01), "part at entry 0"},
		{"v9 request ids truncated", v9[:v9Dedup+4], "request ids"},
		{"truncated body", good[:hdr+(len(good)-hdr)/2], "body"},
		{"truncated by one", good[:len(good)-2], "body"}, // last byte is the encoder's newline
		{"body not json", withBody("{{{{"), "body"},
		{"body wrong type", withBody(`{"tasks": 5}`), "body"},
		{"body array", withBody(`[]`), "body"},
		{"unknown field", unknownField, "body"},
		{"other cluster", otherCluster, `"c2"`},
		{"no cluster", withBody(`{"applied_index": 3}`), "cluster"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := buildFSM(t, "c1")
			before := stateOf(t, f)
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Restore panicked: %v", r)
					}
				}()
				err = restoreBytes(f, tc.b)
			}()
			if err == nil {
				t.Fatal("Restore accepted a bad snapshot")
			}
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error %q does not wrap ErrBadSnapshot", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
			if after := stateOf(t, f); !reflect.DeepEqual(before, after) {
				t.Fatalf("refused Restore changed state:\n%+v\n%+v", before, after)
			}
		})
	}

	// The cluster error names both clusters.
	err := restoreBytes(NewFSM("c1"), otherCluster)
	if err == nil || !strings.Contains(err.Error(), `"c1"`) || !strings.Contains(err.Error(), `"c2"`) {
		t.Fatalf("other cluster: %v", err)
	}
}

func TestRestoreReadErrorIsBadSnapshot(t *testing.T) {
	good := persistSnapshot(t, buildFSM(t, "c1"))
	f := NewFSM("c1")
	err := f.Restore(io.MultiReader(bytes.NewReader(good[:len(good)/2]), iotestErrReader{}))
	if !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("read error: %v", err)
	}
	if f.NumTasks() != 0 || f.AppliedIndex() != 0 {
		t.Fatal("failed Restore changed state")
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

const goldenV1 = "testdata/snapshot-v1.bin"

// TestSnapshotGoldenV1 restores a snapshot written by the release that
// introduced format version 1. Never regenerate it to make this test pass:
// a future release must read today's snapshots. `go test -run Golden
// -update` rewrites it (only when the file must be recreated).
func TestSnapshotGoldenV1(t *testing.T) {
	f := goldenSnapshot(t, goldenV1, 1, buildFSM)
	checkBuiltState(t, f)
	checkBuiltBehaviour(t, f)
}

// goldenSnapshot returns the golden snapshot of one format version, restored
// into a new FSM after checking its header (and that another cluster refuses
// it). With -update it first writes the file from build, refusing when this
// binary writes another version: a golden file is recreated, never
// regenerated to make a test pass.
func goldenSnapshot(t *testing.T, path string, version byte, build func(testing.TB, string) *FSM) *FSM {
	t.Helper()
	hdr := []byte(snapshotMagic + "\x00\x00\x00" + string([]byte{version}))
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		b := persistSnapshot(t, build(t, "golden-cluster"))
		if !bytes.HasPrefix(b, hdr) {
			t.Fatalf("this binary writes %q, not version %d: refusing to write %s", b[:12], version, path)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.HasPrefix(b, hdr) {
		t.Fatalf("%s is not a version %d snapshot: %q", path, version, b[:min(len(b), 12)])
	}
	f := NewFSM("golden-cluster")
	if err := restoreBytes(f, b); err != nil {
		t.Fatalf("restoring %s: %v", path, err)
	}
	if err := restoreBytes(NewFSM("another-cluster"), b); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("golden snapshot restored into another cluster: %v", err)
	}
	return f
}

// TestNonUTF8IDsSurviveSnapshot: the log accepts any bytes in ids, but the
// JSON snapshot turns invalid UTF-8 into U+FFFD, so a replica restored from
// a snapshot holds other ids than one that applied the log (here two tasks
// collapse into one). Either DecodeCommand must refuse such ids or the
// snapshot must keep them.
func TestNonUTF8IDsSurviveSnapshot(t *testing.T) {
	f := NewFSM("c")
	for i, c := range []Command{submitCmd("c", "r\xff", "a\xff"), submitCmd("c", "r\xfe", "a\xfe")} {
		if r := apply(t, f, uint64(i+1), c); r.Code == CodeInvalid {
			return // refused at decode: fine
		}
	}
	g := NewFSM("c")
	if err := restoreBytes(g, persistSnapshot(t, f)); err != nil {
		t.Fatal(err)
	}
	if a, b := stateOf(t, f), stateOf(t, g); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored state differs:\n%+v\n%+v", a, b)
	}
}

// TestStreamedBodyEqualsMarshal: the element-by-element writer produces a
// document that decodes to exactly what json.Marshal of the whole body does.
func TestStreamedBodyEqualsMarshal(t *testing.T) {
	s := &snapshotV7{snapshotV5: snapshotV5{snapshotV4: snapshotV4{snapshotV3: snapshotV3{snapshotV2: snapshotV2{
		snapshotV1: snapshotV1{ClusterID: "c", AppliedIndex: 9, DedupWindow: 5, DedupMax: 7,
			Tasks: []Task{{ID: "a", CreatedIndex: 1, State: TaskStatePending}, {ID: "b\"q", Stateful: true, StandbyReplicas: 2}},
			Dedup: []dedupRecord{{Client: "x", Request: "r", Result: Result{Index: 3, Task: Task{ID: "a"}}}}},
		Outbox:    []Event{{Index: 4, Term: 2, Kind: EventTaskSubmitted, TaskID: "a"}, {Index: 5, Term: 2, Kind: EventAssignment, Key: "c", Generation: 1, Placements: []Placement{{Task: "a", Active: "w1"}}}},
		Published: 3,
	}, AssignmentGeneration: 1, Assignment: []Placement{{Task: "a", Active: "w1", Standbys: []string{"w2"}, Warmups: []string{"w3"}}}},
		Members: []MemberRecord{{ID: "n1", PeerAddr: "h:1", ClientAddr: "h:2"}, {ID: "n2", PeerAddr: "[::1]:3", ClientAddr: "g:4"}}},
		Epochs: []taskEpoch{{Task: "a", Epoch: 3}, {Task: "b\"q", Epoch: 1}}}, Drained: []string{"w1", "w9"}}
	empty := &snapshotV7{snapshotV5: snapshotV5{snapshotV4: snapshotV4{snapshotV3: snapshotV3{snapshotV2: snapshotV2{snapshotV1: snapshotV1{Tasks: []Task{}, Dedup: []dedupRecord{}}, Outbox: []Event{}}, Assignment: []Placement{}}, Members: []MemberRecord{}}, Epochs: []taskEpoch{}}, Drained: []string{}}
	for _, v := range []*snapshotV9{
		{snapshotV8: snapshotV8{snapshotV7: *s, PlacementFrozen: true}, WorkerAddrs: map[string]string{"w1": "w1.example:7000", "w\"2": "h:1"}},
		{snapshotV8: snapshotV8{snapshotV7: *empty}},
	} {
		var streamed bytes.Buffer
		tasks := make([]*Task, len(v.Tasks))
		for i := range v.Tasks {
			tasks[i] = &v.Tasks[i]
		}
		if err := writeBody(&streamed, v, tasks); err != nil {
			t.Fatal(err)
		}
		whole, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		if err := json.Unmarshal(streamed.Bytes(), &a); err != nil {
			t.Fatalf("streamed body is not JSON: %v\n%s", err, streamed.Bytes())
		}
		if err := json.Unmarshal(whole, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("streamed %s\nwhole    %s", streamed.Bytes(), whole)
		}
	}
}
