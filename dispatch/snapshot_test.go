package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/backup"
	"github.com/xce/xce/client"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
)

// SaveSnapshot streams, through the primary, a snapshot of every write
// applied before the call, in chunks the client reassembles into a file
// that verifies and decodes to the same state; a standby's hint leads the
// client to the primary.
func TestSaveSnapshot(t *testing.T) {
	ctx := ctxT(t)
	leader := startServer(t, newFakeNode("n2", primary), netio.DefaultLimits())
	standby := startServer(t, newFakeNode("n1", ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: leader.addr}), netio.DefaultLimits())
	// Enough tasks for a snapshot of several chunks.
	const n = 15000
	for i := range n {
		leader.node.seed(t, fmt.Sprintf("task-%05d-%s", i, "padding-padding-padding-padding"))
	}
	c, err := client.New([]string{standby.addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.OpenSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Format != backup.Version || s.ClusterID != "local" || s.Index != n || s.Term != 5 {
		t.Errorf("header: format %d cluster %q index %d term %d", s.Format, s.ClusterID, s.Index, s.Term)
	}
	if got := leader.node.barriers.Load(); got != 1 {
		t.Errorf("%d read barriers, want 1", got)
	}
	path := filepath.Join(t.TempDir(), "b.xce")
	w, err := backup.Create(path, s.ClusterID, s.Index, s.Term)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, s); err != nil {
		t.Fatal(err)
	}
	size, sha := s.Trailer()
	if size <= 2<<20 {
		t.Errorf("snapshot of %d bytes: the test wants several chunks", size)
	}
	h, err := w.Commit(size, sha)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := backup.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Tasks != n || sum.AppliedIndex != n || sum.Index != h.Index || !sum.ChecksumOK {
		t.Errorf("inspect: %+v", sum)
	}
	if standby.node.barriers.Load() != 0 {
		t.Error("the standby took the snapshot")
	}
}

// A snapshot is refused without write quorum, and a failed barrier ends it
// before any data.
func TestSaveSnapshotRefused(t *testing.T) {
	ctx := ctxT(t)
	node := newFakeNode("n1", ha.View{Role: ha.RolePrimary, Term: 5, LeaderID: "n1", WriteQuorum: false})
	ts := startServer(t, node, netio.DefaultLimits())
	c, err := client.New([]string{ts.addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.OpenSnapshot(short); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("snapshot without write quorum: %v, want NOT_READY", err)
	}
	if node.barriers.Load() != 0 {
		t.Error("a refused call reached the barrier")
	}

	node.setView(primary)
	node.failBarrier(errors.New("leadership lost"))
	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.OpenSnapshot(short); !errors.Is(err, client.ErrNotReady) {
		t.Fatalf("snapshot after a failed barrier: %v, want NOT_READY", err)
	}
	if node.barriers.Load() == 0 {
		t.Error("no barrier was asked for")
	}
}

// TakeSnapshot reaches the primary through a standby's hint and answers
// the snapshot the backend took; nothing new to snapshot is a
// FailedPrecondition the client does not retry; without write quorum the
// call is NOT_READY and never reaches the backend.
func TestTakeSnapshot(t *testing.T) {
	ctx := ctxT(t)
	lnode := newFakeNode("n2", primary)
	lnode.cluster.snap = ha.SnapshotInfo{Index: 42, Bytes: 4096}
	leader := startServer(t, lnode, netio.DefaultLimits())
	snode := newFakeNode("n1", ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n2", LeaderAddr: leader.addr})
	standby := startServer(t, snode, netio.DefaultLimits())
	c, err := client.New([]string{standby.addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Index != 42 || got.Bytes != 4096 || got.Seconds < 0 {
		t.Errorf("taken %+v, want index 42, 4096 bytes", got)
	}
	if snode.snapshotsTaken() != 0 || lnode.snapshotsTaken() != 1 {
		t.Errorf("snapshots taken: standby %d, primary %d; want 0 and 1", snode.snapshotsTaken(), lnode.snapshotsTaken())
	}

	lnode.cluster.mu.Lock()
	lnode.cluster.snapErr = fmt.Errorf("%w: raft says so", ha.ErrNothingToSnapshot)
	lnode.cluster.mu.Unlock()
	if _, err := c.TakeSnapshot(ctx); err == nil || !strings.Contains(err.Error(), "nothing new to snapshot") {
		t.Errorf("nothing new: %v, want the backend's refusal", err)
	}
	if n := lnode.snapshotsTaken(); n != 2 {
		t.Errorf("%d calls reached the backend, want 2 (no retry of a refusal)", n)
	}

	lnode.setView(ha.View{Role: ha.RolePrimary, Term: 5, LeaderID: "n2", WriteQuorum: false})
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.TakeSnapshot(short); !errors.Is(err, client.ErrNotReady) {
		t.Errorf("without write quorum: %v, want NOT_READY", err)
	}
	if n := lnode.snapshotsTaken(); n != 2 {
		t.Errorf("%d calls reached the backend, want 2", n)
	}
}
