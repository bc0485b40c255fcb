package restoreheap

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestModeOf(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"always [madvise] never\n", "madvise"},
		{"[always] madvise never\n", "always"},
		{"always madvise [never]\n", "never"},
		{"always madvise never\n", ""},
		{"]madvise[\n", ""},
		{"", ""},
	} {
		path := filepath.Join(t.TempDir(), "enabled")
		if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := modeOf(path); got != tc.want {
			t.Errorf("modeOf(%q) = %q, want %q", tc.file, got, tc.want)
		}
	}
	if got := modeOf(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("a missing file reads as %q", got)
	}
}

// Prepare marks whole huge pages only, and only where the mode asks for
// it; while prepared the collector waits for the size given (or a limit
// set before, if lower), and release puts both settings back.
func TestPrepare(t *testing.T) {
	const limit = 1 << 40
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	defer debug.SetGCPercent(debug.SetGCPercent(150))

	r, release := Prepare(64 << 20)
	switch r.Mode {
	case "madvise":
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Advised == 0 || r.Advised%hugePage != 0 || r.Advised > 64<<20 {
			t.Fatalf("advised %d bytes of 64 MiB", r.Advised)
		}
	default:
		if r.Advised != 0 || r.Err != nil {
			t.Fatalf("mode %q: advised %d bytes, err %v", r.Mode, r.Advised, r.Err)
		}
	}
	if got := debug.SetMemoryLimit(-1); got <= 64<<20 || got > 64<<20+inUse() {
		t.Errorf("memory limit %d while prepared, want 64 MiB over what is in use (%d)", got, inUse())
	}
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Errorf("GC percent %d while prepared, want off", got)
	}
	release()
	if got := debug.SetMemoryLimit(-1); got != limit {
		t.Errorf("memory limit %d after release, want %d", got, limit)
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("GC percent %d after release, want 150", got)
	}

	// A lower limit set before stays.
	debug.SetMemoryLimit(32 << 20)
	_, release = Prepare(64 << 20)
	if got := debug.SetMemoryLimit(-1); got != 32<<20 {
		t.Errorf("memory limit %d while prepared under 32 MiB, want it kept", got)
	}
	release()

	// Too little to mark or to hold the collector for.
	r, release = Prepare(hugePage - 1)
	if r.Advised != 0 {
		t.Errorf("advised %d bytes of less than a huge page", r.Advised)
	}
	if got := debug.SetGCPercent(150); got != 150 {
		t.Errorf("GC percent %d for a small restore, want it kept", got)
	}
	release()
}
