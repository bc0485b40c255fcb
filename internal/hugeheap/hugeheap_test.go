package hugeheap

import (
	"os"
	"path/filepath"
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

// Advise marks whole huge pages only, and nothing where the mode does
// not ask for it.
func TestAdvise(t *testing.T) {
	r := Advise(64 << 20)
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
	if r := Advise(hugePage - 1); r.Advised != 0 {
		t.Fatalf("advised %d bytes of less than a huge page", r.Advised)
	}
}
