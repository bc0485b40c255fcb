package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// sampleCommands covers every CmdType with empty, ordinary and maximal fields.
func sampleCommands() []Command {
	long := strings.Repeat("x", maxIDLen)
	long2 := strings.Repeat("y", maxIDLen)
	return []Command{
		{Type: CmdNoop},
		{Type: CmdSubmitTask},
		{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r1", Task: Task{ID: "t1"}},
		{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r2", Task: Task{ID: "t2", Stateful: true}},
		{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r3", Task: Task{ID: "t3", StandbyReplicas: 3}},
		{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r4", Task: Task{ID: "t4", Stateful: true, StandbyReplicas: 1 << 16}},
		{Type: CmdSubmitTask, ClientID: long, RequestID: long, Task: Task{ID: long, Stateful: true, StandbyReplicas: 300}},
		{Type: CmdSubmitTask, ClientID: "ünï", RequestID: "\x00\x01", Task: Task{ID: "a.b-c_d"}},
		{Type: CmdDeleteTask},
		{Type: CmdDeleteTask, ClientID: "c2", RequestID: "r9", Task: Task{ID: "t1"}},
		{Type: CmdDeleteTask, ClientID: long, RequestID: long, Task: Task{ID: long}},
		{Type: CmdSetAssignment, Assign: AssignmentDelta{Base: 0, Generation: 1}},
		{Type: CmdSetAssignment, Assign: AssignmentDelta{Base: 300, Generation: 301,
			Set: []Placement{
				{Task: "t1", Active: "w1", Standbys: []string{"w2", "w3"}, Warmups: []string{"w4"}},
				{Task: "t2"},
				{Task: long, Active: long, Standbys: []string{long2}, Warmups: []string{"w1", "ünï"}},
				{Task: long2, Standbys: []string{long}, Warmups: []string{long2}},
			},
			Removed: []string{"t3", "w1", "\x00"}}},
		{Type: CmdBatch, Batch: []Command{
			{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r1", Task: Task{ID: "t1", Stateful: true, StandbyReplicas: 2}},
		}},
		{Type: CmdBatch, Batch: []Command{
			{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r1", Task: Task{ID: "t1"}},
			{Type: CmdDeleteTask, ClientID: "c2", RequestID: "r9", Task: Task{ID: "t1"}},
			{Type: CmdSubmitTask, ClientID: long, RequestID: long, Task: Task{ID: long, StandbyReplicas: 300}},
		}},
		{Type: CmdSetMember, Member: MemberRecord{ID: "n4", PeerAddr: "10.0.0.4:7000", ClientAddr: "10.0.0.4:8080"}},
		{Type: CmdSetMember, Member: MemberRecord{ID: strings.Repeat("m", maxMemberIDLen), PeerAddr: "[::1]:1", ClientAddr: "node-4.example.com:65535"}},
		{Type: CmdRemoveMember, Member: MemberRecord{ID: "n4"}},
		{Type: CmdRemoveMember, Member: MemberRecord{ID: "a.b-c_D9"}},
		{Type: CmdSetWorkerDrain, Worker: "w1", Drained: true},
		{Type: CmdSetWorkerDrain, Worker: strings.Repeat("w", 128)},
		{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r5", Task: Task{ID: "t5", Stateful: true, Weight: 2}},
		{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r6", Task: Task{ID: "t6", StandbyReplicas: 1, Weight: MaxWeight}},
		{Type: CmdBatch, Batch: []Command{
			{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r1", Task: Task{ID: "t1", Weight: 7}},
		}},
		{Type: CmdSetPlacementFrozen, Frozen: true},
		{Type: CmdSetPlacementFrozen},
		{Type: CmdSetWorkerAddr, Worker: "w1", Addr: "w1.workers.test:7000"},
		{Type: CmdSetWorkerAddr, Worker: strings.Repeat("w", 128), Addr: strings.Repeat("a", MaxWorkerAddrLen)},
		{Type: CmdSetWorkerAddr, Worker: "w1"},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	seen := map[CmdType]bool{}
	for _, c := range sampleCommands() {
		seen[c.Type] = true
		b := c.Encode()
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("DecodeCommand(Encode(%+v)): %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: got %+v, want %+v", got, c)
		}
		if b[0] != commandVersion || CmdType(b[1]) != c.Type {
			t.Fatalf("header of %+v: % x", c, b[:2])
		}
		if again := got.Encode(); !bytes.Equal(again, b) {
			t.Fatalf("re-encode of %+v differs:\n% x\n% x", c, again, b)
		}
	}
	for _, ct := range []CmdType{CmdNoop, CmdSubmitTask, CmdDeleteTask, CmdSetAssignment, CmdBatch, CmdSetMember, CmdRemoveMember, CmdSetWorkerDrain, CmdSetPlacementFrozen} {
		if !seen[ct] {
			t.Errorf("CmdType %d not covered", ct)
		}
	}
}

// TestCommandEncodingIsStable pins the wire format: log entries written today
// must decode in every future release.
func TestCommandEncodingIsStable(t *testing.T) {
	cases := []struct {
		c    Command
		want []byte
	}{
		{Command{Type: CmdNoop}, []byte{1, 1}},
		{Command{Type: CmdSubmitTask, ClientID: "c", RequestID: "r", Task: Task{ID: "t", Stateful: true, StandbyReplicas: 2}},
			[]byte{1, 2, 1, 'c', 1, 'r', 1, 't', 1, 2}},
		{Command{Type: CmdSubmitTask, Task: Task{ID: "t", StandbyReplicas: 300}},
			[]byte{1, 2, 0, 0, 1, 't', 0, 0xac, 0x02}},
		{Command{Type: CmdDeleteTask, ClientID: "c", RequestID: "r", Task: Task{ID: "t"}},
			[]byte{1, 3, 1, 'c', 1, 'r', 1, 't'}},
		{Command{Type: CmdSetMember, Member: MemberRecord{ID: "n", PeerAddr: "h:1", ClientAddr: "h:2"}},
			[]byte{1, 7, 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '2'}},
		{Command{Type: CmdRemoveMember, Member: MemberRecord{ID: "n"}},
			[]byte{1, 8, 1, 'n'}},
		{Command{Type: CmdSetWorkerDrain, Worker: "w", Drained: true},
			[]byte{1, 9, 1, 'w', 1}},
		{Command{Type: CmdSetWorkerDrain, Worker: "w"},
			[]byte{1, 9, 1, 'w', 0}},
		// A weight above 1 is a trailing field; a submit without one is
		// what log format 4 wrote.
		{Command{Type: CmdSubmitTask, ClientID: "c", RequestID: "r", Task: Task{ID: "t", Stateful: true, StandbyReplicas: 2, Weight: 300}},
			[]byte{1, 2, 1, 'c', 1, 'r', 1, 't', 1, 2, 0xac, 0x02}},
		{Command{Type: CmdSetPlacementFrozen, Frozen: true},
			[]byte{1, 10, 1}},
		{Command{Type: CmdSetPlacementFrozen},
			[]byte{1, 10, 0}},
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

// TestDeleteIgnoresTaskFields: a delete carries only the task id.
func TestDeleteIgnoresTaskFields(t *testing.T) {
	c := Command{Type: CmdDeleteTask, ClientID: "c", RequestID: "r", Task: Task{ID: "t", Stateful: true, StandbyReplicas: 7, CreatedIndex: 9, State: "X"}}
	got, err := DecodeCommand(c.Encode())
	if err != nil {
		t.Fatal(err)
	}
	want := Command{Type: CmdDeleteTask, ClientID: "c", RequestID: "r", Task: Task{ID: "t"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestDecodeCommandErrors(t *testing.T) {
	valid := (&Command{Type: CmdSubmitTask, ClientID: "c1", RequestID: "r1", Task: Task{ID: "t1", StandbyReplicas: 2}}).Encode()
	validDel := (&Command{Type: CmdDeleteTask, ClientID: "c1", RequestID: "r1", Task: Task{ID: "t1"}}).Encode()
	tooLongID := []byte{commandVersion, byte(CmdSubmitTask)}
	tooLongID = binary.AppendUvarint(tooLongID, maxIDLen+1)
	tooLongID = append(tooLongID, strings.Repeat("a", maxIDLen+1)...)
	hugeLen := binary.AppendUvarint([]byte{commandVersion, byte(CmdDeleteTask)}, 1<<62)
	overflowVarint := append([]byte{commandVersion, byte(CmdDeleteTask)}, bytes.Repeat([]byte{0xff}, 11)...)
	tooManyStandbys := []byte{commandVersion, byte(CmdSubmitTask), 0, 0, 1, 't', 0}
	tooManyStandbys = binary.AppendUvarint(tooManyStandbys, 1<<16+1)
	oversized := make([]byte, maxCmdBytes+1)
	oversized[0], oversized[1] = commandVersion, byte(CmdNoop)
	noop := (&Command{Type: CmdNoop}).Encode()
	trim := (&Command{Type: CmdTrimOutbox, UpTo: 3}).Encode()
	assign := (&Command{Type: CmdSetAssignment, Assign: AssignmentDelta{Base: 0, Generation: 1}}).Encode()
	batch := EncodeBatch([][]byte{valid, validDel})
	tooMany := make([][]byte, MaxBatch+1)
	for i := range tooMany {
		tooMany[i] = validDel
	}
	oversizedBatch := make([]byte, MaxBatchBytes+1)
	oversizedBatch[0], oversizedBatch[1] = commandVersion, byte(CmdBatch)

	cases := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"one byte", []byte{commandVersion}},
		{"version 0", []byte{0, byte(CmdNoop)}},
		{"version 2", []byte{2, byte(CmdNoop)}},
		{"version 255", []byte{255, byte(CmdSubmitTask), 0, 0, 0, 0, 0}},
		{"type 0", []byte{commandVersion, 0}},
		{"type 4", []byte{commandVersion, 4}},
		{"type 255", []byte{commandVersion, 255}},
		{"noop trailing", []byte{commandVersion, byte(CmdNoop), 0}},
		{"submit no fields", []byte{commandVersion, byte(CmdSubmitTask)}},
		{"submit trailing", append(append([]byte{}, valid...), 0)},
		{"submit weight 1", append(append([]byte{}, valid...), 1)},
		{"submit weight too large", binary.AppendUvarint(append([]byte{}, valid...), MaxWeight+1)},
		{"submit trailing after weight", append(append([]byte{}, valid...), 5, 0)},
		{"freeze without flags", []byte{commandVersion, byte(CmdSetPlacementFrozen)}},
		{"freeze unknown flags", []byte{commandVersion, byte(CmdSetPlacementFrozen), 2}},
		{"freeze trailing", []byte{commandVersion, byte(CmdSetPlacementFrozen), 1, 0}},
		{"delete trailing", append(append([]byte{}, validDel...), 'x')},
		{"submit truncated in client", valid[:3]},
		{"submit truncated in request", valid[:6]},
		{"submit missing task id", valid[:8]},
		{"submit missing flags", valid[:11]},
		{"submit missing standbys", valid[:len(valid)-1]},
		{"delete truncated in id", validDel[:len(validDel)-1]},
		{"delete missing id", validDel[:len(validDel)-3]},
		{"string length past end", []byte{commandVersion, byte(CmdDeleteTask), 5, 'a', 'b'}},
		{"string longer than max", tooLongID},
		{"huge string length", hugeLen},
		{"varint overflow", overflowVarint},
		{"unterminated varint", []byte{commandVersion, byte(CmdDeleteTask), 0x80}},
		{"standbys out of range", tooManyStandbys},
		{"oversized", oversized},
		{"empty batch", EncodeBatch(nil)},
		{"batch holding a noop", EncodeBatch([][]byte{valid, noop})},
		{"batch holding a trim", EncodeBatch([][]byte{trim})},
		{"batch holding an assignment", EncodeBatch([][]byte{assign})},
		{"batch holding a batch", EncodeBatch([][]byte{batch})},
		{"batch holding a bad command", EncodeBatch([][]byte{valid, valid[:6]})},
		{"batch of too many", EncodeBatch(tooMany)},
		{"batch count past end", []byte{commandVersion, byte(CmdBatch), 3, 1, 1}},
		{"batch length past end", append([]byte{commandVersion, byte(CmdBatch), 1, 200}, valid...)},
		{"batch trailing", append(append([]byte{}, batch...), 0)},
		{"batch truncated", batch[:len(batch)-1]},
		{"oversized batch", oversizedBatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Command
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("DecodeCommand(% x) panicked: %v", tc.b, r)
					}
				}()
				c, err = DecodeCommand(tc.b)
			}()
			if err == nil {
				t.Fatalf("DecodeCommand(% x) = %+v, want error", tc.b, c)
			}
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not wrap ErrBadCommand", err)
			}
			if c.ClientID != "" || c.RequestID != "" || c.Task.ID != "" {
				t.Fatalf("failed decode returned fields: %+v", c)
			}
		})
	}
}

// TestDecodeEveryPrefix: every strict prefix of a valid non-noop encoding is
// an error, never a panic; but for a weighted submit cut before its weight
// (a trailing field), which is the same submit without one.
func TestDecodeEveryPrefix(t *testing.T) {
	for _, c := range sampleCommands() {
		b := c.Encode()
		unweighted := c
		unweighted.Task.Weight = 0
		for i := 0; i < len(b); i++ {
			got, err := DecodeCommand(b[:i])
			if err == nil && c.Type == CmdSubmitTask && c.Task.Weight > 1 && reflect.DeepEqual(got, unweighted) {
				continue
			}
			if err == nil {
				t.Fatalf("prefix %d of %+v decoded to %+v", i, c, got)
			} else if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("prefix %d: %v does not wrap ErrBadCommand", i, err)
			}
		}
	}
}

// TestBatchLimits: a wave of the largest submits the API admits fits one
// batch entry.
func TestBatchLimits(t *testing.T) {
	long := strings.Repeat("x", maxIDLen)
	sub := (&Command{Type: CmdSubmitTask, ClientID: long, RequestID: long, Task: Task{ID: long, Stateful: true, StandbyReplicas: 1 << 16}}).Encode()
	cmds := make([][]byte, MaxBatch)
	for i := range cmds {
		cmds[i] = sub
	}
	b := EncodeBatch(cmds)
	if len(b) > MaxBatchBytes {
		t.Fatalf("%d largest submits encode to %d bytes, above MaxBatchBytes %d", MaxBatch, len(b), MaxBatchBytes)
	}
	c, err := DecodeCommand(b)
	if err != nil || len(c.Batch) != MaxBatch {
		t.Fatalf("decode: %d commands, %v", len(c.Batch), err)
	}
}

func TestBatchable(t *testing.T) {
	for _, c := range sampleCommands() {
		want := c.Type == CmdSubmitTask || c.Type == CmdDeleteTask
		if got := Batchable(c.Encode()); got != want {
			t.Errorf("Batchable(%+v) = %v", c, got)
		}
	}
	bad := (&Command{Type: CmdSubmitTask, Task: Task{ID: "t"}}).Encode()
	for _, b := range [][]byte{nil, {commandVersion}, bad[:len(bad)-1], append(slices.Clone(bad), 0)} {
		if Batchable(b) {
			t.Errorf("Batchable(% x) = true", b)
		}
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		f.Add(c.Encode())
	}
	f.Add([]byte{})
	f.Add([]byte{commandVersion})
	f.Add([]byte{commandVersion, 9})
	f.Add([]byte{commandVersion, byte(CmdSubmitTask), 0x80, 0x00, 0, 0, 0, 0})
	f.Add([]byte{commandVersion, byte(CmdSetMember), 1, 'n', 3, 'h', ':', '1', 3, 'h', ':', '0'})
	f.Add([]byte{commandVersion, byte(CmdRemoveMember), 0})
	f.Add([]byte{commandVersion, byte(CmdRemoveMember), 1, '/'})
	f.Add([]byte{commandVersion, byte(CmdSetWorkerDrain), 1, 'w', 2})
	f.Add([]byte{commandVersion, byte(CmdSetWorkerDrain), 1, ' ', 1})
	f.Add([]byte{commandVersion, byte(CmdSubmitTask), 0, 0, 1, 't', 0, 0, 1})
	f.Add([]byte{commandVersion, byte(CmdSetPlacementFrozen), 2})
	f.Add([]byte{commandVersion, byte(CmdSetWorkerAddr), 1, 'w', 3, 'h', ':', '1'})
	f.Add([]byte{commandVersion, byte(CmdSetWorkerAddr), 1, '/', 0})
	f.Add([]byte{commandVersion, byte(CmdSetWorkerAddr), 1, 'w', 1, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not wrap ErrBadCommand", err)
			}
			return
		}
		again := c.Encode()
		c2, err := DecodeCommand(again)
		if err != nil {
			t.Fatalf("re-encoding of %+v (% x) does not decode: %v", c, again, err)
		}
		if !reflect.DeepEqual(c2, c) {
			t.Fatalf("re-encoding changed the command: %+v -> %+v", c, c2)
		}
		if again2 := c2.Encode(); !bytes.Equal(again, again2) {
			t.Fatalf("encoding not canonical: % x vs % x", again, again2)
		}
	})
}
