package upgrade

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
)

// The upgrade status file is readable by its owner only, whatever a
// leftover status or temporary file had, and reads back.
func TestStatusFileIsPrivate(t *testing.T) {
	dir := t.TempDir()
	pid := filepath.Join(dir, "xce.pid")
	status := StatusPath(pid)
	for _, p := range []string{status, status + ".tmp"} {
		if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u := &Upgrader{opts: Options{PidFile: pid, Log: zerolog.Nop()}}
	for _, state := range []string{"started", "failed"} {
		u.writeStatus(Status{State: state, Error: "boom"})
		fi, err := os.Stat(status)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s: status file mode %#o, want 0600", state, m)
		}
		s, ok := ReadStatus(pid)
		if !ok || s.State != state || s.Pid != os.Getpid() || s.Error != "boom" {
			t.Errorf("%s: read back %+v %v", state, s, ok)
		}
	}
	if _, err := os.Stat(status + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}
}

// The pid file is written at Ready readable and writable by its owner
// only (tableflip writes a temporary file, 0600, and renames it).
func TestPidFileIsPrivate(t *testing.T) {
	pid := filepath.Join(t.TempDir(), "xce.pid")
	u, err := New(Options{PidFile: pid, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Ready()
	fi, err := os.Stat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("pid file mode %#o, want 0600", m)
	}
	if got := ReadPid(pid); got != os.Getpid() {
		t.Errorf("pid file names %d, want %d", got, os.Getpid())
	}
}
