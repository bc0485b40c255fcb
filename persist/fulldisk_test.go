package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/persist/raftlog"
)

// mountTmpfs mounts a tmpfs of size bytes on a new dir, unmounted at the
// end of the test, or skips the test where that needs privileges it lacks.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full disk needs a small file system: run as root to mount a tmpfs (mount -t tmpfs -o size=" + size + ")")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("mount -t tmpfs -o size=%s on %s: %v (needs CAP_SYS_ADMIN)", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10} {
		b := make([]byte, chunk)
		for {
			if _, err := f.Write(b); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				break
			}
		}
	}
}

// TestFullDisk: on a full disk StoreLogs fails with ENOSPC, not stickily;
// Health reports it recoverable; once space is freed the probe makes the
// Store healthy without a reopen, writes go on, and a reopen has every
// acknowledged entry.
func TestFullDisk(t *testing.T) {
	mnt := mountTmpfs(t, "40m")
	dir := filepath.Join(mnt, "data")
	logs := &testutil.SyncBuffer{}
	opts := testOpts
	opts.Logger = bufLogger(logs)
	opts.ProbeInterval = 10 * time.Millisecond
	s := openT(t, dir, opts)
	defer func() { s.Close() }()
	setTerm(t, s, 1)

	data := make([]byte, 256<<10)
	entry := func(i uint64) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(data[:0:0], "%d%s", i, data)}
	}
	var acked uint64
	store := func() error {
		err := s.Logs.StoreLog(entry(acked + 1))
		if err == nil {
			acked++
		}
		return err
	}
	// Most of the first segment.
	for acked < 60 {
		if err := store(); err != nil {
			t.Fatal(err)
		}
	}
	changed := s.HealthChanged()
	fill(t, filepath.Join(mnt, "filler"))

	// The rest of the preallocated segment takes entries; the next segment
	// does not fit.
	var err error
	for i := 0; i < 40 && err == nil; i++ {
		err = store()
	}
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, raftlog.ErrFailed) {
		t.Fatalf("StoreLog on a full disk: %v, want ENOSPC, not sticky", err)
	}
	t.Logf("full after %d entries: %v", acked, err)
	if h := s.Health(); h.Err == nil || !h.Recoverable || !closed(changed) {
		t.Fatalf("Health on a full disk: %+v (changed %v)", h, closed(changed))
	}
	if err := store(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("retry on a full disk: %v", err)
	}
	s.probe() // fails: the disk is still full
	if h := s.Health(); h.Err == nil {
		t.Fatal("a probe of a full disk made it healthy")
	}

	changed = s.HealthChanged()
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("not healthy 10s after space was freed: %+v", s.Health())
	}
	if h := s.Health(); h.Err != nil {
		t.Fatalf("Health after space was freed: %+v", h)
	}
	for want := acked + 10; acked < want; {
		if err := store(); err != nil {
			t.Fatalf("StoreLog after space was freed: %v", err)
		}
	}

	// Again, with the disk full when a new segment is due: fill the
	// current one.
	newest := func() int64 {
		m, _ := filepath.Glob(filepath.Join(dir, "raft-log", "*.log"))
		fi, err := os.Stat(m[len(m)-1])
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	for newest() <= raftlog.DefaultSegmentSize {
		if err := store(); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, filepath.Join(mnt, "filler"))
	err = store()
	if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, raftlog.ErrFailed) || !strings.Contains(err.Error(), "segment") {
		t.Fatalf("StoreLog needing a new segment on a full disk: %v, want ENOSPC creating the segment, not sticky", err)
	}
	t.Logf("full again after %d entries: %v", acked, err)
	if m, _ := filepath.Glob(filepath.Join(dir, "raft-log", "*.tmp")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}
	changed = s.HealthChanged()
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	s.probe() // not room for a segment yet
	if h := s.Health(); h.Err == nil {
		t.Fatal("healthy without room for a segment")
	}
	// Compaction frees the first segment.
	if err := s.Logs.DeleteRange(1, 64); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatalf("not healthy 10s after space was freed: %+v", s.Health())
	}
	for want := acked + 3; acked < want; {
		if err := store(); err != nil {
			t.Fatalf("StoreLog after space was freed: %v", err)
		}
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if strings.Count(out, "storage failing") != 2 || strings.Count(out, "storage recovered") != 2 || !strings.Contains(out, "recovers_by_itself=true") {
		t.Fatalf("want two failing and two recovered lines:\n%s", out)
	}

	s = openT(t, dir, testOpts)
	first, _ := s.Logs.FirstIndex()
	last, _ := s.Logs.LastIndex()
	if first > 65 || last != acked {
		t.Fatalf("reopened log %d..%d, want up to 65..%d", first, last, acked)
	}
	for i := first; i <= acked; i++ {
		var l raft.Log
		if err := s.Logs.GetLog(i, &l); err != nil || string(l.Data) != string(entry(i).Data) {
			t.Fatalf("entry %d after reopen: %v", i, err)
		}
	}
}
