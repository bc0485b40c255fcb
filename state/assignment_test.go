package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// assignCmd is a CmdSetAssignment taking the assignment from base to base+1.
func assignCmd(base uint64, set []Placement, removed ...string) Command {
	return Command{Type: CmdSetAssignment, Assign: AssignmentDelta{Base: base, Generation: base + 1, Set: set, Removed: removed}}
}

// assignedTask is pendingTask after an assignment gave it an active worker.
func assignedTask(id string, index uint64) Task {
	return Task{ID: id, CreatedIndex: index, State: TaskStateAssigned}
}

// unplacedTask is pendingTask after an assignment placed it without an
// active worker.
func unplacedTask(id string, index uint64) Task {
	return Task{ID: id, CreatedIndex: index, State: TaskStatePending, PendingReason: "no worker available"}
}

// epoched is p as the FSM hands it out, carrying its task's epoch e.
func epoched(p Placement, e uint64) Placement {
	p.Epoch = e
	return p
}

// assignState is the assignment part of an FSM.
type assignState struct {
	Gen        uint64
	Placements map[string]Placement
}

// assignOf reads the assignment and checks its invariants: every placement
// is keyed by its task, belongs to a task that exists, and every task's state
// says whether it has a placement with an active worker. The accessors
// (Assignment, AssignmentGeneration) must agree with the internal state.
func assignOf(t testing.TB, f *FSM) assignState {
	t.Helper()
	gen, m := f.Assignment()
	if g, _ := f.AssignmentGeneration(); g != gen {
		t.Fatalf("AssignmentGeneration() = %d, Assignment() generation %d", g, gen)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := assignState{Gen: f.assignGen, Placements: maps.Clone(f.assignment)}
	if len(s.Placements) == 0 {
		s.Placements = nil
	}
	if len(m) == 0 {
		m = nil
	}
	if gen != s.Gen || !reflect.DeepEqual(m, s.Placements) {
		t.Fatalf("Assignment() = %d %+v, FSM holds %d %+v", gen, m, s.Gen, s.Placements)
	}
	for id, p := range f.assignment {
		if id != p.Task {
			t.Fatalf("placement keyed %q is of task %q", id, p.Task)
		}
		if _, ok := f.tasks.get(id); !ok {
			t.Fatalf("placement of task %q, which does not exist", id)
		}
		if p.Epoch != f.epochs[id] || p.Active != "" && p.Epoch == 0 {
			t.Fatalf("placement %+v, task epoch %d", p, f.epochs[id])
		}
	}
	for id, e := range f.epochs {
		if _, ok := f.tasks.get(id); !ok || e == 0 {
			t.Fatalf("epoch %d of task %q (exists: %v)", e, id, ok)
		}
	}
	for id, tk := range registryTasks(t, f.tasks) {
		p, ok := f.assignment[id]
		var state, reason string
		switch {
		case !ok:
			state, reason = TaskStatePending, "no worker assigned"
		case p.Active == "":
			state, reason = TaskStatePending, "no worker available"
		default:
			state, reason = TaskStateAssigned, ""
		}
		if tk.State != state || tk.PendingReason != reason {
			t.Fatalf("task %q is %s %q with placement %+v (%v), want %s %q", id, tk.State, tk.PendingReason, p, ok, state, reason)
		}
	}
	return s
}

// fullState is everything an FSM holds that replicas must agree on.
type fullState struct {
	State  fsmState
	Outbox outboxState
	Assign assignState
	// Epochs holds the epoch of every task that has one.
	Epochs map[string]uint64
}

func fullStateOf(t testing.TB, f *FSM) fullState {
	t.Helper()
	s := fullState{State: stateOf(t, f), Outbox: outboxOf(t, f), Assign: assignOf(t, f)}
	f.mu.RLock()
	if len(f.epochs) > 0 {
		s.Epochs = maps.Clone(f.epochs)
	}
	f.mu.RUnlock()
	for _, tk := range s.State.Tasks {
		if got := f.TaskEpoch(tk.ID); got != s.Epochs[tk.ID] {
			t.Fatalf("TaskEpoch(%q) = %d, FSM holds %d", tk.ID, got, s.Epochs[tk.ID])
		}
	}
	all, ver := f.AllTasks()
	slices.SortFunc(all, func(a, b Task) int { return strings.Compare(a.ID, b.ID) })
	if len(all) == 0 {
		all = nil
	}
	if !reflect.DeepEqual(all, s.State.Tasks) {
		t.Fatalf("AllTasks() = %+v, FSM holds %+v", all, s.State.Tasks)
	}
	if v := f.TaskVersion(); v != ver {
		t.Fatalf("AllTasks version %d, TaskVersion %d", ver, v)
	}
	return s
}

// ---- Command encoding ----

// longIDs returns n distinct ids of exactly maxIDLen bytes, each starting
// with prefix.
func longIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		id := fmt.Sprint(prefix, i, ".")
		ids[i] = id + strings.Repeat("x", maxIDLen-len(id))
	}
	return ids
}

func TestAssignmentCommandRoundTrip(t *testing.T) {
	long := strings.Repeat("x", maxIDLen)
	long2 := strings.Repeat("y", maxIDLen)
	standbys, warmups := make([]string, maxCopies), make([]string, maxCopies)
	for i := range standbys {
		standbys[i], warmups[i] = fmt.Sprint("w", i), fmt.Sprint("u", i)
	}
	longCopies := longIDs("s", 6)
	cases := []AssignmentDelta{
		{Base: 0, Generation: 1},
		{Base: 41, Generation: 42},
		{Base: math.MaxUint64 - 1, Generation: math.MaxUint64},
		{Base: 1, Generation: 2, Set: []Placement{{Task: "t1", Active: "w1"}, {Task: "t2", Active: "w2"}, {Task: "t3"}}},
		{Base: 2, Generation: 3, Set: []Placement{
			{Task: "t1", Active: "w1", Standbys: []string{"w2", "w3"}, Warmups: []string{"w4"}},
			{Task: "t2", Standbys: []string{"w1"}},
			{Task: "t3", Warmups: []string{"w9", "w8", "w7"}},
		}},
		{Base: 3, Generation: 4, Removed: []string{"t1", "t2", "t9"}},
		{Base: 4, Generation: 5, Set: []Placement{{Task: "t1", Active: "w1"}}, Removed: []string{"t2"}},
		{Base: 5, Generation: 6, Set: []Placement{{Task: long, Active: long, Standbys: longCopies[:3], Warmups: longCopies[3:]}}, Removed: []string{long2}},
		{Base: 6, Generation: 7, Set: []Placement{{Task: "t", Active: "w", Standbys: standbys, Warmups: warmups}}},
		{Base: 7, Generation: 8, Set: []Placement{{Task: "ünï", Active: "\x00"}, {Task: "\x00"}}, Removed: []string{"ü"}},
		// Ids are distinct per namespace: a worker may hold several tasks
		// and share a task's id, and a placement may have no active worker
		// but copies.
		{Base: 8, Generation: 9, Set: []Placement{
			{Task: "a", Active: "a", Standbys: []string{"b"}, Warmups: []string{"c"}},
			{Task: "b", Active: "b", Standbys: []string{"a"}, Warmups: []string{"c"}},
			{Task: "c", Standbys: []string{"a", "b"}, Warmups: []string{"c"}},
		}, Removed: []string{"w", "x"}},
	}
	for i, d := range cases {
		c := Command{Type: CmdSetAssignment, Assign: d}
		b := c.Encode()
		if b[0] != commandVersion || CmdType(b[1]) != CmdSetAssignment {
			t.Fatalf("case %d: header % x", i, b[:2])
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("case %d: DecodeCommand(Encode(%+v)): %v", i, d, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("case %d: round trip:\n got %+v\nwant %+v", i, got, c)
		}
		if again := got.Encode(); !bytes.Equal(again, b) {
			t.Fatalf("case %d: re-encoding differs", i)
		}
	}
}

// TestAssignmentCommandEncodingIsStable pins the wire format of
// CmdSetAssignment: base, generation, placements (task, active, standbys,
// warm-ups), removed, every count and length a uvarint.
func TestAssignmentCommandEncodingIsStable(t *testing.T) {
	cases := []struct {
		c    Command
		want []byte
	}{
		{assignCmd(0, nil), []byte{1, 5, 0, 1, 0, 0}},
		{Command{Type: CmdSetAssignment, Assign: AssignmentDelta{Base: 300, Generation: 301,
			Set:     []Placement{{Task: "t", Active: "w", Standbys: []string{"s"}, Warmups: []string{"u", "v"}}, {Task: "p"}},
			Removed: []string{"r"}}},
			[]byte{1, 5, 0xac, 0x02, 0xad, 0x02,
				2,
				1, 't', 1, 'w', 1, 1, 's', 2, 1, 'u', 1, 'v',
				1, 'p', 0, 0, 0,
				1, 1, 'r'}},
	}
	for _, tc := range cases {
		if got := tc.c.Encode(); !bytes.Equal(got, tc.want) {
			t.Errorf("Encode(%+v) = % x, want % x", tc.c, got, tc.want)
		}
		got, err := DecodeCommand(tc.want)
		if err != nil || !reflect.DeepEqual(got, tc.c) {
			t.Errorf("DecodeCommand(% x) = %+v, %v; want %+v", tc.want, got, err, tc.c)
		}
	}
}

// TestAssignmentIgnoresOtherFields: an assignment carries only its delta (no
// client or request id: a retried delta is refused by its base instead).
func TestAssignmentIgnoresOtherFields(t *testing.T) {
	c := assignCmd(4, []Placement{{Task: "t", Active: "w"}}, "x")
	c.ClientID, c.RequestID, c.Task, c.UpTo = "c", "r", Task{ID: "t", Stateful: true}, 9
	got, err := DecodeCommand(c.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if want := assignCmd(4, []Placement{{Task: "t", Active: "w"}}, "x"); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// assignHeader starts a raw CmdSetAssignment entry.
func assignHeader(base, gen uint64) []byte {
	b := []byte{commandVersion, byte(CmdSetAssignment)}
	b = binary.AppendUvarint(b, base)
	return binary.AppendUvarint(b, gen)
}

func uv(b []byte, vs ...uint64) []byte {
	for _, v := range vs {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

// emptyStrings is n zero-length strings as encoded in a list.
func emptyStrings(n int) []byte {
	return append(binary.AppendUvarint(nil, uint64(n)), make([]byte, n)...)
}

// assignOfSize returns a valid assignment entry of exactly size bytes (a
// delta removing many distinct ids).
func assignOfSize(t testing.TB, size int) []byte {
	t.Helper()
	const idLen = 200 // a two-byte length, and room to grow to maxIDLen
	n := (size - 16) / (idLen + 2)
	ids := make([]string, n)
	for i := range ids {
		id := fmt.Sprintf("%07d.", i)
		ids[i] = id + strings.Repeat(string(rune('a'+i%26)), idLen-len(id))
	}
	c := assignCmd(0, nil, ids...)
	diff := size - len(c.Encode())
	if diff < 0 {
		t.Fatalf("assignOfSize(%d): already %d bytes", size, len(c.Encode()))
	}
	for i := 0; diff > 0; i++ {
		grow := min(diff, maxIDLen-len(ids[i]))
		ids[i] += strings.Repeat("z", grow)
		diff -= grow
	}
	b := c.Encode()
	if len(b) != size {
		t.Fatalf("assignOfSize(%d): %d bytes", size, len(b))
	}
	return b
}

func TestDecodeAssignmentErrors(t *testing.T) {
	long := strings.Repeat("x", maxIDLen+1)
	valid := enc(assignCmd(2, []Placement{{Task: "t", Active: "w", Standbys: []string{"s"}, Warmups: []string{"u"}}}, "r"))
	// A placement of task "t", active "w", then the given lists.
	placement := func(tail ...[]byte) []byte {
		b := uv(assignHeader(0, 1), 1)
		b = appendString(appendString(b, "t"), "w")
		for _, x := range tail {
			b = append(b, x...)
		}
		return b
	}
	oversizedSubmit := append(enc(submitCmd("c", "r", "t")), make([]byte, maxCmdBytes)...)[:maxCmdBytes+1]
	oversizedUnknown := make([]byte, maxCmdBytes+1)
	oversizedUnknown[0], oversizedUnknown[1] = commandVersion, 200
	maxID := strings.Repeat("y", maxIDLen)
	// A delta from generation 0 placing the given placements.
	placed := func(ps ...Placement) []byte { return enc(assignCmd(0, ps)) }
	removed := func(ids ...string) []byte { return enc(assignCmd(0, nil, ids...)) }
	const (
		badGen     = "generation must follow base"
		emptyTask  = "empty task id"
		twice      = "task listed twice"
		badWorkers = "bad worker ids in a placement"
	)

	cases := []struct {
		name string
		b    []byte
		msg  string
	}{
		{"generation equals base", uv(assignHeader(0, 0), 0, 0), "generation must follow base"},
		{"generation equals base 7", uv(assignHeader(7, 7), 0, 0), "generation must follow base"},
		{"generation skips one", uv(assignHeader(3, 5), 0, 0), "generation must follow base"},
		{"generation below base", uv(assignHeader(5, 4), 0, 0), "generation must follow base"},
		{"generation zero", uv(assignHeader(9, 0), 0, 0), "generation must follow base"},
		// Base+1 would wrap around to 0: no generation follows the last.
		{"base max", uv(assignHeader(math.MaxUint64, 0), 0, 0), badGen},
		{"base max generation max", uv(assignHeader(math.MaxUint64, math.MaxUint64), 0, 0), badGen},
		{"base max with a placement", enc(Command{Type: CmdSetAssignment, Assign: AssignmentDelta{Base: math.MaxUint64, Set: []Placement{{Task: "t", Active: "w"}}}}), badGen},
		// Every task id non-empty, and once in Set and Removed together.
		{"empty task placed", placed(Placement{Active: "w"}), emptyTask},
		{"empty task placed bare", placed(Placement{}), emptyTask},
		{"empty task placed second", placed(Placement{Task: "t", Active: "w"}, Placement{Active: "w"}), emptyTask},
		{"empty task removed", removed(""), emptyTask},
		{"empty task removed second", removed("t", ""), emptyTask},
		{"empty task removed after a placement", enc(assignCmd(0, []Placement{{Task: "t"}}, "")), emptyTask},
		{"task placed twice", placed(Placement{Task: "t", Active: "w1"}, Placement{Task: "t", Active: "w2"}), twice},
		{"same placement twice", placed(Placement{Task: "t", Active: "w"}, Placement{Task: "u"}, Placement{Task: "t", Active: "w"}), twice},
		{"task removed twice", removed("t", "u", "t"), twice},
		{"task placed and removed", enc(assignCmd(0, []Placement{{Task: "t", Active: "w"}}, "t")), twice},
		{"long task placed and removed", enc(assignCmd(0, []Placement{{Task: "t"}, {Task: maxID}}, "u", maxID)), twice},
		// Within a placement every worker once, and no empty copy.
		{"active is a standby", placed(Placement{Task: "t", Active: "w", Standbys: []string{"w"}}), badWorkers},
		{"active is a warmup", placed(Placement{Task: "t", Active: "w", Warmups: []string{"v", "w"}}), badWorkers},
		{"standby twice", placed(Placement{Task: "t", Active: "w", Standbys: []string{"s", "v", "s"}}), badWorkers},
		{"warmup twice", placed(Placement{Task: "t", Warmups: []string{"u", "u"}}), badWorkers},
		{"standby is a warmup", placed(Placement{Task: "t", Active: "w", Standbys: []string{"s"}, Warmups: []string{"s"}}), badWorkers},
		{"long standby is a warmup", placed(Placement{Task: "t", Standbys: []string{maxID}, Warmups: []string{"u", maxID}}), badWorkers},
		{"empty standby", placed(Placement{Task: "t", Active: "w", Standbys: []string{""}}), badWorkers},
		{"empty warmup", placed(Placement{Task: "t", Active: "w", Warmups: []string{"u", ""}}), badWorkers},
		{"empty standby without active", placed(Placement{Task: "t", Standbys: []string{""}}), badWorkers},
		{"empty warmup without active", placed(Placement{Task: "t", Warmups: []string{""}}), badWorkers},
		{"bad workers in a later placement", placed(Placement{Task: "t", Active: "w"}, Placement{Task: "u", Active: "w", Standbys: []string{"w"}}), badWorkers},
		{"missing generation", assignHeader(0, 1)[:3], "bad varint"},
		{"missing set count", assignHeader(0, 1), "bad varint"},
		{"missing removed", uv(assignHeader(0, 1), 0), "bad varint"},
		{"set count past end", uv(assignHeader(0, 1), 6, 0, 0, 0, 0, 0), "count out of range"},
		{"set count 2^40", uv(assignHeader(0, 1), 1<<40, 0), "count out of range"},
		{"set count max", uv(assignHeader(0, 1), math.MaxUint64, 0), "count out of range"},
		{"standbys count past end", placement(uv(nil, 3, 0, 0)), "count out of range"},
		{"standbys count 2^40", placement(uv(nil, 1<<40, 0, 0)), "count out of range"},
		{"warmups count past end", placement(uv(nil, 0, 2, 0)), "count out of range"},
		{"warmups count max", placement(uv(nil, 0, math.MaxUint64, 0)), "count out of range"},
		{"removed count past end", uv(assignHeader(0, 1), 0, 3, 0, 0), "count out of range"},
		{"removed count 2^24", uv(assignHeader(0, 1), 0, 1<<24), "count out of range"},
		{"removed count 2^62", uv(assignHeader(0, 1), 0, 1<<62), "count out of range"},
		{"too many standbys", placement(emptyStrings(maxCopies+1), uv(nil, 0, 0)), "too many elements"},
		{"too many warmups", placement(uv(nil, 0), emptyStrings(maxCopies+1), uv(nil, 0)), "too many elements"},
		{"task id too long", uv(appendString(uv(assignHeader(0, 1), 1), long), 0, 0, 0, 0), "string length out of range"},
		{"active too long", uv(appendString(appendString(uv(assignHeader(0, 1), 1), "t"), long), 0, 0, 0), "string length out of range"},
		{"standby too long", placement(appendString(uv(nil, 1), long), uv(nil, 0, 0)), "string length out of range"},
		{"warmup too long", placement(uv(nil, 0), appendString(uv(nil, 1), long), uv(nil, 0)), "string length out of range"},
		{"removed too long", appendString(uv(assignHeader(0, 1), 0, 1), long), "string length out of range"},
		{"active not UTF-8", uv(appendString(appendString(uv(assignHeader(0, 1), 1), "t"), "w\xff"), 0, 0, 0), "not UTF-8"},
		{"removed not UTF-8", appendString(uv(assignHeader(0, 1), 0, 1), "\xfe"), "not UTF-8"},
		{"trailing byte", append(bytes.Clone(valid), 0), "trailing bytes"},
		{"trailing bytes", append(bytes.Clone(valid), "xyz"...), "trailing bytes"},
		{"truncated", valid[:len(valid)-1], ""},
		{"submit over 64KiB", oversizedSubmit, fmt.Sprintf("limit %d", maxCmdBytes)},
		{"unknown type over 64KiB", oversizedUnknown, fmt.Sprintf("limit %d", maxCmdBytes)},
		{"assignment over 16MiB", assignOfSize(t, maxAssignCmdBytes+1), fmt.Sprintf("limit %d", maxAssignCmdBytes)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Command
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("DecodeCommand panicked: %v", r)
					}
				}()
				c, err = DecodeCommand(tc.b)
			}()
			if err == nil {
				t.Fatalf("DecodeCommand(% x) = %+v, want error", tc.b[:min(len(tc.b), 64)], c)
			}
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not wrap ErrBadCommand", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not mention %q", err, tc.msg)
			}
			if !reflect.DeepEqual(c, Command{}) {
				t.Fatalf("failed decode returned fields: %+v", c)
			}
		})
	}
}

// TestDecodeAssignmentLimits: the largest valid values decode.
func TestDecodeAssignmentLimits(t *testing.T) {
	for _, size := range []int{maxCmdBytes + 1, 1 << 20, maxAssignCmdBytes} {
		b := assignOfSize(t, size)
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("assignment of %d bytes: %v", size, err)
		}
		if c.Type != CmdSetAssignment || len(c.Assign.Removed) == 0 || !bytes.Equal(c.Encode(), b) {
			t.Fatalf("assignment of %d bytes decoded to %d removed ids", size, len(c.Assign.Removed))
		}
	}
	// Exactly maxCopies standbys and warm-ups of maximal, distinct ids.
	long, long2 := strings.Repeat("x", maxIDLen), strings.Repeat("y", maxIDLen)
	c := assignCmd(math.MaxUint64-1, []Placement{{Task: long, Active: long, Standbys: longIDs("s", maxCopies), Warmups: longIDs("u", maxCopies)}}, long2)
	got, err := DecodeCommand(c.Encode())
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("maximal placement: %v", err)
	}
	// And a non-assignment entry of exactly maxCmdBytes is refused for its
	// content, not its size.
	b := make([]byte, maxCmdBytes)
	b[0], b[1] = commandVersion, byte(CmdNoop)
	if _, err := DecodeCommand(b); err == nil || strings.Contains(err.Error(), "limit") {
		t.Fatalf("noop of %d bytes: %v", maxCmdBytes, err)
	}
}

// allocated returns the bytes allocated while running fn.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeAssignmentHugeCountsDoNotAllocate: a count larger than the bytes
// left is refused before it sizes an allocation, and a count within them
// allocates in proportion to the entry.
func TestDecodeAssignmentHugeCountsDoNotAllocate(t *testing.T) {
	placement := func(tail ...uint64) []byte {
		return uv(appendString(appendString(uv(assignHeader(0, 1), 1), "t"), "w"), tail...)
	}
	for _, b := range [][]byte{
		uv(assignHeader(0, 1), 1<<40, 0),
		uv(assignHeader(0, 1), 1<<62),
		uv(assignHeader(0, 1), 0, 1<<24),
		uv(assignHeader(0, 1), 0, 1<<40),
		placement(1<<24, 0, 0),
		placement(0, 1<<30, 0),
	} {
		n := allocated(func() {
			for range 10 {
				if _, err := DecodeCommand(b); err == nil {
					t.Fatalf("% x decoded", b)
				}
			}
		})
		if n > 1<<20 {
			t.Fatalf("decoding % x ten times allocated %d bytes", b, n)
		}
	}
	// A count that fits the entry but whose elements are garbage (or run
	// out after some decoded ones): a list grows with the elements actually
	// decoded, not with its count, so the allocation does not grow with the
	// entry (a 16 MiB entry could otherwise claim 2^24 removed ids).
	garbage := func(b []byte, size int) []byte { return append(b, bytes.Repeat([]byte{0xff}, size)...) }
	const decoded = 1 << 12 // empty ids: one byte each
	for _, tc := range []struct {
		name  string
		b     []byte
		limit uint64
	}{
		{"removed 2^16", garbage(uv(assignHeader(0, 1), 0, 1<<16), 1<<16), 64 << 10},
		{"removed 2^20", garbage(uv(assignHeader(0, 1), 0, 1<<20), 1<<20), 64 << 10},
		{"removed 16MiB", garbage(uv(assignHeader(0, 1), 0, maxAssignCmdBytes-16), maxAssignCmdBytes-16), 64 << 10},
		{"standbys", garbage(placement(maxCopies), maxCopies+2), 64 << 10},
		{"warmups", garbage(placement(0, maxCopies), maxCopies+1), 64 << 10},
		{"set", garbage(uv(assignHeader(0, 1), 1<<20), 1<<20), 64 << 10},
		{"removed, some decoded", garbage(append(uv(assignHeader(0, 1), 0, 1<<20), make([]byte, decoded)...), 1<<20-decoded), 64<<10 + 128*decoded},
	} {
		if len(tc.b) > maxAssignCmdBytes {
			t.Fatalf("%s: %d bytes is over the limit", tc.name, len(tc.b))
		}
		n := allocated(func() {
			if _, err := DecodeCommand(tc.b); err == nil || strings.Contains(err.Error(), "out of range") {
				t.Fatalf("%s: decoded, or refused for its count: %v", tc.name, err)
			}
		})
		if n > tc.limit {
			t.Fatalf("%s: decoding %d bytes allocated %d bytes (limit %d)", tc.name, len(tc.b), n, tc.limit)
		}
	}
}

// ---- Apply ----

func TestAssignmentApply(t *testing.T) {
	f := NewFSM("cl")
	if gen, m := f.Assignment(); gen != 0 || len(m) != 0 {
		t.Fatalf("new FSM: assignment %d %+v", gen, m)
	}
	if gen, _ := f.AssignmentGeneration(); gen != 0 {
		t.Fatalf("new FSM: generation %d", gen)
	}
	var events []Event
	for i, id := range []string{"a", "b", "c"} {
		idx := uint64(i + 1)
		r := applyTerm(t, f, idx, 1, submitCmd("k", id, id))
		events = append(events, Event{Index: idx, Term: 1, Kind: EventTaskSubmitted, TaskID: id, Task: r.Task})
	}
	ver := f.TaskVersion()
	dedup := f.DedupLen()

	// Generation 0 -> 1: a and b are placed, ghost (no such task) skipped,
	// removals of tasks without a placement skipped.
	pa := Placement{Task: "a", Active: "w1", Standbys: []string{"w2"}, Warmups: []string{"w3"}}
	pb := Placement{Task: "b", Warmups: []string{"w4"}}
	r := applyTerm(t, f, 4, 2, assignCmd(0, []Placement{pa, pb, {Task: "ghost", Active: "w1"}}, "c", "ghost2"))
	if r != (Result{Index: 4}) {
		t.Fatalf("first delta: %+v", r)
	}
	events = append(events, Event{Index: 4, Term: 2, Kind: EventAssignment, Key: "cl", Generation: 1, Placements: []Placement{pa, pb}})
	want := assignState{Gen: 1, Placements: map[string]Placement{"a": epoched(pa, 1), "b": pb}}
	if got := assignOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("after first delta:\n got %+v\nwant %+v", got, want)
	}
	wantTasks := []Task{assignedTask("a", 1), unplacedTask("b", 2), pendingTask("c", 3)}
	if got := stateOf(t, f).Tasks; !reflect.DeepEqual(got, wantTasks) {
		t.Fatalf("tasks after first delta:\n got %+v\nwant %+v", got, wantTasks)
	}
	if tk, _ := f.Task("a"); tk != assignedTask("a", 1) {
		t.Fatalf("Task(a) = %+v", tk)
	}
	checkOutbox(t, f, 0, events)
	if f.TaskVersion() != ver || f.DedupLen() != dedup || f.DedupHits() != 0 {
		t.Fatalf("an assignment changed the task set version (%d -> %d) or the dedup table (%d -> %d, %d hits)",
			ver, f.TaskVersion(), dedup, f.DedupLen(), f.DedupHits())
	}
	fullStateOf(t, f)

	// Stale, future and malformed deltas change nothing but the applied
	// index.
	before := fullStateOf(t, f)
	for i, c := range []Command{
		assignCmd(0, []Placement{{Task: "c", Active: "w9"}}, "a"),
		assignCmd(2, []Placement{{Task: "c", Active: "w9"}}, "a"),
		assignCmd(1<<40, nil, "a", "b"),
	} {
		idx := uint64(5 + i)
		r := applyTerm(t, f, idx, 2, c)
		if r.Index != idx || r.Code != CodeConflict || !strings.Contains(r.Err, fmt.Sprint("generation ", c.Assign.Base)) || r.Task != (Task{}) {
			t.Fatalf("delta from generation %d: %+v", c.Assign.Base, r)
		}
		before.State.Applied = idx
		if after := fullStateOf(t, f); !reflect.DeepEqual(before, after) {
			t.Fatalf("conflicting delta changed state:\n%+v\n%+v", before, after)
		}
	}
	bad := assignCmd(1, []Placement{{Task: "c", Active: "w9"}})
	bad.Assign.Generation = 3
	if r := applyTerm(t, f, 8, 2, bad); r.Code != CodeInvalid || r.Index != 8 {
		t.Fatalf("delta 1 -> 3: %+v", r)
	}
	before.State.Applied = 8
	if after := fullStateOf(t, f); !reflect.DeepEqual(before, after) {
		t.Fatalf("malformed delta changed state:\n%+v\n%+v", before, after)
	}

	// Generation 1 -> 2: c placed, a's placement replaced, b removed.
	pc := Placement{Task: "c", Active: "w2"}
	pa2 := Placement{Task: "a", Active: "w5", Standbys: []string{"w1"}}
	if r := applyTerm(t, f, 9, 3, assignCmd(1, []Placement{pc, pa2}, "b")); r != (Result{Index: 9}) {
		t.Fatalf("second delta: %+v", r)
	}
	events = append(events, Event{Index: 9, Term: 3, Kind: EventAssignment, Key: "cl", Generation: 2, Placements: []Placement{pc, pa2}, Removed: []string{"b"}})
	want = assignState{Gen: 2, Placements: map[string]Placement{"a": epoched(pa2, 2), "c": epoched(pc, 1)}}
	if got := assignOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("after second delta:\n got %+v\nwant %+v", got, want)
	}
	wantTasks = []Task{assignedTask("a", 1), pendingTask("b", 2), assignedTask("c", 3)}
	if got := stateOf(t, f).Tasks; !reflect.DeepEqual(got, wantTasks) {
		t.Fatalf("tasks after second delta:\n got %+v\nwant %+v", got, wantTasks)
	}
	checkOutbox(t, f, 0, events)

	// Deleting a placed task drops its placement (the generation stays).
	if r := applyTerm(t, f, 10, 3, deleteCmd("k", "da", "a")); r != (Result{Index: 10, Task: assignedTask("a", 1)}) {
		t.Fatalf("delete a: %+v", r)
	}
	events = append(events, Event{Index: 10, Term: 3, Kind: EventTaskDeleted, TaskID: "a", Task: assignedTask("a", 1)})
	if e := f.TaskEpoch("a"); e != 0 {
		t.Fatalf("deleted task a has epoch %d", e)
	}
	want = assignState{Gen: 2, Placements: map[string]Placement{"c": epoched(pc, 1)}}
	if got := assignOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("after delete:\n got %+v\nwant %+v", got, want)
	}
	// A re-created task has no placement.
	if r := applyTerm(t, f, 11, 3, submitCmd("k", "a2", "a")); r.Task != pendingTask("a", 11) {
		t.Fatalf("re-create a: %+v", r)
	}
	events = append(events, Event{Index: 11, Term: 3, Kind: EventTaskSubmitted, TaskID: "a", Task: pendingTask("a", 11)})
	if got := assignOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("after re-create:\n got %+v\nwant %+v", got, want)
	}

	// Generation 2 -> 3 that changes nothing (a and b have no placement;
	// d does not exist) still makes a generation and an event.
	if r := applyTerm(t, f, 12, 3, assignCmd(2, []Placement{{Task: "d", Active: "w1"}}, "a", "b")); r != (Result{Index: 12}) {
		t.Fatalf("empty delta: %+v", r)
	}
	events = append(events, Event{Index: 12, Term: 3, Kind: EventAssignment, Key: "cl", Generation: 3})
	want.Gen = 3
	if got := assignOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("after empty delta:\n got %+v\nwant %+v", got, want)
	}
	checkOutbox(t, f, 0, events)

	// Assignment() is a copy.
	gen, m := f.Assignment()
	delete(m, "c")
	m["a"] = Placement{Task: "a", Active: "evil"}
	m["zz"] = Placement{Task: "zz"}
	if gen2, m2 := f.Assignment(); gen2 != gen || !reflect.DeepEqual(m2, map[string]Placement{"c": epoched(pc, 1)}) {
		t.Fatalf("changing Assignment()'s map changed the FSM: %d %+v", gen2, m2)
	}
	gen, m = f.Assignment()
	m["c"] = Placement{Task: "c", Active: "evil"}
	if _, m2 := f.Assignment(); !reflect.DeepEqual(m2["c"], epoched(pc, 1)) {
		t.Fatalf("replacing a placement in Assignment()'s map changed the FSM: %+v", m2["c"])
	}
	if got := assignOf(t, f); !reflect.DeepEqual(got, want) || gen != 3 {
		t.Fatalf("after changing copies: %+v", got)
	}
	fullStateOf(t, f)
}

// TestAssignmentVersion: the version AssignmentGeneration reports changes
// whenever the assignment map does (a new generation, a deleted task losing
// its placement, a restore), even when the generation does not, and never
// takes a value it had before; a refused delta leaves it alone.
func TestAssignmentVersion(t *testing.T) {
	f := NewFSM("c")
	seen := map[uint64]bool{}
	_, last := f.AssignmentGeneration()
	seen[last] = true
	changed := func(what string) {
		t.Helper()
		_, v := f.AssignmentGeneration()
		if v == last || seen[v] {
			t.Fatalf("%s: version %d (was %d, seen %v)", what, v, last, seen)
		}
		seen[v] = true
		last = v
	}
	same := func(what string) {
		t.Helper()
		if _, v := f.AssignmentGeneration(); v != last {
			t.Fatalf("%s: version %d, was %d", what, v, last)
		}
	}
	for i, id := range []string{"a", "b", "c"} {
		applyTerm(t, f, uint64(i+1), 1, submitCmd("", "", id))
	}
	applyTerm(t, f, 4, 1, assignCmd(0, []Placement{{Task: "a", Active: "w1"}, {Task: "b", Active: "w2"}}))
	changed("first delta")
	applyTerm(t, f, 5, 1, assignCmd(0, []Placement{{Task: "c", Active: "w1"}}))
	same("stale delta")
	applyTerm(t, f, 6, 1, assignCmd(1, []Placement{{Task: "c", Active: "w1"}}, "a"))
	changed("second delta")
	snap := persistSnapshot(t, f) // generation 2: b, c

	applyTerm(t, f, 7, 1, deleteCmd("", "", "b"))
	if gen, _ := f.AssignmentGeneration(); gen != 2 {
		t.Fatalf("delete changed the generation to %d", gen)
	}
	changed("delete of a placed task")

	// The snapshot has the same generation and another map.
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	if gen, m := f.Assignment(); gen != 2 || len(m) != 2 {
		t.Fatalf("after restore: %d %+v", gen, m)
	}
	changed("restore")
	applyTerm(t, f, 7, 1, assignCmd(2, nil))
	changed("delta that places nothing")
}

// TestAssignmentEventKeyIsClusterID: the assignment event is keyed by the
// FSM's cluster id, whatever it is.
func TestAssignmentEventKeyIsClusterID(t *testing.T) {
	for _, cluster := range []string{"c", "another-cluster"} {
		f := NewFSM(cluster)
		applyTerm(t, f, 1, 1, submitCmd("", "", "t"))
		applyTerm(t, f, 2, 7, assignCmd(0, []Placement{{Task: "t", Active: "w"}}))
		evs := f.EventsAfter(1, 10)
		want := []Event{{Index: 2, Term: 7, Kind: EventAssignment, Key: cluster, Generation: 1, Placements: []Placement{{Task: "t", Active: "w"}}}}
		if !reflect.DeepEqual(evs, want) {
			t.Fatalf("cluster %q: events %+v, want %+v", cluster, evs, want)
		}
		// Trims drop assignment events like any other.
		applyTerm(t, f, 3, 7, trimCmd(2))
		checkOutbox(t, f, 2, nil)
	}
}

// ---- Snapshots ----

// buildAssignFSM is buildOutboxFSM with assignments, a conflict, a delete of
// a placed task, a trim and a re-created task.
func buildAssignFSM(t testing.TB, cluster string) *FSM {
	t.Helper()
	f := buildOutboxFSM(t, cluster) // tasks alpha, delta, epsilon; applied 14
	mustCode := func(r Result, code Code) {
		t.Helper()
		if r.Code != code {
			t.Fatalf("result %+v, want code %d", r, code)
		}
	}
	mustCode(applyTerm(t, f, 15, 3, submitCmd("cD", "r1", "zeta")), CodeOK)
	mustCode(applyTerm(t, f, 16, 4, assignCmd(0, []Placement{
		{Task: "alpha", Active: "w1", Standbys: []string{"w2", "w3"}, Warmups: []string{"w4"}},
		{Task: "delta", Active: "w2"},
		{Task: "ghost", Active: "w1"}, // no such task
		{Task: "epsilon", Warmups: []string{"w5"}},
	}, "zeta", "nope")), CodeOK) // no placements to remove
	mustCode(applyTerm(t, f, 17, 4, assignCmd(0, []Placement{{Task: "zeta", Active: "w9"}}, "alpha")), CodeConflict)
	mustCode(applyTerm(t, f, 18, 4, assignCmd(1, []Placement{
		{Task: "zeta", Active: "w3", Standbys: []string{"w1"}},
		{Task: "epsilon", Active: "w4", Standbys: []string{"w5", "w6"}, Warmups: []string{"w7"}},
	}, "delta")), CodeOK)
	mustCode(applyTerm(t, f, 19, 5, deleteCmd("cE", "r1", "alpha")), CodeOK)
	mustCode(applyTerm(t, f, 20, 5, trimCmd(9)), CodeOK)
	mustCode(applyTerm(t, f, 21, 5, submitCmd("", "", "eta")), CodeOK)
	mustCode(applyTerm(t, f, 22, 5, assignCmd(2, []Placement{{Task: "eta", Warmups: []string{"w8"}}}, "alpha")), CodeOK)
	return f
}

// checkAssignBuiltState checks buildAssignFSM's state, spelled out.
func checkAssignBuiltState(t *testing.T, f *FSM) {
	t.Helper()
	cluster := f.clusterID
	alpha := pendingTask("alpha", 1)
	alpha.Stateful, alpha.StandbyReplicas = true, 2
	alphaAssigned := alpha
	alphaAssigned.State, alphaAssigned.PendingReason = TaskStateAssigned, ""
	beta := pendingTask("beta", 2)
	gamma := pendingTask("gamma", 3)
	gamma.StandbyReplicas = 1
	delta := pendingTask("delta", 9)
	epsilon := pendingTask("epsilon", 12)
	epsilon.Stateful, epsilon.StandbyReplicas = true, 3
	epsilonAssigned := epsilon
	epsilonAssigned.State, epsilonAssigned.PendingReason = TaskStateAssigned, ""
	zeta := pendingTask("zeta", 15)

	pAlpha := Placement{Task: "alpha", Active: "w1", Standbys: []string{"w2", "w3"}, Warmups: []string{"w4"}}
	pDelta := Placement{Task: "delta", Active: "w2"}
	pEpsilon1 := Placement{Task: "epsilon", Warmups: []string{"w5"}}
	pZeta := Placement{Task: "zeta", Active: "w3", Standbys: []string{"w1"}}
	pEpsilon2 := Placement{Task: "epsilon", Active: "w4", Standbys: []string{"w5", "w6"}, Warmups: []string{"w7"}}
	pEta := Placement{Task: "eta", Warmups: []string{"w8"}}

	want := fsmState{
		Tasks: []Task{delta, epsilonAssigned, unplacedTask("eta", 21), assignedTask("zeta", 15)},
		Dedup: []dedupRecord{
			{"cA", "r1", Result{Index: 1, Task: alpha}},
			{"cA", "r2", Result{Index: 2, Task: beta}},
			{"cB", "r1", Result{Index: 3, Task: gamma}},
			{"cB", "r2", Result{Index: 4, Code: CodeAlreadyExists, Task: alpha}},
			{"cA", "r3", Result{Index: 5, Task: beta}},
			{"cA", "r4", Result{Index: 6, Code: CodeNotFound, Task: Task{ID: "nope"}}},
			{"cC", "r1", Result{Index: 12, Task: epsilon}},
			{"cC", "r2", Result{Index: 14, Task: gamma}},
			{"cD", "r1", Result{Index: 15, Task: zeta}},
			{"cE", "r1", Result{Index: 19, Task: alphaAssigned}},
		},
		Applied: 22,
		Window:  1000,
		Max:     50,
	}
	if got := stateOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("state:\n got %+v\nwant %+v", got, want)
	}
	checkOutbox(t, f, 9, []Event{
		{Index: 12, Term: 2, Kind: EventTaskSubmitted, TaskID: "epsilon", Task: epsilon},
		{Index: 14, Term: 3, Kind: EventTaskDeleted, TaskID: "gamma", Task: gamma},
		{Index: 15, Term: 3, Kind: EventTaskSubmitted, TaskID: "zeta", Task: zeta},
		{Index: 16, Term: 4, Kind: EventAssignment, Key: cluster, Generation: 1, Placements: []Placement{pAlpha, pDelta, pEpsilon1}},
		{Index: 18, Term: 4, Kind: EventAssignment, Key: cluster, Generation: 2, Placements: []Placement{pZeta, pEpsilon2}, Removed: []string{"delta"}},
		{Index: 19, Term: 5, Kind: EventTaskDeleted, TaskID: "alpha", Task: alphaAssigned},
		{Index: 21, Term: 5, Kind: EventTaskSubmitted, TaskID: "eta", Task: pendingTask("eta", 21)},
		{Index: 22, Term: 5, Kind: EventAssignment, Key: cluster, Generation: 3, Placements: []Placement{pEta}},
	})
	wantAssign := assignState{Gen: 3, Placements: map[string]Placement{"epsilon": epoched(pEpsilon2, 1), "eta": pEta, "zeta": epoched(pZeta, 1)}}
	if got := assignOf(t, f); !reflect.DeepEqual(got, wantAssign) {
		t.Fatalf("assignment:\n got %+v\nwant %+v", got, wantAssign)
	}
	fullStateOf(t, f)
}

// checkAssignBuiltBehaviour: after buildAssignFSM's state, a delta from the
// old generation conflicts, one from the current generation applies, and
// dedup still answers retries.
func checkAssignBuiltBehaviour(t *testing.T, f *FSM) {
	t.Helper()
	cluster := f.clusterID
	before := fullStateOf(t, f)
	if r := applyTerm(t, f, 23, 6, assignCmd(2, []Placement{{Task: "delta", Active: "w1"}}, "zeta")); r.Code != CodeConflict || r.Index != 23 {
		t.Fatalf("delta from the previous generation: %+v", r)
	}
	before.State.Applied = 23
	if after := fullStateOf(t, f); !reflect.DeepEqual(before, after) {
		t.Fatalf("conflicting delta changed state:\n%+v\n%+v", before, after)
	}

	// delta's epoch is 1 if the FSM applied its first placement, 0 if it
	// restored a snapshot older than epochs (delta had no placement then).
	pDelta := Placement{Task: "delta", Active: "w9", Standbys: []string{"w1"}}
	deltaEpoch := f.TaskEpoch("delta")
	if r := applyTerm(t, f, 24, 6, assignCmd(3, []Placement{pDelta}, "eta")); r != (Result{Index: 24}) {
		t.Fatalf("delta from the current generation: %+v", r)
	}
	got := assignOf(t, f)
	if got.Gen != 4 || len(got.Placements) != 3 || !reflect.DeepEqual(got.Placements["delta"], epoched(pDelta, deltaEpoch+1)) || got.Placements["eta"].Task != "" {
		t.Fatalf("assignment after delta 3 -> 4 (delta's epoch was %d): %+v", deltaEpoch, got)
	}
	if tk, _ := f.Task("delta"); tk != assignedTask("delta", 9) {
		t.Fatalf("delta after delta 3 -> 4: %+v", tk)
	}
	if tk, _ := f.Task("eta"); tk != pendingTask("eta", 21) {
		t.Fatalf("eta after delta 3 -> 4: %+v", tk)
	}
	evs := f.EventsAfter(23, 10)
	if want := []Event{{Index: 24, Term: 6, Kind: EventAssignment, Key: cluster, Generation: 4, Placements: []Placement{pDelta}, Removed: []string{"eta"}}}; !reflect.DeepEqual(evs, want) {
		t.Fatalf("events after delta 3 -> 4: %+v", evs)
	}

	alpha := assignedTask("alpha", 1)
	alpha.Stateful, alpha.StandbyReplicas = true, 2
	if r := applyTerm(t, f, 25, 6, deleteCmd("cE", "r1", "alpha")); r != (Result{Index: 19, Task: alpha}) {
		t.Fatalf("retried delete: %+v", r)
	}
	applyTerm(t, f, 26, 6, submitCmd("cF", "r1", "alpha"))
	if _, m := f.Assignment(); m["alpha"].Task != "" {
		t.Fatalf("re-created alpha has a placement: %+v", m["alpha"])
	}
	fullStateOf(t, f)
}

func TestAssignmentSnapshotRoundTrip(t *testing.T) {
	src := buildAssignFSM(t, "c1")
	checkAssignBuiltState(t, src)
	b := persistSnapshot(t, src)
	if v := binary.BigEndian.Uint32(b[len(snapshotMagic):]); v != snapshotVersion {
		t.Fatalf("snapshot version %d, want %d", v, snapshotVersion)
	}
	dst := NewFSM("c1")
	if err := restoreBytes(dst, b); err != nil {
		t.Fatal(err)
	}
	checkAssignBuiltState(t, dst)
	if a, b := fullStateOf(t, src), fullStateOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored FSM differs:\n%+v\n%+v", a, b)
	}

	// Restoring replaces an assignment the FSM had.
	other := NewFSM("c1")
	for i := range 5 {
		id := fmt.Sprint("o", i)
		applyTerm(t, other, uint64(2*i+1), 1, submitCmd("", "", id))
		applyTerm(t, other, uint64(2*i+2), 1, assignCmd(uint64(i), []Placement{{Task: id, Active: "w"}, {Task: "zeta", Active: "w0"}}))
	}
	if err := restoreBytes(other, b); err != nil {
		t.Fatal(err)
	}
	checkAssignBuiltState(t, other)

	for _, f := range []*FSM{src, dst, other} {
		checkAssignBuiltBehaviour(t, f)
	}
	if a, b := fullStateOf(t, src), fullStateOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("source and restored FSM diverged:\n%+v\n%+v", a, b)
	}
	if a, b := persistSnapshot(t, src), persistSnapshot(t, other); !bytes.Equal(a, b) {
		t.Fatal("snapshots of the source and the restored FSM differ")
	}

	// An empty snapshot empties the assignment.
	if err := restoreBytes(other, persistSnapshot(t, NewFSM("c1"))); err != nil {
		t.Fatal(err)
	}
	if got := assignOf(t, other); got.Gen != 0 || got.Placements != nil {
		t.Fatalf("after restoring an empty snapshot: %+v", got)
	}
}

// TestAssignmentSnapshotIsDeterministic: equal states persist to equal
// bytes, with tasks and placements sorted by task id.
func TestAssignmentSnapshotIsDeterministic(t *testing.T) {
	build := func() *FSM {
		f := NewFSM("c")
		var set []Placement
		for i := range 64 {
			id := fmt.Sprintf("t%02d", i)
			applyTerm(t, f, uint64(i+1), 1, submitCmd("c", id, id))
			set = append(set, Placement{Task: id, Active: fmt.Sprint("w", i%5), Standbys: []string{fmt.Sprint("w", (i+1)%5)}})
		}
		slices.Reverse(set)
		applyTerm(t, f, 65, 1, assignCmd(0, set))
		applyTerm(t, f, 66, 2, assignCmd(1, set[10:20], "t00", "t63", "t31"))
		return f
	}
	a, b := build(), build()
	pa := persistSnapshot(t, a)
	for i, other := range [][]byte{persistSnapshot(t, a), persistSnapshot(t, b), persistSnapshot(t, b)} {
		if !bytes.Equal(pa, other) {
			t.Fatalf("snapshot %d of an equal state differs", i)
		}
	}
	s, tasks, _, _, err := readSnapshot(bytes.NewReader(pa))
	if err != nil {
		t.Fatal(err)
	}
	if s.AssignmentGeneration != 2 || len(s.Assignment) != 61 || tasks.len() != 64 {
		t.Fatalf("snapshot holds generation %d, %d placements, %d tasks", s.AssignmentGeneration, len(s.Assignment), tasks.len())
	}
	if !slices.IsSortedFunc(s.Assignment, func(a, b Placement) int { return strings.Compare(a.Task, b.Task) }) {
		t.Fatal("placements in the snapshot are not sorted by task")
	}
	if !slices.IsSortedFunc(s.Tasks, func(a, b Task) int { return strings.Compare(a.ID, b.ID) }) {
		t.Fatal("tasks in the snapshot are not sorted")
	}
}

const goldenV3 = "testdata/snapshot-v3.bin"

// TestSnapshotGoldenV3 restores a snapshot written by the release that
// introduced format version 3 (the assignment). Never regenerate it to make
// this test pass. `go test -run 'GoldenV3$' -update` rewrites it (only when
// the file must be recreated; do not let -update reach the V1 or V2 tests).
func TestSnapshotGoldenV3(t *testing.T) {
	f := goldenSnapshot(t, goldenV3, 3, buildAssignFSM)
	checkAssignBuiltState(t, f)
	checkAssignBuiltBehaviour(t, f)
}

// TestOldSnapshotsHaveNoAssignment: version 1 and 2 snapshots restore with
// generation 0 and no placements (replacing what the FSM had), and the
// first delta from generation 0 applies after them.
func TestOldSnapshotsHaveNoAssignment(t *testing.T) {
	for _, tc := range []struct {
		file    string
		version byte
		applied uint64
	}{{goldenV1, 1, 10}, {goldenV2, 2, 14}} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(snapshotMagic+"\x00\x00\x00"+string([]byte{tc.version}))) {
			t.Fatalf("%s is not a version %d snapshot", tc.file, tc.version)
		}
		f := NewFSM("golden-cluster")
		applyTerm(t, f, 1, 1, submitCmd("", "", "alpha"))
		applyTerm(t, f, 2, 1, assignCmd(0, []Placement{{Task: "alpha", Active: "w"}}))
		if err := restoreBytes(f, b); err != nil {
			t.Fatal(err)
		}
		if got := assignOf(t, f); got.Gen != 0 || got.Placements != nil {
			t.Fatalf("%s: assignment after restore %+v", tc.file, got)
		}
		if tk, _ := f.Task("alpha"); tk.State != TaskStatePending || f.TaskEpoch("alpha") != 0 {
			t.Fatalf("%s: alpha after restore %+v, epoch %d", tc.file, tk, f.TaskEpoch("alpha"))
		}
		if r := applyTerm(t, f, tc.applied+1, 9, assignCmd(1, nil)); r.Code != CodeConflict {
			t.Fatalf("%s: delta from generation 1 after restore: %+v", tc.file, r)
		}
		p := Placement{Task: "alpha", Active: "w1", Standbys: []string{"w2"}}
		if r := applyTerm(t, f, tc.applied+2, 9, assignCmd(0, []Placement{p})); r != (Result{Index: tc.applied + 2}) {
			t.Fatalf("%s: delta from generation 0 after restore: %+v", tc.file, r)
		}
		if got := assignOf(t, f); got.Gen != 1 || !reflect.DeepEqual(got.Placements, map[string]Placement{"alpha": epoched(p, 1)}) {
			t.Fatalf("%s: assignment after the first delta %+v", tc.file, got)
		}
		fullStateOf(t, f)
	}
}

// ---- Replicas ----

// randomAssignLog is randomOutboxLog with assignment deltas, most from the
// generation they will apply at, some stale or from the future, placing
// existing and unknown tasks and removing some. Each task appears once in a
// delta and each worker once in a placement, as DecodeCommand requires; a
// few deltas from the current generation break one of those rules (or have
// no generation after their base) and must be refused as invalid.
func randomAssignLog(seed uint64, n int) []Entry {
	r := rand.New(rand.NewPCG(seed, 5))
	logs := randomOutboxLog(seed, n)
	const tasks, workers = 17, 6
	var gen uint64
	for i, l := range logs {
		if r.IntN(4) != 0 {
			continue
		}
		base := gen
		invalid := r.IntN(8) == 0
		switch {
		case invalid:
		case r.IntN(5) == 0:
			base = gen + 1 + uint64(r.IntN(2)) // from the future
			if gen > 0 && r.IntN(2) == 0 {
				base = gen - 1 // stale
			}
		default:
			gen++
		}
		// Distinct tasks: the first of a permutation placed, the next removed.
		ts := r.Perm(tasks)
		nSet, nRemoved := r.IntN(5), r.IntN(3)
		var set []Placement
		for _, k := range ts[:nSet] {
			ws := r.Perm(workers)
			p := Placement{Task: fmt.Sprint("t", k)}
			if r.IntN(4) != 0 {
				p.Active, ws = fmt.Sprint("w", ws[0]), ws[1:]
			}
			nStandbys, nWarmups := r.IntN(3), r.IntN(2)
			for _, w := range ws[:nStandbys] {
				p.Standbys = append(p.Standbys, fmt.Sprint("w", w))
			}
			for _, w := range ws[nStandbys : nStandbys+nWarmups] {
				p.Warmups = append(p.Warmups, fmt.Sprint("w", w))
			}
			set = append(set, p)
		}
		var removed []string
		for _, k := range ts[nSet : nSet+nRemoved] {
			removed = append(removed, fmt.Sprint("t", k))
		}
		c := assignCmd(base, set, removed...)
		if invalid {
			breakDelta(r, &c.Assign)
		}
		logs[i] = Entry{Index: l.Index, Term: l.Term, Data: enc(c)}
	}
	return logs
}

// breakDelta makes a valid delta one that DecodeCommand refuses, breaking
// one of its rules (each as often).
func breakDelta(r *rand.Rand, d *AssignmentDelta) {
	// A placement to break, added if the delta has none.
	placement := func() *Placement {
		if len(d.Set) == 0 {
			d.Set = append(d.Set, Placement{Task: "t-broken", Active: "w0", Standbys: []string{"w1"}, Warmups: []string{"w2"}})
		}
		return &d.Set[r.IntN(len(d.Set))]
	}
	switch r.IntN(4) {
	case 0: // no generation follows the last
		d.Base, d.Generation = math.MaxUint64, 0
	case 1: // an empty task id
		if r.IntN(2) == 0 {
			d.Set = append(d.Set, Placement{Active: "w0"})
		} else {
			d.Removed = append(d.Removed, "")
		}
	case 2: // a task twice
		switch {
		case len(d.Removed) > 0 && r.IntN(3) == 0: // removed twice
			d.Removed = append(d.Removed, d.Removed[r.IntN(len(d.Removed))])
		case r.IntN(2) == 0: // placed and removed
			d.Removed = append(d.Removed, placement().Task)
		default: // placed twice
			p := *placement()
			p.Active = "w5"
			d.Set = append(d.Set, p)
		}
	case 3: // a worker twice in a placement, or an empty copy
		p := placement()
		switch r.IntN(4) {
		case 0: // active and a copy
			if p.Active == "" {
				p.Active = "w9"
			}
			if r.IntN(2) == 0 {
				p.Standbys = append(p.Standbys, p.Active)
			} else {
				p.Warmups = append(p.Warmups, p.Active)
			}
		case 1: // standby and warm-up
			p.Standbys = append(p.Standbys, "w8")
			p.Warmups = append(p.Warmups, "w8")
		case 2: // a copy twice
			if len(p.Standbys) > 0 && r.IntN(2) == 0 {
				p.Standbys = append(p.Standbys, p.Standbys[r.IntN(len(p.Standbys))])
			} else {
				p.Warmups = append(p.Warmups, "w7", "w7")
			}
		case 3: // an empty copy
			if r.IntN(2) == 0 {
				p.Standbys = append(p.Standbys, "")
			} else {
				p.Warmups = append(p.Warmups, "")
			}
		}
	}
}

// TestAssignmentDeterministic: replicas fed the same log with assignments
// hold the same state, whether they applied every entry one by one, in
// batches, or restored a snapshot midway and applied the rest; and the
// assignment is what a model of it says.
func TestAssignmentDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			logs := randomAssignLog(seed, 800)
			newFSM := func() *FSM {
				f := NewFSM("c")
				f.SetDedupLimits(40, 12)
				return f
			}
			one := newFSM()

			// Model: generation, placements and epochs of existing tasks.
			var gen uint64
			model := map[string]Placement{}
			epochs := map[string]uint64{}
			newActives := 0
			var single []any
			applied, conflicts, skipped, placedUnplaced := 0, 0, 0, 0
			// Refused deltas, by the rule they break.
			invalid := map[string]int{}
			rules := []string{"generation must follow base", "empty task id", "task listed twice", "bad worker ids in a placement"}
			for _, l := range logs {
				c, err := DecodeCommand(l.Data)
				exists := map[string]bool{}
				if err == nil && c.Type == CmdSetAssignment {
					for _, p := range c.Assign.Set {
						_, exists[p.Task] = one.Task(p.Task)
					}
				}
				before := assignOf(t, one)
				out := applyEntry(one, l)
				single = append(single, out)
				if l.NoCommand {
					continue
				}
				if err == nil && c.Type == CmdBatch {
					for i, sub := range c.Batch {
						if r := out.(BatchResult)[i]; sub.Type == CmdDeleteTask && r.Code == CodeOK && r.Index == l.Index {
							delete(model, r.Task.ID)
							delete(epochs, r.Task.ID)
						}
					}
					continue
				}
				res := out.(Result)
				if err != nil {
					if want := (Result{Index: l.Index, Code: CodeInvalid, Err: err.Error()}); res != want {
						t.Fatalf("entry %d: undecodable (%v): %+v", l.Index, err, res)
					}
					if got := assignOf(t, one); !reflect.DeepEqual(got, before) {
						t.Fatalf("entry %d: invalid delta changed the assignment: %+v -> %+v", l.Index, before, got)
					}
					for _, rule := range rules {
						if strings.Contains(err.Error(), rule) {
							invalid[rule]++
						}
					}
					continue
				}
				switch c.Type {
				case CmdSetAssignment:
					if c.Assign.Base != gen {
						conflicts++
						if res.Code != CodeConflict {
							t.Fatalf("entry %d: delta from %d at generation %d: %+v", l.Index, c.Assign.Base, gen, res)
						}
						break
					}
					if res != (Result{Index: l.Index}) {
						t.Fatalf("entry %d: delta from %d: %+v", l.Index, gen, res)
					}
					applied++
					gen = c.Assign.Generation
					for _, p := range c.Assign.Set {
						if !exists[p.Task] {
							skipped++
							continue
						}
						if p.Active == "" {
							placedUnplaced++
						} else if p.Active != model[p.Task].Active {
							epochs[p.Task]++
							newActives++
						}
						p.Epoch = epochs[p.Task]
						model[p.Task] = p
					}
					for _, id := range c.Assign.Removed {
						delete(model, id)
					}
				case CmdDeleteTask:
					if res.Code == CodeOK && res.Index == l.Index {
						delete(model, res.Task.ID)
						delete(epochs, res.Task.ID)
					}
				}
				want := assignState{Gen: gen, Placements: maps.Clone(model)}
				if len(model) == 0 {
					want.Placements = nil
				}
				if got := assignOf(t, one); !reflect.DeepEqual(got, want) {
					t.Fatalf("after entry %d: assignment %+v, model %+v", l.Index, got, want)
				}
				for id, e := range epochs {
					if got := one.TaskEpoch(id); got != e {
						t.Fatalf("after entry %d: epoch of %s is %d, model %d", l.Index, id, got, e)
					}
				}
			}
			if applied < 20 || conflicts < 5 || skipped == 0 || placedUnplaced == 0 || len(model) == 0 || newActives < 10 {
				t.Fatalf("weak test log: %d deltas applied, %d conflicts, %d skipped placements, %d without active, %d placed at the end, %d new actives",
					applied, conflicts, skipped, placedUnplaced, len(model), newActives)
			}
			if got := fullStateOf(t, one).Epochs; len(got) != len(epochs) {
				t.Fatalf("epochs %v, model %v", got, epochs)
			}
			for _, rule := range rules {
				if invalid[rule] == 0 {
					t.Fatalf("weak test log: no delta refused for %q (refused: %v)", rule, invalid)
				}
			}
			want := fullStateOf(t, one)
			wantSnap := persistSnapshot(t, one)

			batched := newFSM()
			r := rand.New(rand.NewPCG(seed, 11))
			var batchedOut []any
			for rest := logs; len(rest) > 0; {
				n := min(1+r.IntN(40), len(rest))
				batchedOut = append(batchedOut, batched.ApplyBatch(rest[:n])...)
				rest = rest[n:]
			}
			if !reflect.DeepEqual(single, batchedOut) {
				t.Fatal("ApplyBatch results differ from Apply's")
			}
			if got := fullStateOf(t, batched); !reflect.DeepEqual(want, got) {
				t.Fatalf("batched state differs:\n%+v\n%+v", want, got)
			}

			cuts := []int{1, len(logs) / 3, len(logs) / 2, len(logs) - 1}
			// And right after an applied delta.
			for k := len(logs) / 4; k < len(logs); k++ {
				if c, err := DecodeCommand(logs[k].Data); err == nil && c.Type == CmdSetAssignment && single[k].(Result).Code == CodeOK {
					cuts = append(cuts, k+1)
					break
				}
			}
			for _, cut := range cuts {
				part := newFSM()
				for _, l := range logs[:cut] {
					applyEntry(part, l)
				}
				restored := NewFSM("c")
				if err := restoreBytes(restored, persistSnapshot(t, part)); err != nil {
					t.Fatal(err)
				}
				if a, b := fullStateOf(t, part), fullStateOf(t, restored); !reflect.DeepEqual(a, b) {
					t.Fatalf("restored at %d: state differs from the snapshotted FSM:\n%+v\n%+v", cut, a, b)
				}
				for i, l := range logs[cut:] {
					if got := applyEntry(restored, l); !reflect.DeepEqual(got, single[cut+i]) {
						t.Fatalf("restored at %d: entry %d gave %+v, want %+v", cut, cut+i+1, got, single[cut+i])
					}
				}
				if got := fullStateOf(t, restored); !reflect.DeepEqual(want, got) {
					t.Fatalf("restored at %d: state differs:\n%+v\n%+v", cut, want, got)
				}
				if got := persistSnapshot(t, restored); !bytes.Equal(wantSnap, got) {
					t.Fatalf("restored at %d: snapshot differs", cut)
				}
			}
		})
	}
}

// TestSnapshotKeepsTaskStatesOfItsIndex: tasks are shared between the FSM
// and its snapshots, so a later assignment must replace a task, never
// change it in place, or the snapshot would write states of a later index.
func TestSnapshotKeepsTaskStatesOfItsIndex(t *testing.T) {
	f := NewFSM("c1")
	applyTerm(t, f, 1, 1, submitCmd("", "", "a"))
	applyTerm(t, f, 2, 1, submitCmd("", "", "b"))
	applyTerm(t, f, 3, 1, assignCmd(0, []Placement{{Task: "a", Active: "w1"}}))
	before := persistSnapshot(t, f)
	snap := f.Snapshot()
	applyTerm(t, f, 4, 1, assignCmd(1, []Placement{{Task: "b", Active: "w1"}}, "a"))
	applyTerm(t, f, 5, 1, deleteCmd("", "", "b"))
	if got, _ := f.Task("a"); got.State != TaskStatePending {
		t.Fatalf("task a after its removal: %+v", got)
	}
	var buf bytes.Buffer
	if err := snap.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), before) {
		t.Fatalf("snapshot taken at index 3 wrote later state:\n%s\nwant\n%s", buf.Bytes(), before)
	}
}
