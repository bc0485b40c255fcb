package raftha

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// A restart restores the newest snapshot while the log is opened, and
// raft does not restore it again; a newest snapshot damaged after it was
// written fails its check at the end of that restore, and raft restores
// the one before it over what was read, then replays the log: either way
// the node holds every task it acknowledged.
func TestRestartRestoresAtOpen(t *testing.T) {
	dir := t.TempDir()
	addr := ""
	run := func() (*Raft, *persist.Store, *state.FSM) {
		t.Helper()
		fsm := state.NewFSM("t")
		restore := func(rc io.ReadCloser, _ int64) error { return fsm.Restore(rc) }
		r, store, a := startInDir(t, dir, addr, persist.Options{RestoreSnapshot: restore}, fsm, nil)
		addr = a
		return r, store, fsm
	}
	stop := func(r *Raft, store *persist.Store) {
		t.Helper()
		if err := r.Shutdown(); err != nil {
			t.Fatal(err)
		}
		store.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, store, _ := run()
	for i := range 90 {
		if _, _, err := r.Apply(ctx, submit(fmt.Sprintf("t-%03d", i))); err != nil {
			t.Fatal(err)
		}
		if i == 29 || i == 59 {
			if _, err := r.TakeSnapshot(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop(r, store)

	r, store, fsm := run()
	if store.Restored == nil || store.RestoreErr != nil {
		t.Fatalf("intact: restored %+v (%v)", store.Restored, store.RestoreErr)
	}
	testutil.Eventually(t, 10*time.Second, "every task", func() bool { return fsm.NumTasks() == 90 })
	stop(r, store)

	// Damage the newest snapshot's state in place so that it still reads
	// as a snapshot: its last task's id changes, and only its checksum
	// tells.
	states, err := filepath.Glob(filepath.Join(dir, "snapshots", "snapshots", "*", "state.bin"))
	if err != nil || len(states) != 2 {
		t.Fatalf("state files %v, %v", states, err)
	}
	slices.Sort(states)
	newest := states[len(states)-1]
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(b, []byte("t-059"))
	if i < 0 {
		t.Fatal("no t-059 in the newest snapshot")
	}
	b[i+4] = 'Y'
	if err := os.WriteFile(newest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r, store, fsm = run()
	defer stop(r, store)
	if store.Restored != nil || store.RestoreErr == nil || !strings.Contains(store.RestoreErr.Error(), "CRC") {
		t.Fatalf("damaged: restored %+v (%v)", store.Restored, store.RestoreErr)
	}
	testutil.Eventually(t, 10*time.Second, "every task", func() bool { return fsm.NumTasks() == 90 })
	if got, _ := fsm.TasksWithPrefix("t-05Y", "", 1); len(got) != 0 {
		t.Fatalf("the damaged snapshot's task %+v survived raft's restore", got)
	}
}
