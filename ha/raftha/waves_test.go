package raftha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/state"
)

// echoFSM answers each command with its own bytes and remembers them.
type echoFSM struct {
	mu   sync.Mutex
	seen map[string]int
}

func (f *echoFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.Type == raft.LogCommand {
		f.seen[string(l.Data)]++
	}
	return string(l.Data)
}

func (f *echoFSM) count(cmd string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[cmd]
}

func (f *echoFSM) Snapshot() (raft.FSMSnapshot, error) { return nopSnapshot{}, nil }
func (f *echoFSM) Restore(rc io.ReadCloser) error      { return rc.Close() }

type nopSnapshot struct{}

func (nopSnapshot) Persist(s raft.SnapshotSink) error { return s.Close() }
func (nopSnapshot) Release()                          {}

func startEchoCluster(t *testing.T) (*Raft, *echoFSM, func()) {
	var mu sync.Mutex
	fsms := map[*echoFSM]bool{}
	leader, stop := startClusterFSM(t, 3, func() raft.FSM {
		f := &echoFSM{seen: map[string]int{}}
		mu.Lock()
		fsms[f] = true
		mu.Unlock()
		return f
	})
	// Any node's FSM will do: each applies the whole log in order.
	var any *echoFSM
	for f := range fsms {
		any = f
	}
	return leader, any, stop
}

// Every caller gets the answer to its own command, each at its own index,
// with 64 callers at once.
func TestWavesAnswerEachCaller(t *testing.T) {
	leader, _, stop := startEchoCluster(t)
	defer stop()
	var mu sync.Mutex
	indexes := map[uint64]string{}
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := range 20 {
				cmd := fmt.Sprintf("w%d-%d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				v, idx, err := leader.Apply(ctx, []byte(cmd))
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if v != cmd {
					t.Errorf("%s got the answer %v", cmd, v)
				}
				mu.Lock()
				if prev, dup := indexes[idx]; dup {
					t.Errorf("%s and %s both at index %d", prev, cmd, idx)
				}
				indexes[idx] = cmd
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(indexes) != 64*20 {
		t.Errorf("%d distinct indexes, want %d", len(indexes), 64*20)
	}
}

// A command whose caller has given up before its wave starts is never
// applied; a later command is.
func TestWavesSkipCallersThatGaveUp(t *testing.T) {
	leader, fsm, stop := startEchoCluster(t)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 50 {
		if _, _, err := leader.Apply(ctx, []byte(fmt.Sprintf("gave-up-%d", i))); !errors.Is(err, context.Canceled) {
			t.Fatalf("apply with a cancelled context: %v", err)
		}
	}
	ok, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if _, _, err := leader.Apply(ok, []byte("after")); err != nil {
		t.Fatal(err)
	}
	// Every node applies in log order; wait until this one has "after".
	testutil.Eventually(t, 10*time.Second, "the later command applied on every node", func() bool {
		return fsm.count("after") == 1
	})
	for i := range 50 {
		if n := fsm.count(fmt.Sprintf("gave-up-%d", i)); n != 0 {
			t.Errorf("gave-up-%d applied %d times", i, n)
		}
	}
}

// After Shutdown, Apply answers at once.
func TestWavesAfterShutdown(t *testing.T) {
	leader, _, stop := startEchoCluster(t)
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, _, err := leader.Apply(ctx, []byte("late")); err == nil {
		t.Fatal("apply after shutdown succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("apply after shutdown took %v", d)
	}
}

// fakeRaft commits every command a fixed time after Apply and records
// when each Apply came, so that a test inside a synctest bubble sees the
// waves exactly.
type fakeRaft struct {
	commit time.Duration
	mu     sync.Mutex
	calls  []time.Time
}

type fakeFuture struct {
	done chan struct{}
	idx  uint64
}

func (f *fakeFuture) Error() error  { <-f.done; return nil }
func (f *fakeFuture) Index() uint64 { <-f.done; return f.idx }
func (f *fakeFuture) Response() any { <-f.done; return f.idx }

func (r *fakeRaft) Apply(cmd []byte, timeout time.Duration) raft.ApplyFuture {
	r.mu.Lock()
	r.calls = append(r.calls, time.Now())
	f := &fakeFuture{done: make(chan struct{}), idx: uint64(len(r.calls))}
	r.mu.Unlock()
	go func() {
		time.Sleep(r.commit) // fake time: the commit takes this long
		close(f.done)
	}()
	return f
}

// waveSizes groups the Apply calls by the instant they came: in a bubble,
// one wave's calls all come at the same instant.
func (r *fakeRaft) waveSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sizes []int
	for i, at := range r.calls {
		if i == 0 || !at.Equal(r.calls[i-1]) {
			sizes = append(sizes, 0)
		}
		sizes[len(sizes)-1]++
	}
	return sizes
}

// inBubble runs test in a synctest bubble with waves over a fakeRaft that
// commits in 4 ms.
func inBubble(t *testing.T, test func(t *testing.T, r *fakeRaft, w *waves)) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeRaft{commit: 4 * time.Millisecond}
		w := newWaves(r)
		defer w.close()
		test(t, r, w)
	})
}

func timedApply(t *testing.T, w *waves) time.Duration {
	start := time.Now()
	if _, _, err := w.apply(context.Background(), []byte("x")); err != nil {
		t.Error(err)
	}
	return time.Since(start)
}

// Callers that write again soon after their answer, as API clients do,
// end up in one wave together instead of two alternating half-size waves.
func TestWavesGatherReturningCallers(t *testing.T) {
	inBubble(t, func(t *testing.T, r *fakeRaft, w *waves) {
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 40 {
					timedApply(t, w)
					// Fake time: the answer's way back to the client and
					// its next request.
					time.Sleep(200 * time.Microsecond)
				}
			})
		}
		wg.Wait()
		// The first wave may start with the first caller alone; in the last
		// the caller that started first has already finished.
		sizes := r.waveSizes()
		for i := 1; i < len(sizes)-1; i++ {
			if sizes[i] != 16 {
				t.Fatalf("wave %d has %d commands, want all 16 callers (sizes %v)", i, sizes[i], sizes)
			}
		}
		r.mu.Lock()
		got := len(r.calls)
		r.mu.Unlock()
		if got != 16*40 {
			t.Errorf("%d commands applied, want %d", got, 16*40)
		}
	})
}

// A caller alone never waits for company.
func TestWavesLoneCallerDoesNotWait(t *testing.T) {
	inBubble(t, func(t *testing.T, r *fakeRaft, w *waves) {
		for i := range 20 {
			if d := timedApply(t, w); d != r.commit {
				t.Fatalf("write %d took %v, want the commit's %v", i, d, r.commit)
			}
			time.Sleep(time.Millisecond) // fake time: the caller's pause between writes
		}
	})
}

// When most callers of a wave do not come back, the next wave waits a
// quarter of a wave for them once, and the wave after that not at all.
func TestWavesCallersThatLeave(t *testing.T) {
	inBubble(t, func(t *testing.T, r *fakeRaft, w *waves) {
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() { timedApply(t, w) })
		}
		wg.Wait()
		if d := timedApply(t, w); d > r.commit+r.commit/4 {
			t.Errorf("first write after the others left took %v, want at most %v", d, r.commit+r.commit/4)
		}
		for i := range 10 {
			if d := timedApply(t, w); d != r.commit {
				t.Fatalf("write %d took %v, want the commit's %v", i, d, r.commit)
			}
		}
	})
}

// With batches on, a wave's submits share one entry: every caller gets its
// own command's result, at the entry's index; every node holds every task
// once, and the events of an entry are numbered 0, 1, … by position. A
// non-batchable command in the same flow keeps an entry of its own.
func TestWavesBatchEntries(t *testing.T) {
	var mu sync.Mutex
	var fsms []*state.FSM
	leader, stop := startClusterFSM(t, 3, func() raft.FSM {
		f := state.NewFSM("c")
		mu.Lock()
		fsms = append(fsms, f)
		mu.Unlock()
		return NewFSM(f)
	})
	defer stop()
	leader.SetBatches(true)

	const writers, each = 32, 15
	var imu sync.Mutex
	perIndex := map[uint64]int{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("t%d-%d", w, i)
				cmd := (&state.Command{Type: state.CmdSubmitTask, ClientID: "c", RequestID: id, Task: state.Task{ID: id}}).Encode()
				if i == each/2 && w%8 == 0 {
					cmd = (&state.Command{Type: state.CmdNoop}).Encode()
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				v, idx, err := leader.Apply(ctx, cmd)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				r, ok := v.(state.Result)
				switch {
				case !ok:
					t.Errorf("%s: answer %T %+v, want a state.Result", id, v, v)
				case r.Code != state.CodeOK || r.Index != idx:
					t.Errorf("%s: result %+v at index %d", id, r, idx)
				case r.Task.ID != "" && r.Task.ID != id:
					t.Errorf("%s got the result of %s", id, r.Task.ID)
				}
				imu.Lock()
				perIndex[idx]++
				imu.Unlock()
			}
		})
	}
	wg.Wait()
	shared := 0
	for _, n := range perIndex {
		if n > 1 {
			shared += n
		}
	}
	t.Logf("%d writes in %d entries; %d of them shared an entry", writers*each, len(perIndex), shared)
	if shared < writers*each/2 {
		t.Errorf("only %d of %d writes shared an entry with others: batches not used", shared, writers*each)
	}

	want := writers*each - writers/8
	func() {
		defer func() {
			if t.Failed() {
				for _, f := range fsms {
					ts, _ := f.AllTasks()
					t.Logf("node: %d tasks, applied %d", len(ts), f.AppliedIndex())
				}
			}
		}()
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("every node holds the %d tasks", want), func() bool {
			for _, f := range fsms {
				if _, v := f.AllTasks(); f.AppliedIndex() < leader.AppliedIndex() || v != uint64(want) {
					return false
				}
			}
			return true
		})
	}()
	for _, f := range fsms {
		evs := f.EventsAfter(0, 1<<20)
		if len(evs) != want {
			t.Fatalf("%d events, want %d", len(evs), want)
		}
		for i, e := range evs {
			first := i == 0 || evs[i-1].Index != e.Index
			if first && e.Seq != 0 || !first && e.Seq != evs[i-1].Seq+1 {
				t.Fatalf("event %d: %d.%d after %+v", i, e.Index, e.Seq, evs[max(i-1, 0)])
			}
		}
	}
}
