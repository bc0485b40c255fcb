package localcluster

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// ExitStatus names an exit's code, or the signal that ended the process,
// and nothing while it runs.
func TestExitStatus(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sh.log")
	p, err := StartProcess("/bin/sh", log, true, "-c", "exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Wait(10 * time.Second); !ok {
		t.Fatal("sh did not exit")
	}
	if got := p.ExitStatus(); got != "exit status 3" {
		t.Errorf("exit 3: %q", got)
	}
	p, err = StartProcess("/bin/sh", log, true, "-c", "exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.ExitStatus(); got != "" {
		t.Errorf("running: %q", got)
	}
	if _, err := p.Kill(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got, want := p.ExitStatus(), "signal: "+syscall.SIGKILL.String(); got != want {
		t.Errorf("killed: %q, want %q", got, want)
	}
}
