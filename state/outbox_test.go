package state

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"testing"
)

// termLog is a command entry of the given term.
func termLog(index, term uint64, c Command) Entry {
	return Entry{Index: index, Term: term, Data: c.Encode()}
}

// applyTerm applies c at index in term and returns its Result.
func applyTerm(t testing.TB, f *FSM, index, term uint64, c Command) Result {
	t.Helper()
	r, ok := applyEntry(f, termLog(index, term, c)).(Result)
	if !ok {
		t.Fatalf("Apply(%d, %+v) did not return a Result", index, c)
	}
	return r
}

func trimCmd(upTo uint64) Command { return Command{Type: CmdTrimOutbox, UpTo: upTo} }

// outboxState is the outbox part of an FSM.
type outboxState struct {
	Events    []Event
	Published uint64
}

// outboxOf reads the outbox and checks its invariants: events in strictly
// increasing index order, all above the published watermark.
func outboxOf(t testing.TB, f *FSM) outboxState {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := outboxState{Events: slices.Clone(f.outbox), Published: f.published}
	if len(s.Events) == 0 {
		s.Events = nil
	}
	for i, e := range s.Events {
		if e.Index <= s.Published {
			t.Fatalf("outbox holds event %d at or below the published watermark %d", e.Index, s.Published)
		}
		if i > 0 {
			p := s.Events[i-1]
			if p.Index > e.Index || p.Index == e.Index && p.Seq >= e.Seq {
				t.Fatalf("outbox not in (index, seq) order at %d: %d.%d then %d.%d", i, p.Index, p.Seq, e.Index, e.Seq)
			}
		}
	}
	return s
}

func checkOutbox(t *testing.T, f *FSM, wantPublished uint64, want []Event) {
	t.Helper()
	got := outboxOf(t, f)
	if len(want) == 0 {
		want = nil
	}
	if got.Published != wantPublished || !reflect.DeepEqual(got.Events, want) {
		t.Fatalf("outbox:\n got published %d %+v\nwant published %d %+v", got.Published, got.Events, wantPublished, want)
	}
	if evs := f.EventsAfter(0, len(want)+10); !reflect.DeepEqual(nilIfEmpty(evs), want) {
		t.Fatalf("EventsAfter(0) = %+v, want %+v", evs, want)
	}
	published, held, pending := f.Outbox(0)
	if published != wantPublished || held != len(want) || pending != len(want) {
		t.Fatalf("Outbox(0) = %d, %d, %d; want %d, %d, %d", published, held, pending, wantPublished, len(want), len(want))
	}
}

func nilIfEmpty(evs []Event) []Event {
	if len(evs) == 0 {
		return nil
	}
	return evs
}

func TestOutboxEventsOfCommands(t *testing.T) {
	f := NewFSM("c")
	checkOutbox(t, f, 0, nil)

	a := pendingTask("a", 1)
	a.Stateful, a.StandbyReplicas = true, 2
	sa := submitCmd("c", "r1", "a")
	sa.Task.Stateful, sa.Task.StandbyReplicas = true, 2
	evA := Event{Index: 1, Term: 2, Kind: EventTaskSubmitted, TaskID: "a", Task: a}

	if r := applyTerm(t, f, 1, 2, sa); r.Code != CodeOK {
		t.Fatalf("submit a: %+v", r)
	}
	checkOutbox(t, f, 0, []Event{evA})

	// Neither a failed submit, nor a retry answered from the dedup table,
	// nor a noop of any kind, nor a malformed entry makes an event.
	if r := applyTerm(t, f, 2, 2, submitCmd("c", "r2", "a")); r.Code != CodeAlreadyExists {
		t.Fatalf("duplicate submit: %+v", r)
	}
	if r := applyTerm(t, f, 3, 2, sa); r.Index != 1 || f.DedupHits() != 1 {
		t.Fatalf("retried submit: %+v, %d hits", r, f.DedupHits())
	}
	applyTerm(t, f, 4, 3, Command{Type: CmdNoop})
	applyEntry(f, Entry{NoCommand: true, Index: 5, Term: 3})
	applyEntry(f, Entry{NoCommand: true, Index: 6, Term: 3})
	applyEntry(f, Entry{Index: 7, Term: 3, Data: []byte{1, 2}}) // truncated submit
	f.Advance(8)
	if r := applyTerm(t, f, 9, 3, deleteCmd("c", "r3", "missing")); r.Code != CodeNotFound {
		t.Fatalf("delete missing: %+v", r)
	}
	checkOutbox(t, f, 0, []Event{evA})

	// A delete carries the task as it was.
	evDel := Event{Index: 10, Term: 3, Kind: EventTaskDeleted, TaskID: "a", Task: a}
	if r := applyTerm(t, f, 10, 3, deleteCmd("c", "r4", "a")); r.Code != CodeOK {
		t.Fatalf("delete a: %+v", r)
	}
	// Retried delete: answered from the dedup table, no second event.
	if r := applyTerm(t, f, 11, 3, deleteCmd("c", "r4", "a")); r.Index != 10 || r.Code != CodeOK {
		t.Fatalf("retried delete: %+v", r)
	}
	// A trim below the first event changes nothing but the watermark.
	if r := applyTerm(t, f, 12, 3, trimCmd(0)); r != (Result{Index: 12}) {
		t.Fatalf("trim result: %+v", r)
	}
	// A submit without request id (no dedup) of a re-created task.
	evA2 := Event{Index: 13, Term: 4, Kind: EventTaskSubmitted, TaskID: "a", Task: pendingTask("a", 13)}
	applyTerm(t, f, 13, 4, submitCmd("", "", "a"))
	// The same command again without request id is a genuine duplicate:
	// it fails, no event.
	if r := applyTerm(t, f, 14, 4, submitCmd("", "", "a")); r.Code != CodeAlreadyExists {
		t.Fatalf("second submit without request id: %+v", r)
	}
	checkOutbox(t, f, 0, []Event{evA, evDel, evA2})
	if f.AppliedIndex() != 14 {
		t.Fatalf("AppliedIndex %d", f.AppliedIndex())
	}
}

// eventsAt applies a submit of task "t<i>" at each index (term 1) and noops
// in between, and returns the events.
func eventsAt(t testing.TB, f *FSM, last uint64, idx ...uint64) []Event {
	t.Helper()
	var evs []Event
	next := f.AppliedIndex() + 1
	for _, i := range idx {
		for ; next < i; next++ {
			applyTerm(t, f, next, 1, Command{Type: CmdNoop})
		}
		id := fmt.Sprint("t", i)
		r := applyTerm(t, f, i, 1, submitCmd("c", id, id))
		if r.Code != CodeOK {
			t.Fatalf("submit %s: %+v", id, r)
		}
		evs = append(evs, Event{Index: i, Term: 1, Kind: EventTaskSubmitted, TaskID: id, Task: r.Task})
		next = i + 1
	}
	for ; next <= last; next++ {
		applyTerm(t, f, next, 1, Command{Type: CmdNoop})
	}
	return evs
}

func TestEventsAfterPaging(t *testing.T) {
	f := NewFSM("c")
	all := eventsAt(t, f, 30, 2, 3, 5, 8, 13, 14, 15, 21, 27, 28)

	for _, limit := range []int{1, 2, 3, 4, 10, 11, 100} {
		var got []Event
		after := uint64(0)
		for pages := 0; ; pages++ {
			if pages > len(all)+1 {
				t.Fatalf("limit %d: paging does not end", limit)
			}
			page := f.EventsAfter(after, limit)
			if len(page) > limit {
				t.Fatalf("limit %d: page of %d", limit, len(page))
			}
			if len(page) == 0 {
				break
			}
			got = append(got, page...)
			after = page[len(page)-1].Index
		}
		if !reflect.DeepEqual(got, all) {
			t.Fatalf("limit %d: paged %+v, want %+v", limit, got, all)
		}
	}

	cases := []struct {
		after uint64
		limit int
		want  []Event
	}{
		{0, 100, all},
		{1, 100, all},
		{2, 100, all[1:]},
		{4, 2, all[2:4]},   // between events
		{5, 3, all[3:6]},   // at an event
		{20, 100, all[7:]}, // between events
		{27, 1, all[9:]},
		{28, 100, nil}, // the last event
		{29, 100, nil},
		{1 << 40, 100, nil},
		{0, 0, nil},
		{0, -1, nil},
		{5, -100, nil},
	}
	for _, tc := range cases {
		got := f.EventsAfter(tc.after, tc.limit)
		if !reflect.DeepEqual(nilIfEmpty(got), nilIfEmpty(tc.want)) {
			t.Errorf("EventsAfter(%d, %d) = %+v, want %+v", tc.after, tc.limit, got, tc.want)
		}
		_, held, pending := f.Outbox(tc.after)
		wantPending := 0
		for _, e := range all {
			if e.Index > tc.after {
				wantPending++
			}
		}
		if held != len(all) || pending != wantPending {
			t.Errorf("Outbox(%d) = held %d pending %d, want %d %d", tc.after, held, pending, len(all), wantPending)
		}
	}

	// The page is a copy: changing it does not change the outbox.
	page := f.EventsAfter(0, 3)
	page[0].TaskID = "changed"
	page[1] = Event{}
	if got := f.EventsAfter(0, 100); !reflect.DeepEqual(got, all) {
		t.Fatalf("changing a page changed the outbox: %+v", got)
	}
	// Appending to a page does not write into the outbox either.
	page = f.EventsAfter(0, 2)
	_ = append(page, Event{Index: 999})
	if got := f.EventsAfter(0, 100); !reflect.DeepEqual(got, all) {
		t.Fatalf("appending to a page changed the outbox: %+v", got)
	}
}

func TestTrimOutbox(t *testing.T) {
	f := NewFSM("c")
	all := eventsAt(t, f, 10, 1, 3, 5, 7, 9) // applied 10

	trim := func(index, upTo uint64) {
		t.Helper()
		if r := applyTerm(t, f, index, 1, trimCmd(upTo)); r != (Result{Index: index}) {
			t.Fatalf("trim %d at %d: %+v", upTo, index, r)
		}
		if f.AppliedIndex() != index {
			t.Fatalf("AppliedIndex %d after trim at %d", f.AppliedIndex(), index)
		}
	}
	outbox := func(after uint64, published uint64, held, pending int) {
		t.Helper()
		p, h, n := f.Outbox(after)
		if p != published || h != held || n != pending {
			t.Fatalf("Outbox(%d) = %d, %d, %d; want %d, %d, %d", after, p, h, n, published, held, pending)
		}
	}

	outbox(0, 0, 5, 5)
	outbox(5, 0, 5, 2)

	trim(11, 4) // between events: drops 1 and 3
	checkOutbox(t, f, 4, all[2:])
	outbox(0, 4, 3, 3)
	outbox(4, 4, 3, 3)
	outbox(5, 4, 3, 2)
	outbox(9, 4, 3, 0)
	if got := f.EventsAfter(0, 10); !reflect.DeepEqual(got, all[2:]) {
		t.Fatalf("EventsAfter(0) after trim: %+v", got)
	}

	// Lower and equal watermarks later are ignored.
	trim(12, 2)
	checkOutbox(t, f, 4, all[2:])
	trim(13, 0)
	checkOutbox(t, f, 4, all[2:])
	trim(14, 4)
	checkOutbox(t, f, 4, all[2:])

	trim(15, 5) // exactly an event
	checkOutbox(t, f, 5, all[3:])
	trim(16, 3) // lower again: the trimmed events do not come back
	checkOutbox(t, f, 5, all[3:])

	// New events keep coming after trims.
	ev17 := eventsAt(t, f, 17, 17)
	checkOutbox(t, f, 5, append(slices.Clone(all[3:]), ev17...))

	trim(18, 17) // everything
	checkOutbox(t, f, 17, nil)
	outbox(0, 17, 0, 0)
	if got := f.EventsAfter(0, 10); len(got) != 0 {
		t.Fatalf("EventsAfter after a full trim: %+v", got)
	}
	trim(19, 9)
	checkOutbox(t, f, 17, nil)

	// Trims are not remembered by the dedup table and change no task.
	if f.DedupLen() != 6 || f.NumTasks() != 6 {
		t.Fatalf("DedupLen %d NumTasks %d", f.DedupLen(), f.NumTasks())
	}

	// A watermark above the last event (but, as the publisher sends it,
	// below the trim's own index): later events are kept.
	trim(20, 19)
	checkOutbox(t, f, 19, nil)
	later := eventsAt(t, f, 30, 24, 26, 30)
	checkOutbox(t, f, 19, later)
	trim(31, 26)
	checkOutbox(t, f, 26, later[2:])
}

// buildOutboxFSM is buildFSM with trims and events of later terms.
func buildOutboxFSM(t testing.TB, cluster string) *FSM {
	f := buildFSM(t, cluster) // events at 1, 2, 3, 5, 9 (term 1); applied 10
	eps := submitCmd("cC", "r1", "epsilon")
	eps.Task.Stateful, eps.Task.StandbyReplicas = true, 3
	applyTerm(t, f, 11, 2, trimCmd(2))
	applyTerm(t, f, 12, 2, eps)
	applyTerm(t, f, 13, 2, trimCmd(1)) // ignored
	applyTerm(t, f, 14, 3, deleteCmd("cC", "r2", "gamma"))
	return f
}

// checkOutboxBuiltState checks buildOutboxFSM's state, spelled out.
func checkOutboxBuiltState(t *testing.T, f *FSM) {
	t.Helper()
	alpha := pendingTask("alpha", 1)
	alpha.Stateful, alpha.StandbyReplicas = true, 2
	beta := pendingTask("beta", 2)
	gamma := pendingTask("gamma", 3)
	gamma.StandbyReplicas = 1
	delta := pendingTask("delta", 9)
	epsilon := pendingTask("epsilon", 12)
	epsilon.Stateful, epsilon.StandbyReplicas = true, 3
	want := fsmState{
		Tasks: []Task{alpha, delta, epsilon},
		Dedup: []dedupRecord{
			{"cA", "r1", Result{Index: 1, Task: alpha}},
			{"cA", "r2", Result{Index: 2, Task: beta}},
			{"cB", "r1", Result{Index: 3, Task: gamma}},
			{"cB", "r2", Result{Index: 4, Code: CodeAlreadyExists, Task: alpha}},
			{"cA", "r3", Result{Index: 5, Task: beta}},
			{"cA", "r4", Result{Index: 6, Code: CodeNotFound, Task: Task{ID: "nope"}}},
			{"cC", "r1", Result{Index: 12, Task: epsilon}},
			{"cC", "r2", Result{Index: 14, Task: gamma}},
		},
		Applied: 14,
		Window:  1000,
		Max:     50,
	}
	if got := stateOf(t, f); !reflect.DeepEqual(got, want) {
		t.Fatalf("state:\n got %+v\nwant %+v", got, want)
	}
	checkOutbox(t, f, 2, []Event{
		{Index: 3, Term: 1, Kind: EventTaskSubmitted, TaskID: "gamma", Task: gamma},
		{Index: 5, Term: 1, Kind: EventTaskDeleted, TaskID: "beta", Task: beta},
		{Index: 9, Term: 1, Kind: EventTaskSubmitted, TaskID: "delta", Task: delta},
		{Index: 12, Term: 2, Kind: EventTaskSubmitted, TaskID: "epsilon", Task: epsilon},
		{Index: 14, Term: 3, Kind: EventTaskDeleted, TaskID: "gamma", Task: gamma},
	})
}

// checkOutboxBuiltBehaviour: after buildOutboxFSM's state, the watermark
// stays monotonic, retries dedup without events, and new events append.
func checkOutboxBuiltBehaviour(t *testing.T, f *FSM) {
	t.Helper()
	before := outboxOf(t, f)
	applyTerm(t, f, 15, 3, trimCmd(1))
	if r := applyTerm(t, f, 16, 3, deleteCmd("cC", "r2", "gamma")); r.Index != 14 {
		t.Fatalf("retried delete after restore: %+v", r)
	}
	if got := outboxOf(t, f); !reflect.DeepEqual(got, before) {
		t.Fatalf("a lower trim or a retry changed the outbox:\n%+v\n%+v", before, got)
	}
	applyTerm(t, f, 17, 4, trimCmd(9))
	applyTerm(t, f, 18, 4, submitCmd("cD", "r1", "zeta"))
	got := outboxOf(t, f)
	if got.Published != 9 || len(got.Events) != 3 || got.Events[0].Index != 12 || !reflect.DeepEqual(got.Events[2],
		Event{Index: 18, Term: 4, Kind: EventTaskSubmitted, TaskID: "zeta", Task: pendingTask("zeta", 18)}) {
		t.Fatalf("outbox after trim and submit: %+v", got)
	}
}

func TestOutboxSnapshotRoundTrip(t *testing.T) {
	src := buildOutboxFSM(t, "c1")
	checkOutboxBuiltState(t, src)
	b := persistSnapshot(t, src)
	dst := NewFSM("c1")
	if err := restoreBytes(dst, b); err != nil {
		t.Fatal(err)
	}
	checkOutboxBuiltState(t, dst)

	// Restoring replaces the outbox of an FSM that had one.
	other := NewFSM("c1")
	eventsAt(t, other, 40, 30, 31, 32)
	applyTerm(t, other, 41, 1, trimCmd(30))
	if err := restoreBytes(other, b); err != nil {
		t.Fatal(err)
	}
	checkOutboxBuiltState(t, other)

	for _, f := range []*FSM{src, dst, other} {
		checkOutboxBuiltBehaviour(t, f)
	}
	if a, b := outboxOf(t, src), outboxOf(t, dst); !reflect.DeepEqual(a, b) {
		t.Fatalf("source and restored outbox diverged:\n%+v\n%+v", a, b)
	}
	if a, b := persistSnapshot(t, src), persistSnapshot(t, dst); !bytes.Equal(a, b) {
		t.Fatal("snapshots of the source and the restored FSM differ")
	}

	// A fully trimmed outbox round-trips too (watermark kept, no events).
	empty := NewFSM("c1")
	eventsAt(t, empty, 3, 1, 2)
	applyTerm(t, empty, 4, 1, trimCmd(2))
	r := NewFSM("c1")
	if err := restoreBytes(r, persistSnapshot(t, empty)); err != nil {
		t.Fatal(err)
	}
	checkOutbox(t, r, 2, nil)
	applyTerm(t, r, 5, 1, trimCmd(1))
	checkOutbox(t, r, 2, nil)
}

// TestSnapshotGoldenV1HasEmptyOutbox: a version 1 snapshot (no outbox)
// restores with an empty outbox and a zero watermark, and the outbox works
// after it.
func TestSnapshotGoldenV1HasEmptyOutbox(t *testing.T) {
	b, err := os.ReadFile(goldenV1)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(snapshotMagic+"\x00\x00\x00\x01")) {
		t.Fatalf("%s is not a version 1 snapshot", goldenV1)
	}
	f := NewFSM("golden-cluster")
	eventsAt(t, f, 20, 11, 12) // an outbox the restore must replace
	applyTerm(t, f, 21, 1, trimCmd(11))
	if err := restoreBytes(f, b); err != nil {
		t.Fatal(err)
	}
	checkBuiltState(t, f)
	checkOutbox(t, f, 0, nil)
	applyTerm(t, f, 11, 5, submitCmd("cZ", "r1", "omega"))
	checkOutbox(t, f, 0, []Event{{Index: 11, Term: 5, Kind: EventTaskSubmitted, TaskID: "omega", Task: pendingTask("omega", 11)}})
	applyTerm(t, f, 12, 5, trimCmd(11))
	checkOutbox(t, f, 11, nil)
}

const goldenV2 = "testdata/snapshot-v2.bin"

// TestSnapshotGoldenV2 restores a snapshot written by the release that
// introduced format version 2 (the outbox). Never regenerate it to make this
// test pass. `go test -run 'GoldenV2$' -update` rewrites it (only when the
// file must be recreated; do not let -update reach TestSnapshotGoldenV1).
func TestSnapshotGoldenV2(t *testing.T) {
	f := goldenSnapshot(t, goldenV2, 2, buildOutboxFSM)
	checkOutboxBuiltState(t, f)
	checkOutboxBuiltBehaviour(t, f)
}

// randomOutboxLog is randomLog with trims (some behind the watermark) and
// terms that grow.
func randomOutboxLog(seed uint64, n int) []Entry {
	r := rand.New(rand.NewPCG(seed, 99))
	logs := randomLog(seed, n)
	term := uint64(1)
	for i := range logs {
		if r.IntN(30) == 0 {
			term++
		}
		if r.IntN(6) == 0 {
			idx := uint64(i + 1)
			logs[i] = Entry{Index: idx, Data: enc(trimCmd(r.Uint64N(idx)))}
		}
		logs[i].Term = term
	}
	return logs
}

// TestOutboxDeterministic: replicas fed the same log with trims hold the same
// outbox, applied one by one, in batches, or restored from a snapshot
// midway; and the outbox is what a model of it says.
func TestOutboxDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			logs := randomOutboxLog(seed, 800)
			newFSM := func() *FSM {
				f := NewFSM("c")
				f.SetDedupLimits(40, 12)
				return f
			}
			one, batched := newFSM(), newFSM()

			// Model: an event for every submit or delete applied OK at its
			// own index (not a dedup answer), dropped at or below the highest
			// trim so far.
			var model []Event
			var watermark uint64
			trims, events, batchEvents := 0, 0, 0
			for _, l := range logs {
				out := applyEntry(one, l)
				res, _ := out.(Result)
				c, err := DecodeCommand(l.Data)
				if l.NoCommand || err != nil {
					continue
				}
				event := func(c Command, res Result, seq uint32) {
					if res.Code == CodeOK && res.Index == l.Index {
						kind := EventTaskSubmitted
						if c.Type == CmdDeleteTask {
							kind = EventTaskDeleted
						}
						events++
						model = append(model, Event{Index: l.Index, Seq: seq, Term: l.Term, Kind: kind, TaskID: res.Task.ID, Task: res.Task})
					}
				}
				switch c.Type {
				case CmdTrimOutbox:
					trims++
					watermark = max(watermark, c.UpTo)
					model = slices.DeleteFunc(model, func(e Event) bool { return e.Index <= watermark })
				case CmdSubmitTask, CmdDeleteTask:
					event(c, res, 0)
				case CmdBatch:
					rs := out.(BatchResult)
					for i, sub := range c.Batch {
						event(sub, rs[i], uint32(i))
					}
					if len(c.Batch) > 1 && rs[1].Index == l.Index && rs[1].Code == CodeOK {
						batchEvents++
					}
				}
				if got := outboxOf(t, one); got.Published != watermark || !reflect.DeepEqual(got.Events, nilIfEmpty(model)) {
					t.Fatalf("after entry %d: outbox %+v, model watermark %d %+v", l.Index, got, watermark, model)
				}
			}
			if trims == 0 || events == 0 || batchEvents == 0 || len(model) == 0 || watermark == 0 {
				t.Fatalf("weak test log: %d trims, %d events (%d second of a batch), %d held, watermark %d", trims, events, batchEvents, len(model), watermark)
			}

			r := rand.New(rand.NewPCG(seed, 3))
			for rest := logs; len(rest) > 0; {
				n := min(1+r.IntN(40), len(rest))
				batched.ApplyBatch(rest[:n])
				rest = rest[n:]
			}

			var restored *FSM
			for _, cut := range []int{len(logs) / 3, len(logs) / 2, len(logs) - 1} {
				part := newFSM()
				for _, l := range logs[:cut] {
					applyEntry(part, l)
				}
				restored = NewFSM("c")
				if err := restoreBytes(restored, persistSnapshot(t, part)); err != nil {
					t.Fatal(err)
				}
				restored.ApplyBatch(logs[cut:])
				if a, b := outboxOf(t, one), outboxOf(t, restored); !reflect.DeepEqual(a, b) {
					t.Fatalf("restored at %d: outbox differs:\n%+v\n%+v", cut, a, b)
				}
			}
			for name, f := range map[string]*FSM{"batched": batched, "restored": restored} {
				if a, b := outboxOf(t, one), outboxOf(t, f); !reflect.DeepEqual(a, b) {
					t.Fatalf("%s outbox differs:\n%+v\n%+v", name, a, b)
				}
				if a, b := stateOf(t, one), stateOf(t, f); !reflect.DeepEqual(a, b) {
					t.Fatalf("%s state differs:\n%+v\n%+v", name, a, b)
				}
				if a, b := persistSnapshot(t, one), persistSnapshot(t, f); !bytes.Equal(a, b) {
					t.Fatalf("%s: snapshots of equal FSMs differ", name)
				}
			}
		})
	}
}

// TestBatchEntry: a CmdBatch applies its commands in order, each with its
// own result and dedup entry; its events share the entry's index and are
// numbered by position; a retry inside the batch, or of an earlier entry,
// is answered from the dedup table without an event; EventsAfter never
// returns part of an entry's events, so a watermark at its index covers
// them all.
func TestBatchEntry(t *testing.T) {
	f := NewFSM("c")
	first := applyTerm(t, f, 1, 1, submitCmd("c1", "r0", "t0"))
	b := Command{Type: CmdBatch, Batch: []Command{
		submitCmd("c1", "r1", "t1"),
		submitCmd("c2", "r1", "t2"),
		submitCmd("c1", "r0", "t0"), // retry of entry 1
		submitCmd("c1", "r1", "t1"), // retry within the batch
		deleteCmd("c3", "r7", "t0"),
		submitCmd("c3", "r8", "t2"), // exists
	}}
	out, ok := applyEntry(f, termLog(2, 3, b)).(BatchResult)
	if !ok || len(out) != len(b.Batch) {
		t.Fatalf("Apply(batch) = %+v, want a BatchResult of %d", out, len(b.Batch))
	}
	t1, t2 := pendingTask("t1", 2), pendingTask("t2", 2)
	want := BatchResult{
		{Index: 2, Task: t1},
		{Index: 2, Task: t2},
		first,
		{Index: 2, Task: t1},
		{Index: 2, Task: first.Task},
		{Index: 2, Code: CodeAlreadyExists, Task: t2},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("results:\n%+v\nwant\n%+v", out, want)
	}
	if f.DedupHits() != 2 {
		t.Errorf("dedup hits %d, want 2", f.DedupHits())
	}
	evs := []Event{
		{Index: 1, Term: 1, Kind: EventTaskSubmitted, TaskID: "t0", Task: first.Task},
		{Index: 2, Seq: 0, Term: 3, Kind: EventTaskSubmitted, TaskID: "t1", Task: t1},
		{Index: 2, Seq: 1, Term: 3, Kind: EventTaskSubmitted, TaskID: "t2", Task: t2},
		{Index: 2, Seq: 4, Term: 3, Kind: EventTaskDeleted, TaskID: "t0", Task: first.Task},
	}
	checkOutbox(t, f, 0, evs)
	applyTerm(t, f, 3, 3, submitCmd("c4", "r1", "t3"))
	evs = append(evs, Event{Index: 3, Term: 3, Kind: EventTaskSubmitted, TaskID: "t3", Task: pendingTask("t3", 3)})

	for _, tc := range []struct {
		after uint64
		limit int
		want  []Event
	}{
		{0, 1, evs[:1]},
		{0, 2, evs[:4]}, // the limit falls inside entry 2: all of it
		{1, 1, evs[1:4]},
		{1, 3, evs[1:4]},
		{1, 4, evs[1:5]},
		{2, 1, evs[4:]},
	} {
		if got := f.EventsAfter(tc.after, tc.limit); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("EventsAfter(%d, %d) = %+v, want %+v", tc.after, tc.limit, got, tc.want)
		}
	}
	applyTerm(t, f, 4, 3, trimCmd(2))
	checkOutbox(t, f, 2, evs[4:])

	// The events' numbers survive a snapshot.
	f2 := NewFSM("c")
	f = NewFSM("c")
	applyEntry(f, termLog(1, 1, submitCmd("c1", "r0", "t0")))
	applyEntry(f, termLog(2, 3, b))
	if err := restoreBytes(f2, persistSnapshot(t, f)); err != nil {
		t.Fatal(err)
	}
	checkOutbox(t, f2, 0, evs[:4])
}

// TestTrimReusesTheArray: a trim keeps the outbox's array for the appends
// that follow (no regrowth in steady state), except after a large backlog
// drains, which gives the memory back.
func TestTrimReusesTheArray(t *testing.T) {
	f := NewFSM("c")
	idx := uint64(0)
	submit := func(n int) {
		for range n {
			idx++
			id := fmt.Sprint("t", idx)
			applyTerm(t, f, idx, 1, submitCmd("c", id, id))
		}
	}
	trim := func(upTo uint64) {
		idx++
		applyTerm(t, f, idx, 1, trimCmd(upTo))
	}
	submit(100)
	before := cap(f.outbox)
	trim(90)
	if len(f.outbox) != 10 || cap(f.outbox) != before {
		t.Fatalf("after a trim: len %d cap %d, want 10 and the same array (cap %d)", len(f.outbox), cap(f.outbox), before)
	}
	submit(50)
	if cap(f.outbox) != before {
		t.Fatalf("appends after a trim regrew the array: cap %d -> %d", before, cap(f.outbox))
	}

	submit(1 << 17)
	trim(idx - 10)
	if cap(f.outbox) > 1<<10 {
		t.Fatalf("a drained backlog kept an array of %d for %d events", cap(f.outbox), len(f.outbox))
	}
	checkOutbox(t, f, idx-11, outboxOf(t, f).Events)
}
