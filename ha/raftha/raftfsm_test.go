package raftha

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/state"
)

func submit(id string) []byte {
	return (&state.Command{Type: state.CmdSubmitTask, Task: state.Task{ID: id}}).Encode()
}

// snapshotBytes is what the state machine writes for f's snapshot.
func snapshotBytes(t *testing.T, f *state.FSM) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f.Snapshot().Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Raft's own entries (membership, barriers, no-ops, the old peer changes)
// carry no command: whatever their data, they change no state and only
// advance the applied index, alone, in a batch and as a stored
// configuration.
func TestRaftNonCommandLogsAdvanceAppliedIndex(t *testing.T) {
	f := state.NewFSM("c")
	r := NewFSM(f)
	if res, ok := r.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Term: 1, Data: submit("t1")}).(state.Result); !ok || res.Code != state.CodeOK {
		t.Fatalf("command: %+v", res)
	}
	before := snapshotBytes(t, f)
	for i, typ := range []raft.LogType{raft.LogNoop, raft.LogConfiguration, raft.LogBarrier, raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated} {
		index := uint64(10 + i)
		if out := r.Apply(&raft.Log{Type: typ, Index: index, Data: submit("t2")}); out != nil {
			t.Fatalf("log type %v: Apply returned %v, want nil", typ, out)
		}
		if f.AppliedIndex() != index || f.NumTasks() != 1 {
			t.Fatalf("log type %v: AppliedIndex %d, want %d; %d tasks", typ, f.AppliedIndex(), index, f.NumTasks())
		}
	}
	r.StoreConfiguration(18, raft.Configuration{})
	if f.AppliedIndex() != 18 {
		t.Fatalf("StoreConfiguration: AppliedIndex %d, want 18", f.AppliedIndex())
	}
	out := r.ApplyBatch([]*raft.Log{{Type: raft.LogConfiguration, Index: 20, Data: submit("t3")}, {Type: raft.LogCommand, Index: 21, Term: 2, Data: submit("t1")}})
	if len(out) != 2 || out[0] != nil || out[1].(state.Result).Code != state.CodeAlreadyExists || f.AppliedIndex() != 21 {
		t.Fatalf("batch: %v, applied %d", out, f.AppliedIndex())
	}
	// Apart from the applied index, nothing changed.
	g := state.NewFSM("c")
	if err := g.Restore(bytes.NewReader(before)); err != nil {
		t.Fatal(err)
	}
	g.Advance(21)
	if a, b := snapshotBytes(t, f), snapshotBytes(t, g); !bytes.Equal(a, b) {
		t.Fatalf("non-command entries changed state:\n%s\nwant\n%s", a, b)
	}
}

// memSink is an in-memory raft.SnapshotSink.
type memSink struct {
	buf      bytes.Buffer
	closed   int
	canceled int
	// failWrites makes every Write fail.
	failWrites bool
}

var _ raft.SnapshotSink = (*memSink)(nil)

func (s *memSink) Write(p []byte) (int, error) {
	if s.failWrites {
		return 0, errors.New("disk full")
	}
	if s.closed > 0 || s.canceled > 0 {
		return 0, errors.New("write after close")
	}
	return s.buf.Write(p)
}
func (s *memSink) Close() error  { s.closed++; return nil }
func (s *memSink) ID() string    { return "mem-snapshot" }
func (s *memSink) Cancel() error { s.canceled++; return nil }

// trackedReader records whether Restore closed it.
type trackedReader struct {
	io.Reader
	closed bool
}

func (r *trackedReader) Close() error { r.closed = true; return nil }

// A snapshot persists the state machine's bytes and closes the sink once;
// a restore reads them back and closes the reader, failed or not.
func TestRaftSnapshotRoundTrip(t *testing.T) {
	f := state.NewFSM("c")
	r := NewFSM(f)
	r.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Term: 1, Data: submit("a")})
	r.Apply(&raft.Log{Type: raft.LogCommand, Index: 2, Term: 1, Data: submit("b")})
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if sink.closed != 1 || sink.canceled != 0 {
		t.Fatalf("Persist: sink closed %d times, canceled %d times", sink.closed, sink.canceled)
	}
	if want := snapshotBytes(t, f); !bytes.Equal(sink.buf.Bytes(), want) {
		t.Fatalf("persisted\n%s\nwant\n%s", sink.buf.Bytes(), want)
	}

	g := state.NewFSM("c")
	rc := &trackedReader{Reader: bytes.NewReader(sink.buf.Bytes())}
	if err := NewFSM(g).Restore(rc); err != nil || !rc.closed {
		t.Fatalf("Restore: %v (closed %v)", err, rc.closed)
	}
	if g.NumTasks() != 2 || g.AppliedIndex() != 2 {
		t.Fatalf("restored %d tasks at %d", g.NumTasks(), g.AppliedIndex())
	}

	rc = &trackedReader{Reader: bytes.NewReader(sink.buf.Bytes()[:10])}
	if err := NewFSM(state.NewFSM("c")).Restore(rc); !errors.Is(err, state.ErrBadSnapshot) || !rc.closed {
		t.Fatalf("Restore of a cut snapshot: %v (closed %v)", err, rc.closed)
	}
}

func TestRaftPersistCancelsOnWriteError(t *testing.T) {
	f := state.NewFSM("c")
	f.Apply(1, 1, submit("a"))
	snap, err := NewFSM(f).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{failWrites: true}
	if err := snap.Persist(sink); err == nil {
		t.Fatal("Persist into a failing sink succeeded")
	}
	if sink.canceled != 1 || sink.closed != 0 {
		t.Fatalf("failing sink: canceled %d, closed %d; want canceled once, never closed", sink.canceled, sink.closed)
	}
}
