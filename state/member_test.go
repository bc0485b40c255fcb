package state

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func setMemberCmd(id, peer, client string) Command {
	return Command{Type: CmdSetMember, Member: MemberRecord{ID: id, PeerAddr: peer, ClientAddr: client}}
}

func removeMemberCmd(id string) Command {
	return Command{Type: CmdRemoveMember, Member: MemberRecord{ID: id}}
}

// Set adds or replaces a record, remove drops it (NotFound when absent);
// Members lists the table by id.
func TestMemberTableApply(t *testing.T) {
	f := NewFSM("c")
	for i, tc := range []struct {
		c    Command
		code Code
		want []MemberRecord
	}{
		{setMemberCmd("n2", "h2:1", "h2:2"), CodeOK, []MemberRecord{{"n2", "h2:1", "h2:2"}}},
		{setMemberCmd("n1", "h1:1", "h1:2"), CodeOK, []MemberRecord{{"n1", "h1:1", "h1:2"}, {"n2", "h2:1", "h2:2"}}},
		{setMemberCmd("n2", "h9:1", "h9:2"), CodeOK, []MemberRecord{{"n1", "h1:1", "h1:2"}, {"n2", "h9:1", "h9:2"}}},
		{removeMemberCmd("n3"), CodeNotFound, []MemberRecord{{"n1", "h1:1", "h1:2"}, {"n2", "h9:1", "h9:2"}}},
		{removeMemberCmd("n1"), CodeOK, []MemberRecord{{"n2", "h9:1", "h9:2"}}},
		{removeMemberCmd("n2"), CodeOK, []MemberRecord{}},
	} {
		r := apply(t, f, uint64(i+1), tc.c)
		if r.Code != tc.code || r.Index != uint64(i+1) {
			t.Fatalf("step %d %+v: result %+v, want code %d", i, tc.c, r, tc.code)
		}
		if got := f.Members(); !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("step %d: members %+v, want %+v", i, got, tc.want)
		}
	}
	// Member commands write no outbox events and no dedup entries.
	if _, held, _ := f.Outbox(0); held != 0 || f.DedupLen() != 0 {
		t.Fatalf("outbox %d events, dedup %d entries", held, f.DedupLen())
	}
}

// The encoders refuse bad records with a clear error; what they accept
// decodes to the same record.
func TestMemberEncoders(t *testing.T) {
	long := strings.Repeat("n", maxMemberIDLen)
	for _, tc := range []struct {
		m    MemberRecord
		want string
	}{
		{MemberRecord{"n1", "10.0.0.1:7000", "10.0.0.1:8080"}, ""},
		{MemberRecord{long, "[::1]:7000", "node.example.com:1"}, ""},
		{MemberRecord{"", "h:1", "h:2"}, "member id must be 1 to 128 characters (got 0)"},
		{MemberRecord{long + "n", "h:1", "h:2"}, "member id must be 1 to 128 characters (got 129)"},
		{MemberRecord{"n/1", "h:1", "h:2"}, `member id "n/1": only [A-Za-z0-9._-] allowed`},
		{MemberRecord{"n1", "h", "h:2"}, `member n1: peer address: "h" is not host:port`},
		{MemberRecord{"n1", ":1", "h:2"}, `member n1: peer address: ":1" has no valid host`},
		{MemberRecord{"n1", "h:1", "h:0"}, `member n1: client address: "h:0" has no valid port`},
		{MemberRecord{"n1", "h:1", "h:70000"}, `member n1: client address: "h:70000" has no valid port`},
		{MemberRecord{"n1", "h:1", ""}, `member n1: client address: "" is not host:port`},
	} {
		b, err := EncodeSetMember(tc.m)
		if tc.want != "" {
			if !errors.Is(err, ErrBadMember) || !strings.Contains(err.Error(), tc.want) || b != nil {
				t.Errorf("EncodeSetMember(%+v) = %v, want %q", tc.m, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("EncodeSetMember(%+v): %v", tc.m, err)
		}
		c, err := DecodeCommand(b)
		if err != nil || c.Type != CmdSetMember || c.Member != tc.m {
			t.Fatalf("decode of %+v: %+v, %v", tc.m, c, err)
		}
	}
	if b, err := EncodeRemoveMember("n1"); err != nil || !bytes.Equal(b, []byte{1, 8, 2, 'n', '1'}) {
		t.Fatalf("EncodeRemoveMember: % x, %v", b, err)
	}
	if _, err := EncodeRemoveMember("a b"); !errors.Is(err, ErrBadMember) {
		t.Fatalf("EncodeRemoveMember(\"a b\"): %v", err)
	}
}

// A log entry carrying an invalid record does not decode, so no replica
// stores it.
func TestMemberDecodeRefusesBadRecords(t *testing.T) {
	f := NewFSM("c")
	for i, c := range []Command{setMemberCmd("", "h:1", "h:2"), setMemberCmd("n1", "nohost", "h:2"), removeMemberCmd(""), removeMemberCmd("ü")} {
		if _, err := DecodeCommand(c.Encode()); !errors.Is(err, ErrBadCommand) {
			t.Errorf("DecodeCommand(%+v): %v", c, err)
		}
		if r := apply(t, f, uint64(i+1), c); r.Code != CodeInvalid {
			t.Errorf("applying %+v: %+v", c, r)
		}
	}
	if len(f.Members()) != 0 {
		t.Fatalf("members %+v", f.Members())
	}
}

// buildMembersFSM is buildAssignFSM's history followed by member changes.
func buildMembersFSM(t testing.TB, cluster string) *FSM {
	t.Helper()
	f := buildAssignFSM(t, cluster) // applied 22
	for i, c := range []Command{
		setMemberCmd("n1", "10.0.0.1:7000", "10.0.0.1:8080"),
		setMemberCmd("n3", "10.0.0.3:7000", "10.0.0.3:8080"),
		setMemberCmd("n2", "10.0.0.2:7000", "10.0.0.2:8080"),
		setMemberCmd("n4", "[fd00::4]:7000", "node-4.example.com:8080"),
		removeMemberCmd("n3"),
	} {
		if r := applyTerm(t, f, uint64(23+i), 6, c); r.Code != CodeOK {
			t.Fatalf("%+v: %+v", c, r)
		}
	}
	return f
}

var builtMembers = []MemberRecord{
	{"n1", "10.0.0.1:7000", "10.0.0.1:8080"},
	{"n2", "10.0.0.2:7000", "10.0.0.2:8080"},
	{"n4", "[fd00::4]:7000", "node-4.example.com:8080"},
}

// checkMembersBuiltState: buildAssignFSM's state (its applied index aside)
// and the member table.
func checkMembersBuiltState(t *testing.T, f *FSM) {
	t.Helper()
	if got := f.Members(); !reflect.DeepEqual(got, builtMembers) {
		t.Fatalf("members %+v, want %+v", got, builtMembers)
	}
	if f.AppliedIndex() != 27 {
		t.Fatalf("applied %d, want 27", f.AppliedIndex())
	}
	if got := stateOf(t, f); len(got.Tasks) != 4 || len(got.Dedup) != 10 {
		t.Fatalf("tasks and dedup: %+v", got)
	}
}

func TestMembersSnapshotRoundTrip(t *testing.T) {
	src := buildMembersFSM(t, "c1")
	checkMembersBuiltState(t, src)
	b := persistSnapshot(t, src)
	dst := NewFSM("c1")
	apply(t, dst, 1, setMemberCmd("stale", "h:1", "h:2"))
	if err := restoreBytes(dst, b); err != nil {
		t.Fatal(err)
	}
	checkMembersBuiltState(t, dst)
	if a, b := fullStateOf(t, src), fullStateOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored FSM differs:\n%+v\n%+v", a, b)
	}
	// Snapshots of an FSM restored from one are identical.
	if again := persistSnapshot(t, dst); !bytes.Equal(again, b) {
		t.Fatalf("snapshot of the restored FSM differs")
	}
}

// A snapshot whose member table is invalid is refused and changes nothing.
func TestRestoreRefusesBadMembers(t *testing.T) {
	good := persistSnapshot(t, buildMembersFSM(t, "c1"))
	for name, edit := range map[string][2]string{
		"bad address":  {`"node-4.example.com:8080"`, `"node-4.example.com"`},
		"bad id":       {`"id":"n4"`, `"id":"n 4"`},
		"duplicate id": {`"id":"n4"`, `"id":"n2"`},
	} {
		b := bytes.Replace(good, []byte(edit[0]), []byte(edit[1]), 1)
		if bytes.Equal(b, good) {
			t.Fatalf("%s: %s not in the snapshot", name, edit[0])
		}
		f := buildMembersFSM(t, "c1")
		if err := restoreBytes(f, b); !errors.Is(err, ErrBadSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
		checkMembersBuiltState(t, f)
	}
}

const goldenV4 = "testdata/snapshot-v4.bin"

// TestSnapshotGoldenV4 restores a snapshot written by the release that
// introduced format version 4 (the member table). Never regenerate it to
// make this test pass. `go test -run 'GoldenV4$' -update` rewrites it (only
// when the file must be recreated; do not let -update reach the older
// golden tests).
func TestSnapshotGoldenV4(t *testing.T) {
	f := goldenSnapshot(t, goldenV4, 4, buildMembersFSM)
	checkMembersBuiltState(t, f)
	checkAssignBuiltBehaviour(t, f)
}

// Snapshots older than version 4 restore with an empty member table,
// replacing what the FSM had.
func TestOldSnapshotsHaveNoMembers(t *testing.T) {
	for _, file := range []string{goldenV1, goldenV2, goldenV3} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f := NewFSM("golden-cluster")
		apply(t, f, 1, setMemberCmd("n1", "h:1", "h:2"))
		if err := restoreBytes(f, b); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if m := f.Members(); len(m) != 0 {
			t.Fatalf("%s: members %+v", file, m)
		}
	}
}
