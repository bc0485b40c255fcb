package state

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// epochStep is one entry of an epoch table test: an assignment delta from
// the current generation (set, removed), a delta from a stale generation
// (stale), a delete or a submit; then the epochs every task must have.
type epochStep struct {
	set     []Placement
	removed []string
	stale   bool
	del     string
	submit  string
	want    map[string]uint64
}

func TestTaskEpochRule(t *testing.T) {
	act := func(task, active string, standbys ...string) Placement {
		return Placement{Task: task, Active: active, Standbys: standbys}
	}
	cases := []struct {
		name  string
		steps []epochStep
	}{
		{"first active", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
		}},
		{"no active yet", []epochStep{
			{set: []Placement{{Task: "t", Warmups: []string{"w1"}}}, want: map[string]uint64{"t": 0}},
			{set: []Placement{act("t", "", "w1")}, want: map[string]uint64{"t": 0}},
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
		}},
		{"same active again", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w1", "w2")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("u", "w1")}, want: map[string]uint64{"t": 1, "u": 1}},
		}},
		{"move", []epochStep{
			{set: []Placement{act("t", "w1", "w2")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w2", "w1")}, want: map[string]uint64{"t": 2}},
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 3}},
		}},
		{"moves of several tasks in one delta", []epochStep{
			{set: []Placement{act("t", "w1"), act("u", "w2")}, want: map[string]uint64{"t": 1, "u": 1}},
			{set: []Placement{act("t", "w2"), act("u", "w2", "w1")}, want: map[string]uint64{"t": 2, "u": 1}},
		}},
		{"active removed then re-added", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "", "w1")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "", "w2")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 2}},
		}},
		{"placement removed then re-added", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{removed: []string{"t"}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 2}},
		}},
		{"task deleted and re-submitted", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w2")}, want: map[string]uint64{"t": 2}},
			{del: "t", want: map[string]uint64{"t": 0}},
			{submit: "t", want: map[string]uint64{"t": 0}},
			{set: []Placement{act("t", "w2")}, want: map[string]uint64{"t": 1}},
		}},
		{"task without a placement deleted", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{removed: []string{"t"}, want: map[string]uint64{"t": 1}},
			{del: "t", want: map[string]uint64{"t": 0}},
		}},
		{"stale delta changes nothing", []epochStep{
			{set: []Placement{act("t", "w1")}, want: map[string]uint64{"t": 1}},
			{set: []Placement{act("t", "w2")}, stale: true, want: map[string]uint64{"t": 1}},
		}},
		{"placement of a task that does not exist", []epochStep{
			{set: []Placement{act("ghost", "w1"), act("t", "w1")}, want: map[string]uint64{"ghost": 0, "t": 1}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFSM("c")
			index := uint64(0)
			next := func(c Command) Result {
				index++
				return applyTerm(t, f, index, 1, c)
			}
			next(submitCmd("", "", "t"))
			next(submitCmd("", "", "u"))
			for i, s := range tc.steps {
				gen, _ := f.AssignmentGeneration()
				switch {
				case s.del != "":
					next(deleteCmd("", "", s.del))
				case s.submit != "":
					next(submitCmd("", "", s.submit))
				case s.stale:
					if r := next(assignCmd(gen+1, s.set, s.removed...)); r.Code != CodeConflict {
						t.Fatalf("step %d: stale delta %+v", i, r)
					}
				default:
					if r := next(assignCmd(gen, s.set, s.removed...)); r.Code != CodeOK {
						t.Fatalf("step %d: delta %+v", i, r)
					}
				}
				_, m := f.Assignment()
				for id, want := range s.want {
					if got := f.TaskEpoch(id); got != want {
						t.Fatalf("step %d: epoch of %s = %d, want %d", i, id, got, want)
					}
					if p, ok := m[id]; ok && p.Epoch != want {
						t.Fatalf("step %d: placement of %s carries epoch %d, want %d", i, id, p.Epoch, want)
					}
				}
				fullStateOf(t, f) // invariants
			}
			// Epochs are derived, never commanded: events carry the
			// placements as the delta gave them.
			for _, ev := range f.EventsAfter(0, 1000) {
				for _, p := range ev.Placements {
					if p.Epoch != 0 {
						t.Fatalf("event %d carries a placement epoch: %+v", ev.Index, p)
					}
				}
			}
		})
	}
}

// TestEpochNotInTheCommand: a placement's epoch is not part of the log
// format; a delta that sets one encodes as one that does not.
func TestEpochNotInTheCommand(t *testing.T) {
	p := Placement{Task: "t", Active: "w1", Standbys: []string{"w2"}}
	with := assignCmd(0, []Placement{epoched(p, 7)})
	without := assignCmd(0, []Placement{p})
	if !bytes.Equal(with.Encode(), without.Encode()) {
		t.Fatal("the epoch changed the encoded command")
	}
	c, err := DecodeCommand(with.Encode())
	if err != nil || c.Assign.Set[0].Epoch != 0 {
		t.Fatalf("decoded %+v, %v", c.Assign.Set, err)
	}
}

// buildEpochFSM is buildMembersFSM's history followed by moves, an active
// taken away and given back, a placement removed, and a task deleted and
// submitted again.
func buildEpochFSM(t testing.TB, cluster string) *FSM {
	t.Helper()
	// Applied 27, generation 3: delta (no placement, epoch 1), epsilon
	// (active w4, epoch 1), eta (warm-up only), zeta (active w3, epoch 1).
	f := buildMembersFSM(t, cluster)
	for i, c := range []Command{
		assignCmd(3, []Placement{
			{Task: "zeta", Active: "w1", Standbys: []string{"w3"}}, // move: 2
			{Task: "epsilon", Standbys: []string{"w4"}},            // active taken away: 1
			{Task: "eta", Active: "w8"},                            // first active: 1
			{Task: "delta", Active: "w2"},                          // placed again: 2
		}),
		assignCmd(4, []Placement{
			{Task: "zeta", Active: "w2", Standbys: []string{"w1"}},  // move: 3
			{Task: "epsilon", Active: "w4"},                         // given back: 2
			{Task: "delta", Active: "w2", Standbys: []string{"w5"}}, // same active: 2
		}),
		deleteCmd("cG", "r1", "eta"),
		submitCmd("cG", "r2", "eta"),
		submitCmd("", "", "theta"),
		assignCmd(5, []Placement{
			{Task: "theta", Active: "w5"},          // 1
			{Task: "eta", Warmups: []string{"w6"}}, // re-submitted: 0
		}, "zeta"), // keeps 3
	} {
		if r := applyTerm(t, f, uint64(28+i), 7, c); r.Code != CodeOK {
			t.Fatalf("%+v: %+v", c, r)
		}
	}
	return f
}

// checkEpochBuiltState checks buildEpochFSM's epochs and assignment.
func checkEpochBuiltState(t *testing.T, f *FSM) {
	t.Helper()
	if f.AppliedIndex() != 33 {
		t.Fatalf("applied %d, want 33", f.AppliedIndex())
	}
	if got := f.Members(); !reflect.DeepEqual(got, builtMembers) {
		t.Fatalf("members %+v", got)
	}
	want := assignState{Gen: 6, Placements: map[string]Placement{
		"delta":   {Task: "delta", Active: "w2", Standbys: []string{"w5"}, Epoch: 2},
		"epsilon": {Task: "epsilon", Active: "w4", Epoch: 2},
		"eta":     {Task: "eta", Warmups: []string{"w6"}},
		"theta":   {Task: "theta", Active: "w5", Epoch: 1},
	}}
	s := fullStateOf(t, f)
	if !reflect.DeepEqual(s.Assign, want) {
		t.Fatalf("assignment:\n got %+v\nwant %+v", s.Assign, want)
	}
	if want := map[string]uint64{"delta": 2, "epsilon": 2, "theta": 1, "zeta": 3}; !reflect.DeepEqual(s.Epochs, want) {
		t.Fatalf("epochs %v, want %v", s.Epochs, want)
	}
	if tk, _ := f.Task("eta"); tk != unplacedTask("eta", 31) {
		t.Fatalf("eta %+v", tk)
	}
}

// checkEpochBuiltBehaviour: after buildEpochFSM's state, epochs go on from
// where they were.
func checkEpochBuiltBehaviour(t *testing.T, f *FSM) {
	t.Helper()
	applyTerm(t, f, 34, 8, assignCmd(6, []Placement{
		{Task: "zeta", Active: "w9"},    // 4
		{Task: "eta", Active: "w6"},     // 1
		{Task: "delta", Active: "w2"},   // 2
		{Task: "epsilon", Active: "w5"}, // 3
	}, "theta")) // keeps 1
	applyTerm(t, f, 35, 8, deleteCmd("", "", "delta"))
	want := map[string]uint64{"epsilon": 3, "eta": 1, "theta": 1, "zeta": 4}
	if got := fullStateOf(t, f).Epochs; !reflect.DeepEqual(got, want) {
		t.Fatalf("epochs %v, want %v", got, want)
	}
}

func TestEpochSnapshotRoundTrip(t *testing.T) {
	src := buildEpochFSM(t, "c1")
	checkEpochBuiltState(t, src)
	b := persistSnapshot(t, src)
	if !bytes.Contains(b, []byte(`"epochs":[{"task":"delta","epoch":2}`)) {
		t.Fatalf("snapshot does not list the epochs in task order:\n%s", b)
	}
	if bytes.Contains(b[bytes.Index(b, []byte(`"assignment":[`)):bytes.Index(b, []byte(`"members":[`))], []byte(`"epoch"`)) {
		t.Fatalf("snapshot placements carry epochs:\n%s", b)
	}
	dst := NewFSM("c1")
	// Restoring replaces the epochs the FSM had.
	apply(t, dst, 1, submitCmd("", "", "zeta"))
	apply(t, dst, 2, assignCmd(0, []Placement{{Task: "zeta", Active: "w1"}}))
	apply(t, dst, 3, assignCmd(1, []Placement{{Task: "zeta", Active: "w2"}}))
	if err := restoreBytes(dst, b); err != nil {
		t.Fatal(err)
	}
	checkEpochBuiltState(t, dst)
	if a, b := fullStateOf(t, src), fullStateOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored FSM differs:\n%+v\n%+v", a, b)
	}
	if again := persistSnapshot(t, dst); !bytes.Equal(again, b) {
		t.Fatal("snapshot of the restored FSM differs")
	}
	checkEpochBuiltBehaviour(t, src)
	checkEpochBuiltBehaviour(t, dst)
	if a, b := fullStateOf(t, src), fullStateOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("source and restored FSM diverged:\n%+v\n%+v", a, b)
	}
}

const goldenV5 = "testdata/snapshot-v5.bin"

// TestSnapshotGoldenV5 restores a snapshot written by the release that
// introduced format version 5 (task epochs). Never regenerate it to make
// this test pass. `go test -run 'GoldenV5$' -update` rewrites it (only
// when the file must be recreated; do not let -update reach the older
// golden tests).
func TestSnapshotGoldenV5(t *testing.T) {
	f := goldenSnapshot(t, goldenV5, 5, buildEpochFSM)
	checkEpochBuiltState(t, f)
	checkEpochBuiltBehaviour(t, f)
}

const goldenV6 = "testdata/snapshot-v6.bin"

// TestSnapshotGoldenV6 restores a snapshot written by the release that
// introduced format version 6 (the registry in binary). Never regenerate
// it to make this test pass. `go test -run 'GoldenV6$' -update` rewrites
// it (only when the file must be recreated).
func TestSnapshotGoldenV6(t *testing.T) {
	f := goldenSnapshot(t, goldenV6, 6, buildEpochFSM)
	checkEpochBuiltState(t, f)
	checkEpochBuiltBehaviour(t, f)
}

// Snapshots older than version 5 predate epochs: a task with an active
// worker restores with epoch 1, every other with none, replacing the
// epochs the FSM had; epochs count on from there.
func TestOldSnapshotsRestoreEpochs(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]uint64
	}{
		{goldenV1, nil},
		{goldenV2, nil},
		{goldenV3, map[string]uint64{"epsilon": 1, "zeta": 1}}, // delta had an active, lost it: 0
		{goldenV4, map[string]uint64{"epsilon": 1, "zeta": 1}},
	} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		f := NewFSM("golden-cluster")
		apply(t, f, 1, submitCmd("", "", "delta"))
		apply(t, f, 2, assignCmd(0, []Placement{{Task: "delta", Active: "w1"}}))
		if err := restoreBytes(f, b); err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		s := fullStateOf(t, f)
		if !reflect.DeepEqual(s.Epochs, tc.want) {
			t.Fatalf("%s: epochs %v, want %v", tc.file, s.Epochs, tc.want)
		}
		for id, p := range s.Assign.Placements {
			if p.Epoch != tc.want[id] {
				t.Fatalf("%s: placement %+v", tc.file, p)
			}
		}
		if tc.want == nil {
			continue
		}
		gen := s.Assign.Gen
		applyTerm(t, f, f.AppliedIndex()+1, 9, assignCmd(gen, []Placement{{Task: "zeta", Active: "w7"}, {Task: "delta", Active: "w1"}}))
		if z, d := f.TaskEpoch("zeta"), f.TaskEpoch("delta"); z != 2 || d != 1 {
			t.Fatalf("%s: after a move zeta has epoch %d, delta %d", tc.file, z, d)
		}
	}
}

// A version 5 snapshot whose epochs do not fit its tasks and assignment is
// refused and changes nothing.
func TestRestoreRefusesBadEpochs(t *testing.T) {
	good := persistSnapshot(t, buildEpochFSM(t, "c1"))
	for _, tc := range []struct {
		name, from, to, msg string
	}{
		{"unknown task", `{"task":"delta","epoch":2}`, `{"task":"nope","epoch":2}`, `task "nope", which does not exist`},
		{"epoch 0", `{"task":"theta","epoch":1}`, `{"task":"theta","epoch":0}`, `epoch 0 listed for task "theta"`},
		{"listed twice", `{"task":"delta","epoch":2}`, `{"task":"delta","epoch":2},{"task":"delta","epoch":3}`, `"delta" listed twice`},
		{"active without epoch", `{"task":"theta","epoch":1}`, `{"task":"eta","epoch":1}`, `"theta" has an active worker and no epoch`},
		{"placement with an epoch", `{"task":"eta","warmups":["w6"]}`, `{"task":"eta","warmups":["w6"],"epoch":1}`, `placement of task "eta" carries an epoch`},
		{"placement of an unknown task", `{"task":"theta","active":"w5"}`, `{"task":"nope","active":"w5"}`, `placement of task "nope", which does not exist`},
		{"epochs not a list", `"epochs":[`, `"epochs":{"x":1},"y":[`, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The last occurrence: placements in the outbox's events come
			// before the assignment's.
			i := bytes.LastIndex(good, []byte(tc.from))
			if i < 0 {
				t.Fatalf("%s not in the snapshot", tc.from)
			}
			b := append(append(bytes.Clone(good[:i]), tc.to...), good[i+len(tc.from):]...)
			f := buildEpochFSM(t, "c1")
			before := fullStateOf(t, f)
			err := restoreBytes(f, b)
			if !errors.Is(err, ErrBadSnapshot) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want one about %q", err, tc.msg)
			}
			if after := fullStateOf(t, f); !reflect.DeepEqual(before, after) {
				t.Fatalf("refused Restore changed state:\n%+v\n%+v", before, after)
			}
		})
	}
}

// FuzzRestore feeds arbitrary bytes to Restore: it never panics; a refused
// snapshot changes nothing; an accepted one holds epochs that fit its
// assignment, and its own snapshot restores to the same bytes again.
func FuzzRestore(f *testing.F) {
	for _, file := range []string{goldenV1, goldenV2, goldenV3, goldenV4, goldenV5, goldenV6, goldenV7, goldenV8, goldenV9, goldenV10, goldenV11} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(snapshotMagic + "\x00\x00\x00\x05{}"))
	f.Add([]byte(snapshotMagic + "\x00\x00\x00\x05" + `{"cluster_id":"golden-cluster","epochs":[{"task":"a","epoch":1}]}`))
	f.Add([]byte(snapshotMagic + "\x00\x00\x00\x06\x02\x01a\x01\x00\x00\x02b\xff\x02\x01\x05" + `{"cluster_id":"golden-cluster"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fsm := NewFSM("golden-cluster")
		if err := restoreBytes(fsm, b); err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error %v is not ErrBadSnapshot", err)
			}
			if fsm.AppliedIndex() != 0 || fsm.NumTasks() != 0 {
				t.Fatal("a refused snapshot changed the state")
			}
			return
		}
		_, m := fsm.Assignment()
		for id, p := range m {
			if e := fsm.TaskEpoch(id); p.Epoch != e || p.Active != "" && e == 0 {
				t.Fatalf("placement %+v, epoch %d", p, e)
			}
		}
		again := persistSnapshot(t, fsm)
		g := NewFSM("golden-cluster")
		if err := restoreBytes(g, again); err != nil {
			t.Fatalf("the snapshot of a restored state does not restore: %v", err)
		}
		if b2 := persistSnapshot(t, g); !bytes.Equal(again, b2) {
			t.Fatalf("snapshots differ:\n%s\n%s", again, b2)
		}
	})
}
