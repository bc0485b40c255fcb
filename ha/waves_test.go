package ha

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
	if err := pollUntil(10*time.Second, func() bool { return fsm.count("after") == 1 }); err != nil {
		t.Fatal("the later command was not applied on every node")
	}
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

func pollUntil(d time.Duration, cond func() bool) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ; time.Now().Before(deadline); <-tick.C {
		if cond() {
			return nil
		}
	}
	return errors.New("timed out")
}
