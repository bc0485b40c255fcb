package fence_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/state"
)

func newDiscarder(t *testing.T, n *node) *fence.Discarder {
	d := fence.NewDiscarder(n.fsm, n.hooks("discarder").Apply, 10*time.Millisecond, zerolog.New(zerolog.NewTestWriter(t)))
	t.Cleanup(d.Revoke)
	return d
}

func TestDiscarderTrimsEverything(t *testing.T) {
	n := newNode(t, 1)
	n.submit("a", "b")
	d := newDiscarder(t, n)
	if epoch, lag, st := d.Status(); epoch != 0 || lag != 2 || st != fence.StateDisabled {
		t.Fatalf("Status %d %d %q", epoch, lag, st)
	}
	if err := d.Establish(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	for _, more := range [][]string{nil, {"c"}, {"d", "e"}} {
		n.submit(more...)
		last := n.allEvents()[len(n.allEvents())-1].Index
		eventually(t, 5*time.Second, "outbox not trimmed", func() bool {
			published, held, _ := n.fsm.Outbox(0)
			return published == last && held == 0
		})
	}
	if _, lag, _ := d.Status(); lag != 0 {
		t.Fatalf("lag %d after trimming", lag)
	}
	before := len(n.trims())
	d.Revoke()
	d.Revoke()
	n.apply(state.Command{Type: state.CmdSubmitTask, ClientID: "cl", RequestID: "z", Task: state.Task{ID: "z"}})
	if _, held, _ := n.fsm.Outbox(0); held != 1 || len(n.trims()) != before {
		t.Fatalf("trimmed after Revoke: held %d, trims %d then %d", held, before, len(n.trims()))
	}
}

// TestDiscarderEstablishTwice: a second Establish without Revoke must not
// leave the first trimming goroutine running after Revoke.
func TestDiscarderEstablishTwice(t *testing.T) {
	before := runtime.NumGoroutine()
	n := newNode(t, 1)
	d := newDiscarder(t, n)
	_ = d.Establish(context.Background(), 1)
	_ = d.Establish(context.Background(), 1) // refused or replaces: either way one goroutine
	d.Revoke()
	checkNoLeak(t, before)
}
