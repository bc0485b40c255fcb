package bench

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestCheckReads: a read is linearizable when it reflects every write
// acknowledged before it began, whichever client made it; a read that
// misses one, or sees a write that was never made, is a violation.
func TestCheckReads(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	op := func(client int, kind Kind, out Outcome, call, ret int) Op {
		return Op{Client: client, Kind: kind, TaskID: "a", Outcome: out, Call: at(call), Return: at(ret)}
	}
	for _, tc := range []struct {
		name string
		ops  []Op
		want bool
	}{
		{name: "another client's acknowledged write is seen",
			ops: []Op{op(0, Submit, OK, 0, 10), op(1, Get, OK, 20, 30)}, want: true},
		{name: "a read that misses an acknowledged write",
			ops: []Op{op(0, Submit, OK, 0, 10), op(1, Get, NotFound, 20, 30)}, want: false},
		{name: "a read concurrent with the write may miss it",
			ops: []Op{op(0, Submit, OK, 0, 30), op(1, Get, NotFound, 10, 20)}, want: true},
		{name: "once seen, a write stays seen",
			ops: []Op{op(0, Submit, OK, 0, 100), op(1, Get, OK, 10, 20), op(2, Get, NotFound, 30, 40)}, want: false},
		{name: "a read of a write never made",
			ops: []Op{op(1, Get, OK, 10, 20)}, want: false},
		{name: "a write of unknown outcome may be seen or not",
			ops: []Op{op(0, Submit, Unknown, 0, 0), op(1, Get, OK, 20, 30)}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			final := map[string]bool{"a": true}
			v, err := Check(tc.ops, final, 10*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			if v.Linearizable != tc.want {
				t.Errorf("linearizable = %v, want %v (%s)", v.Linearizable, tc.want, v.CheckResult)
			}
		})
	}
}

// TestPacer: a pacer hands out about rate tokens a second and stops with
// its context.
func TestPacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		pace := pacer(ctx, &wg, 500)
		got := 0
		deadline := time.After(2 * time.Second)
	loop:
		for {
			select {
			case <-pace:
				got++
			case <-deadline:
				break loop
			}
		}
		cancel()
		wg.Wait()
		if got < 990 || got > 1000+pacerBurst {
			t.Fatalf("%d tokens in 2s at 500/s", got)
		}
	})
}
