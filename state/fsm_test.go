package state

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// applyEntry applies one entry alone: a command with Apply, any other
// entry as a batch of one.
func applyEntry(f *FSM, e Entry) any {
	if e.NoCommand {
		return f.ApplyBatch([]Entry{e})[0]
	}
	return f.Apply(e.Index, e.Term, e.Data)
}

func submitCmd(client, request, id string) Command {
	return Command{Type: CmdSubmitTask, ClientID: client, RequestID: request, Task: Task{ID: id}}
}

func deleteCmd(client, request, id string) Command {
	return Command{Type: CmdDeleteTask, ClientID: client, RequestID: request, Task: Task{ID: id}}
}

func enc(c Command) []byte { return c.Encode() }

func cmdLog(index uint64, c Command) Entry {
	return Entry{Index: index, Term: 1, Data: c.Encode()}
}

// apply applies c at index and returns its Result.
func apply(t testing.TB, f *FSM, index uint64, c Command) Result {
	t.Helper()
	out := applyEntry(f, cmdLog(index, c))
	r, ok := out.(Result)
	if !ok {
		t.Fatalf("Apply(%d, %+v) returned %T %v, want Result", index, c, out, out)
	}
	if f.AppliedIndex() != index {
		t.Fatalf("AppliedIndex = %d after applying %d", f.AppliedIndex(), index)
	}
	return r
}

func pendingTask(id string, index uint64) Task {
	return Task{ID: id, CreatedIndex: index, State: TaskStatePending, PendingReason: "no worker assigned"}
}

// fsmState is everything an FSM holds, in a comparable form.
type fsmState struct {
	Tasks   []Task
	Dedup   []dedupRecord
	Applied uint64
	Window  uint64
	Max     int
}

func stateOf(t testing.TB, f *FSM) fsmState {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := fsmState{Applied: f.applied.Load(), Window: f.window, Max: f.maxEntries}
	for _, tk := range registryTasks(t, f.tasks) {
		s.Tasks = append(s.Tasks, tk)
	}
	slices.SortFunc(s.Tasks, func(a, b Task) int { return strings.Compare(a.ID, b.ID) })
	live := f.order.all()
	for i := range live {
		s.Dedup = append(s.Dedup, live[i].record())
	}
	// Invariants: the map and the order queue hold the same entries, the
	// queue is in index order, and every task is keyed by its id.
	if f.dedup.len() != len(live) {
		t.Fatalf("dedup index has %d entries, order queue %d", f.dedup.len(), len(live))
	}
	for i, e := range s.Dedup {
		seq, ok := f.dedup.find(&f.order, dedupKey{e.Client, e.Request})
		var r Result
		if p, held := f.order.at(seq); ok && held {
			r = p.result()
		}
		if !ok || r != e.Result {
			t.Fatalf("order entry %+v not in dedup map (got %+v, %v)", e, r, ok)
		}
		if i > 0 && s.Dedup[i-1].Result.Index > e.Result.Index {
			t.Fatalf("order queue not in index order at %d: %d > %d", i, s.Dedup[i-1].Result.Index, e.Result.Index)
		}
	}
	return s
}

func TestApplySubmitAndDelete(t *testing.T) {
	f := NewFSM("c")
	if f.NumTasks() != 0 || f.AppliedIndex() != 0 || f.DedupLen() != 0 {
		t.Fatal("new FSM is not empty")
	}
	want1 := pendingTask("t1", 1)
	want1.Stateful, want1.StandbyReplicas = true, 2
	r := apply(t, f, 1, Command{Type: CmdSubmitTask, ClientID: "c", RequestID: "r1", Task: Task{ID: "t1", Stateful: true, StandbyReplicas: 2,
		// Caller-supplied bookkeeping fields are not on the wire.
		CreatedIndex: 99, State: "RUNNING"}})
	if want := (Result{Index: 1, Task: want1}); r != want {
		t.Fatalf("submit: got %+v, want %+v", r, want)
	}
	if got, ok := f.Task("t1"); !ok || got != want1 {
		t.Fatalf("Task(t1) = %+v, %v", got, ok)
	}

	r = apply(t, f, 2, submitCmd("c", "r2", "t2"))
	if want := (Result{Index: 2, Task: pendingTask("t2", 2)}); r != want {
		t.Fatalf("submit t2: got %+v, want %+v", r, want)
	}

	r = apply(t, f, 3, submitCmd("c", "r3", "t1"))
	if want := (Result{Index: 3, Code: CodeAlreadyExists, Task: want1}); r != want {
		t.Fatalf("duplicate submit: got %+v, want %+v", r, want)
	}
	if got, _ := f.Task("t1"); got != want1 {
		t.Fatalf("duplicate submit changed the task: %+v", got)
	}

	r = apply(t, f, 4, deleteCmd("c", "r4", "t1"))
	if want := (Result{Index: 4, Task: want1}); r != want {
		t.Fatalf("delete: got %+v, want %+v", r, want)
	}
	if _, ok := f.Task("t1"); ok {
		t.Fatal("t1 still there after delete")
	}

	r = apply(t, f, 5, deleteCmd("c", "r5", "t1"))
	if want := (Result{Index: 5, Code: CodeNotFound, Task: Task{ID: "t1"}}); r != want {
		t.Fatalf("delete missing: got %+v, want %+v", r, want)
	}

	r = apply(t, f, 6, Command{Type: CmdNoop})
	if want := (Result{Index: 6}); r != want {
		t.Fatalf("noop: got %+v, want %+v", r, want)
	}

	// Re-creating a deleted task gets a new CreatedIndex.
	r = apply(t, f, 7, submitCmd("c", "r7", "t1"))
	if want := (Result{Index: 7, Task: pendingTask("t1", 7)}); r != want {
		t.Fatalf("re-create: got %+v, want %+v", r, want)
	}
	if f.NumTasks() != 2 || f.DedupHits() != 0 {
		t.Fatalf("NumTasks = %d, DedupHits = %d", f.NumTasks(), f.DedupHits())
	}
	if f.DedupLen() != 6 {
		t.Fatalf("DedupLen = %d, want 6 (every command with a request id but the noop)", f.DedupLen())
	}
	stateOf(t, f)
}

func TestDedupRetryReturnsFirstResult(t *testing.T) {
	f := NewFSM("c")
	first := apply(t, f, 1, submitCmd("c1", "r1", "t1"))
	before := stateOf(t, f)

	again := apply(t, f, 2, submitCmd("c1", "r1", "t1"))
	if again != first {
		t.Fatalf("retry: got %+v, want the first result %+v", again, first)
	}
	if f.DedupHits() != 1 || f.NumTasks() != 1 {
		t.Fatalf("DedupHits = %d, NumTasks = %d", f.DedupHits(), f.NumTasks())
	}
	after := stateOf(t, f)
	before.Applied = 2
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("retry changed state:\n%+v\n%+v", before, after)
	}

	// Delete the task under another request; a retried submit still answers
	// the first result and does not re-create the task.
	del := apply(t, f, 3, deleteCmd("c1", "r2", "t1"))
	if del.Code != CodeOK {
		t.Fatalf("delete: %+v", del)
	}
	if r := apply(t, f, 4, submitCmd("c1", "r1", "t1")); r != first {
		t.Fatalf("retry after delete: got %+v, want %+v", r, first)
	}
	if f.NumTasks() != 0 {
		t.Fatal("retried submit re-created a deleted task")
	}
	// A retried delete answers the first delete's result, not NotFound.
	if r := apply(t, f, 5, deleteCmd("c1", "r2", "t1")); r != del {
		t.Fatalf("retried delete: got %+v, want %+v", r, del)
	}
	// A request id reused for a different command answers the first result.
	if r := apply(t, f, 6, deleteCmd("c1", "r1", "zzz")); r != first {
		t.Fatalf("reused request id: got %+v, want %+v", r, first)
	}
	if f.DedupHits() != 4 {
		t.Fatalf("DedupHits = %d, want 4", f.DedupHits())
	}
	// Non-OK results are remembered too.
	nf := apply(t, f, 7, deleteCmd("c1", "r3", "missing"))
	if nf.Code != CodeNotFound {
		t.Fatalf("delete missing: %+v", nf)
	}
	apply(t, f, 8, submitCmd("c1", "r4", "missing"))
	if r := apply(t, f, 9, deleteCmd("c1", "r3", "missing")); r != nf {
		t.Fatalf("retried NotFound: got %+v, want %+v", r, nf)
	}
	if _, ok := f.Task("missing"); !ok {
		t.Fatal("retried delete deleted a task")
	}
	stateOf(t, f)
}

func TestDedupKeyIncludesClient(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, submitCmd("c1", "r1", "t1"))
	r := apply(t, f, 2, submitCmd("c2", "r1", "t1"))
	if r.Code != CodeAlreadyExists || r.Index != 2 {
		t.Fatalf("other client, same request id: got %+v, want AlreadyExists at 2", r)
	}
	r = apply(t, f, 3, submitCmd("c2", "r1", "t2"))
	if r.Code != CodeAlreadyExists || r.Index != 2 {
		t.Fatalf("c2's retry: got %+v, want its own first result", r)
	}
	if f.NumTasks() != 1 || f.DedupHits() != 1 || f.DedupLen() != 2 {
		t.Fatalf("NumTasks %d DedupHits %d DedupLen %d", f.NumTasks(), f.DedupHits(), f.DedupLen())
	}
}

func TestNoRequestIDNoDedup(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, submitCmd("c1", "", "t1"))
	r := apply(t, f, 2, submitCmd("c1", "", "t1"))
	if r.Code != CodeAlreadyExists {
		t.Fatalf("got %+v", r)
	}
	apply(t, f, 3, submitCmd("", "", "t2"))
	if f.DedupLen() != 0 || f.DedupHits() != 0 || f.NumTasks() != 2 {
		t.Fatalf("DedupLen %d DedupHits %d NumTasks %d", f.DedupLen(), f.DedupHits(), f.NumTasks())
	}
}

// TestDedupExpiresByIndex: an entry remembered at index e is forgotten by a
// command at index >= e+window, not before.
func TestDedupExpiresByIndex(t *testing.T) {
	const window, at = 10, 5
	for _, retry := range []uint64{at + 1, at + window - 1, at + window, at + window + 1, at + 1000} {
		t.Run(fmt.Sprint(retry), func(t *testing.T) {
			f := NewFSM("c")
			f.SetDedupLimits(window, 1000)
			first := apply(t, f, at, submitCmd("c", "r", "t"))
			got := apply(t, f, retry, submitCmd("c", "r", "t"))
			if retry < at+window {
				if got != first || f.DedupHits() != 1 {
					t.Fatalf("retry at %d inside the window: got %+v (hits %d), want %+v", retry, got, f.DedupHits(), first)
				}
				return
			}
			if want := (Result{Index: retry, Code: CodeAlreadyExists, Task: first.Task}); got != want || f.DedupHits() != 0 {
				t.Fatalf("retry at %d past the window: got %+v (hits %d), want %+v", retry, got, f.DedupHits(), want)
			}
			// It is remembered again, under the new index.
			if r := apply(t, f, retry+1, submitCmd("c", "r", "t")); r != got {
				t.Fatalf("second retry: got %+v, want %+v", r, got)
			}
		})
	}

	// Any command advances expiry, including a noop and a malformed one.
	for _, c := range []struct {
		name string
		data []byte
	}{
		{"noop", (&Command{Type: CmdNoop}).Encode()},
		{"malformed", []byte{0xde, 0xad}},
		{"other", enc(submitCmd("x", "y", "z"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFSM("c")
			f.SetDedupLimits(window, 1000)
			apply(t, f, 1, submitCmd("c", "r1", "t1"))
			apply(t, f, 3, submitCmd("c", "r3", "t3"))
			applyEntry(f, Entry{Index: 1 + window - 1, Data: c.data})
			if f.DedupLen() < 2 {
				t.Fatalf("DedupLen %d at index %d: expired too early", f.DedupLen(), window)
			}
			applyEntry(f, Entry{Index: 1 + window, Data: c.data})
			f.mu.RLock()
			_, has1 := f.dedup.find(&f.order, dedupKey{"c", "r1"})
			_, has3 := f.dedup.find(&f.order, dedupKey{"c", "r3"})
			f.mu.RUnlock()
			if has1 || !has3 {
				t.Fatalf("at index %d: r1 remembered=%v (want false), r3 remembered=%v (want true)", 1+window, has1, has3)
			}
			stateOf(t, f)
		})
	}
}

func TestDedupMaxEntriesEvictsOldest(t *testing.T) {
	f := NewFSM("c")
	f.SetDedupLimits(1<<20, 3)
	for i := uint64(1); i <= 5; i++ {
		apply(t, f, i, submitCmd("c", fmt.Sprint("r", i), fmt.Sprint("t", i)))
	}
	if f.DedupLen() != 3 {
		t.Fatalf("DedupLen = %d, want 3", f.DedupLen())
	}
	s := stateOf(t, f)
	var reqs []string
	for _, e := range s.Dedup {
		reqs = append(reqs, e.Request)
	}
	if want := []string{"r3", "r4", "r5"}; !slices.Equal(reqs, want) {
		t.Fatalf("remembered %v, want %v", reqs, want)
	}
	// r3 is still known: a hit, no new entry.
	if r := apply(t, f, 6, submitCmd("c", "r3", "t3")); r.Index != 3 || r.Code != CodeOK {
		t.Fatalf("r3 retry: %+v", r)
	}
	// r1 was evicted: applied afresh (AlreadyExists), which evicts r3.
	if r := apply(t, f, 7, submitCmd("c", "r1", "t1")); r.Index != 7 || r.Code != CodeAlreadyExists {
		t.Fatalf("r1 retry: %+v", r)
	}
	if r := apply(t, f, 8, submitCmd("c", "r3", "t3")); r.Index != 8 || r.Code != CodeAlreadyExists {
		t.Fatalf("r3 after eviction: %+v", r)
	}
	if f.DedupHits() != 1 || f.DedupLen() != 3 {
		t.Fatalf("DedupHits %d DedupLen %d", f.DedupHits(), f.DedupLen())
	}
	stateOf(t, f)
}

// TestDedupManyEntries runs the order queue through many chunks.
func TestDedupManyEntries(t *testing.T) {
	const n, max = 3000, 10
	f := NewFSM("c")
	f.SetDedupLimits(1<<20, max)
	for i := uint64(1); i <= n; i++ {
		apply(t, f, i, submitCmd("c", fmt.Sprint(i), "t"))
	}
	s := stateOf(t, f)
	if len(s.Dedup) != max || s.Dedup[0].Result.Index != n-max+1 || s.Dedup[max-1].Result.Index != n {
		t.Fatalf("dedup after %d entries: %d entries from %d", n, len(s.Dedup), s.Dedup[0].Result.Index)
	}
	f.mu.RLock()
	chunks := len(f.order.chunks)
	f.mu.RUnlock()
	if chunks != 1 {
		t.Fatalf("order queue of %d entries holds %d chunks", max, chunks)
	}
	if r := apply(t, f, n+1, submitCmd("c", fmt.Sprint(n-max+1), "t")); r.Index != n-max+1 {
		t.Fatalf("oldest remembered entry not a hit: %+v", r)
	}
	if r := apply(t, f, n+2, submitCmd("c", fmt.Sprint(n-max), "t")); r.Index != n+2 {
		t.Fatalf("evicted entry was a hit: %+v", r)
	}
}

func TestMalformedEntryIsInvalidAndChangesNothing(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, submitCmd("c", "r1", "t1"))
	before := stateOf(t, f)
	for i, data := range [][]byte{nil, {1}, {2, 1}, {1, 99}, append(enc(submitCmd("c", "r1", "t1")), 0)} {
		index := uint64(2 + i)
		out := applyEntry(f, Entry{Index: index, Data: data})
		r, ok := out.(Result)
		if !ok || r.Code != CodeInvalid || r.Index != index || !strings.Contains(r.Err, ErrBadCommand.Error()) || r.Task != (Task{}) {
			t.Fatalf("malformed % x: got %#v", data, out)
		}
		before.Applied = index
		if after := stateOf(t, f); !reflect.DeepEqual(before, after) {
			t.Fatalf("malformed % x changed state:\n%+v\n%+v", data, before, after)
		}
	}
	if f.DedupHits() != 0 {
		t.Fatal("malformed entry counted as a dedup hit")
	}
}

func TestNonCommandLogsAdvanceAppliedIndex(t *testing.T) {
	f := NewFSM("c")
	apply(t, f, 1, submitCmd("c", "r1", "t1"))
	before := stateOf(t, f)
	check := func(what string, index uint64) {
		t.Helper()
		if f.AppliedIndex() != index {
			t.Fatalf("%s: AppliedIndex %d, want %d", what, f.AppliedIndex(), index)
		}
		before.Applied = index
		if after := stateOf(t, f); !reflect.DeepEqual(before, after) {
			t.Fatalf("%s changed state", what)
		}
	}
	// Data that would be a valid command must still be ignored.
	if out := applyEntry(f, Entry{NoCommand: true, Index: 10, Data: enc(submitCmd("c", "r2", "t2"))}); out != nil {
		t.Fatalf("NoCommand entry: Apply returned %v, want nil", out)
	}
	check("NoCommand entry", 10)
	f.Advance(11)
	check("Advance", 11)
	out := f.ApplyBatch([]Entry{{NoCommand: true, Index: 20}, cmdLog(21, submitCmd("c", "r1", "t1"))})
	if out[0] != nil || out[1].(Result).Index != 1 || f.AppliedIndex() != 21 {
		t.Fatalf("batch: %v, applied %d", out, f.AppliedIndex())
	}
}

// randomLog is a log with retries, deletes, batches, malformed and
// non-command entries, from a fixed seed.
func randomLog(seed uint64, n int) []Entry {
	r := rand.New(rand.NewPCG(seed, 42))
	logs := make([]Entry, 0, n)
	for i := 1; i <= n; i++ {
		idx := uint64(i)
		var l Entry
		switch k := r.IntN(20); {
		case k == 0:
			l = Entry{NoCommand: true, Index: idx}
		case k == 1:
			l = Entry{NoCommand: true, Index: idx, Data: []byte{1, 2, 3}}
		case k == 2:
			l = Entry{Index: idx, Data: []byte{1, byte(r.IntN(256)), byte(r.IntN(256))}}
		case k == 3:
			l = cmdLog(idx, Command{Type: CmdNoop})
		case k <= 6:
			// A batch, its commands' request ids distinct within it (an
			// in-batch retry is TestBatchEntry's case).
			b := Command{Type: CmdBatch}
			seen := map[dedupKey]bool{}
			for range 1 + r.IntN(6) {
				c := randomCmd(r)
				if k := (dedupKey{c.ClientID, c.RequestID}); c.RequestID == "" || !seen[k] {
					seen[k] = true
					b.Batch = append(b.Batch, c)
				}
			}
			l = cmdLog(idx, b)
		default:
			l = cmdLog(idx, randomCmd(r))
		}
		l.Term = 1
		logs = append(logs, l)
	}
	return logs
}

// randomCmd is a submit or delete among few clients, requests and tasks.
func randomCmd(r *rand.Rand) Command {
	client := fmt.Sprint("c", r.IntN(3))
	req := ""
	if r.IntN(8) != 0 {
		req = fmt.Sprint("r", r.IntN(25))
	}
	id := fmt.Sprint("t", r.IntN(15))
	c := submitCmd(client, req, id)
	if r.IntN(3) == 0 {
		c = deleteCmd(client, req, id)
	} else {
		c.Task.Stateful = r.IntN(2) == 0
		c.Task.StandbyReplicas = uint32(r.IntN(4))
	}
	return c
}

// TestDeterministic: FSMs fed the same log end in the same state with the
// same results, whether applied one by one, in batches of any size, or
// restored from a snapshot midway.
func TestDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			logs := randomLog(seed, 600)
			newFSM := func() *FSM {
				f := NewFSM("c")
				f.SetDedupLimits(40, 12)
				return f
			}
			one, batched, restored := newFSM(), newFSM(), newFSM()

			var single []any
			for _, l := range logs {
				single = append(single, applyEntry(one, l))
			}

			r := rand.New(rand.NewPCG(seed, 7))
			var batchedOut []any
			for rest := logs; len(rest) > 0; {
				n := min(1+r.IntN(40), len(rest))
				out := batched.ApplyBatch(rest[:n])
				if len(out) != n {
					t.Fatalf("ApplyBatch of %d returned %d results", n, len(out))
				}
				batchedOut = append(batchedOut, out...)
				rest = rest[n:]
			}
			if !reflect.DeepEqual(single, batchedOut) {
				for i := range single {
					if !reflect.DeepEqual(single[i], batchedOut[i]) {
						t.Fatalf("entry %d: Apply gave %+v, ApplyBatch %+v", i+1, single[i], batchedOut[i])
					}
				}
			}

			half := len(logs) / 2
			for _, l := range logs[:half] {
				applyEntry(restored, l)
			}
			snap := persistSnapshot(t, restored)
			restored = NewFSM("c") // default limits: the snapshot brings its own
			if err := restoreBytes(restored, snap); err != nil {
				t.Fatal(err)
			}
			for i, l := range logs[half:] {
				if got := applyEntry(restored, l); !reflect.DeepEqual(got, single[half+i]) {
					t.Fatalf("entry %d after restore: got %+v, want %+v", half+i+1, got, single[half+i])
				}
			}

			want := stateOf(t, one)
			if want.Applied != uint64(len(logs)) || len(want.Tasks) == 0 || len(want.Dedup) == 0 || one.DedupHits() == 0 {
				t.Fatalf("weak test log: %d tasks, %d dedup entries, %d hits", len(want.Tasks), len(want.Dedup), one.DedupHits())
			}
			for name, f := range map[string]*FSM{"batched": batched, "restored": restored} {
				if got := stateOf(t, f); !reflect.DeepEqual(want, got) {
					t.Fatalf("%s state differs:\n%+v\n%+v", name, want, got)
				}
			}
			if one.DedupHits() != batched.DedupHits() {
				t.Fatalf("DedupHits %d vs %d", one.DedupHits(), batched.DedupHits())
			}
			if a, b := persistSnapshot(t, one), persistSnapshot(t, restored); string(a) != string(b) {
				t.Fatal("snapshots of equal FSMs differ")
			}
		})
	}
}

func TestWaitApplied(t *testing.T) {
	f := NewFSM("c")
	stop := make(chan struct{})
	if err := f.WaitApplied(stop, 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.WaitApplied(stop, 3) }()
	apply(t, f, 1, submitCmd("c", "r1", "t1"))
	f.ApplyBatch([]Entry{cmdLog(2, submitCmd("c", "r2", "t2"))})
	select {
	case err := <-done:
		t.Fatalf("WaitApplied(3) returned %v at applied index 2", err)
	default:
	}
	// A non-command entry counts.
	applyEntry(f, Entry{NoCommand: true, Index: 3})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitApplied(3) did not return after index 3 was applied")
	}
	if err := f.WaitApplied(stop, 2); err != nil {
		t.Fatal(err)
	}

	go func() { done <- f.WaitApplied(stop, 100) }()
	close(stop)
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("got %v, want ErrStopped", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitApplied did not return after stop closed")
	}
	// Already applied wins over a closed stop.
	if err := f.WaitApplied(stop, 3); err != nil {
		t.Fatalf("applied index with stop closed: %v", err)
	}
}

func TestWaitAppliedWakesOnRestore(t *testing.T) {
	src := NewFSM("c")
	for i := uint64(1); i <= 50; i++ {
		apply(t, src, i, submitCmd("c", fmt.Sprint(i), fmt.Sprint("t", i)))
	}
	snap := persistSnapshot(t, src)
	f := NewFSM("c")
	done := make(chan error, 1)
	go func() { done <- f.WaitApplied(nil, 40) }()
	if err := restoreBytes(f, snap); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitApplied did not return after Restore")
	}
}

// TestConcurrentReadersAndWaiters is mostly for the race detector.
func TestConcurrentReadersAndWaiters(t *testing.T) {
	const n = 300
	f := NewFSM("c")
	stop := make(chan struct{})
	defer close(stop)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := uint64(1); i <= n; i += 7 {
		wg.Go(func() { errs <- f.WaitApplied(stop, i) })
	}
	done := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				tasks, _ := f.Tasks("", 5)
				for _, tk := range tasks {
					f.Task(tk.ID)
				}
				f.NumTasks()
				f.DedupLen()
				f.Snapshot()
			}
		})
	}
	logs := randomLog(99, n)
	for i := 0; i < len(logs); i += 10 {
		f.ApplyBatch(logs[i:min(i+10, len(logs))])
	}
	if err := f.WaitApplied(stop, n); err != nil {
		t.Fatal(err)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestTasksPaging(t *testing.T) {
	f := NewFSM("c")
	if tasks, more := f.Tasks("", 10); len(tasks) != 0 || more {
		t.Fatalf("empty FSM: %v, %v", tasks, more)
	}
	var ids []string
	for i := range 25 {
		ids = append(ids, fmt.Sprintf("t%02d", i))
	}
	shuffled := slices.Clone(ids)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for i, id := range shuffled {
		apply(t, f, uint64(i+1), submitCmd("c", "", id))
	}

	for _, limit := range []int{1, 7, 10, 24, 25, 26, 1000} {
		var got []string
		after, pages := "", 0
		for {
			page, more := f.Tasks(after, limit)
			pages++
			if len(page) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page))
			}
			for _, tk := range page {
				got = append(got, tk.ID)
				if want, _ := f.Task(tk.ID); tk != want {
					t.Fatalf("page task %+v != Task() %+v", tk, want)
				}
			}
			if !more {
				break
			}
			if len(page) != limit {
				t.Fatalf("limit %d: more=true on a short page of %d", limit, len(page))
			}
			after = page[len(page)-1].ID
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("limit %d: paged %v, want %v", limit, got, ids)
		}
		if want := max(1, (len(ids)+limit-1)/limit); pages != want {
			t.Fatalf("limit %d: %d pages, want %d", limit, pages, want)
		}
	}

	cases := []struct {
		after string
		limit int
		want  []string
		more  bool
	}{
		{"", 0, nil, true},
		{"t24", 5, nil, false},
		{"t23", 1, []string{"t24"}, false},
		{"t22", 1, []string{"t23"}, true},
		{"t05x", 2, []string{"t06", "t07"}, true}, // after need not be an id
		{"s", 1, []string{"t00"}, true},
		{"u", 10, nil, false},
		{"t14", 10, ids[15:25], false}, // exactly the rest
	}
	for _, tc := range cases {
		page, more := f.Tasks(tc.after, tc.limit)
		var got []string
		for _, tk := range page {
			got = append(got, tk.ID)
		}
		if !slices.Equal(got, tc.want) || more != tc.more {
			t.Errorf("Tasks(%q, %d) = %v, %v; want %v, %v", tc.after, tc.limit, got, more, tc.want, tc.more)
		}
	}
}

// TestTasksWithPrefix: a prefix search pages like Tasks and stops at the
// first id without the prefix.
func TestTasksWithPrefix(t *testing.T) {
	f := NewFSM("c")
	for i, id := range []string{"a", "ab", "ab1", "ab2", "ab3", "abc", "ac", "b"} {
		apply(t, f, uint64(i+1), submitCmd("c", "", id))
	}
	ids := func(ts []Task) (out []string) {
		for _, tk := range ts {
			out = append(out, tk.ID)
		}
		return out
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          []string
		more          bool
	}{
		{"ab", "", 10, []string{"ab", "ab1", "ab2", "ab3", "abc"}, false},
		{"ab", "", 2, []string{"ab", "ab1"}, true},
		{"ab", "ab1", 2, []string{"ab2", "ab3"}, true},
		{"ab", "ab3", 2, []string{"abc"}, false},
		{"ab", "abc", 2, nil, false},
		{"ab", "a", 1, []string{"ab"}, true},
		{"ab", "", 5, []string{"ab", "ab1", "ab2", "ab3", "abc"}, false},
		{"z", "", 5, nil, false},
		{"", "ac", 5, []string{"b"}, false},
	} {
		got, more := f.TasksWithPrefix(tc.prefix, tc.after, tc.limit)
		if !slices.Equal(ids(got), tc.want) || more != tc.more {
			t.Errorf("prefix %q after %q limit %d: %v more %v, want %v more %v", tc.prefix, tc.after, tc.limit, ids(got), more, tc.want, tc.more)
		}
	}
}

// TestDedupEntryKeepsWholeResult: a retry answers exactly the first
// Result, whatever its task carries (stateful, standbys, a weight) and
// for an id already there, also after a snapshot round trip.
func TestDedupEntryKeepsWholeResult(t *testing.T) {
	f := NewFSM("c")
	rich := submitCmd("c", "r1", "t1")
	rich.Task.Stateful, rich.Task.StandbyReplicas, rich.Task.Weight = true, 2, 5
	first := apply(t, f, 1, rich)
	exists := apply(t, f, 2, submitCmd("c", "r2", "t1"))
	if first.Code != CodeOK || exists.Code != CodeAlreadyExists || !exists.Task.Stateful || exists.Task.Weight != 5 {
		t.Fatalf("first %+v, exists %+v", first, exists)
	}
	g := NewFSM("c")
	var buf bytes.Buffer
	if err := f.Snapshot().Write(&buf); err != nil {
		t.Fatal(err)
	}
	if err := g.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*FSM{f, g} {
		if r := apply(t, x, 3, rich); r != first {
			t.Errorf("retry: %+v, want %+v", r, first)
		}
		if r := apply(t, x, 4, submitCmd("c", "r2", "t1")); r != exists {
			t.Errorf("retry: %+v, want %+v", r, exists)
		}
	}
}
