package fence_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/fence"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/state"
)

func newDiscarder(t *testing.T, n *node) *fence.Discarder {
	d := fence.NewDiscarder(n.fsm, n.hooks("discarder").Apply, 10*time.Millisecond, zerolog.New(zerolog.NewTestWriter(t)))
	return d
}

func TestDiscarderTrimsEverything(t *testing.T) {
	n := newNode(t, 1)
	n.submit("a", "b")
	d := newDiscarder(t, n)
	if epoch, lag, st := d.Status(); epoch != 0 || lag != 2 || st != fence.StateDisabled {
		t.Fatalf("Status %d %d %q", epoch, lag, st)
	}
	term := establish(t, d, 1)
	for _, more := range [][]string{nil, {"c"}, {"d", "e"}} {
		n.submit(more...)
		last := n.allEvents()[len(n.allEvents())-1].Index
		testutil.Eventually(t, 5*time.Second, "outbox not trimmed", func() bool {
			published, held, _ := n.fsm.Outbox(0)
			return published == last && held == 0
		})
	}
	if _, lag, _ := d.Status(); lag != 0 {
		t.Fatalf("lag %d after trimming", lag)
	}
	before := len(n.trims())
	term.revoke()
	term.revoke()
	n.apply(state.Command{Type: state.CmdSubmitTask, ClientID: "cl", RequestID: "z", Task: state.Task{ID: "z"}})
	if _, held, _ := n.fsm.Outbox(0); held != 1 || len(n.trims()) != before {
		t.Fatalf("trimmed after the term: held %d, trims %d then %d", held, before, len(n.trims()))
	}
}

// TestDiscarderTermsLeaveNoGoroutine: each term's Run returns when its
// context ends; nothing outlives it.
func TestDiscarderTermsLeaveNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	n := newNode(t, 1)
	d := newDiscarder(t, n)
	establish(t, d, 1).revoke()
	establish(t, d, 2).revoke()
	checkNoLeak(t, before)
}
