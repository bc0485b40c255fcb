package persist

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xce/xce/internal/testutil"
)

// A new data dir is 0700 and the files the store writes 0600; an existing
// dir with a wider mode is used, with a warning (docs/operations.md,
// "Files and permissions").
func TestDataDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := openT(t, dir, testOpts)
	s.Close()
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("data dir mode %#o, want 0700", m)
	}
	err := filepath.WalkDir(filepath.Join(dir, logDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{lockFile, metaFile} {
		if m := mode(t, filepath.Join(dir, name)); m != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", name, m)
		}
	}

	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o700, false}, {0o750, true}, {0o755, true}} {
		if err := os.Chmod(dir, tc.mode); err != nil {
			t.Fatal(err)
		}
		var logs testutil.SyncBuffer
		o := testOpts
		o.Logger = bufLogger(&logs)
		s := openT(t, dir, o)
		s.Close()
		warned := strings.Contains(logs.String(), "lets other users read it; chmod 700 it")
		if warned != tc.warn {
			t.Errorf("existing dir %#o: warned %v, want %v\n%s", tc.mode, warned, tc.warn, logs.String())
		}
		if m := mode(t, dir); m != tc.mode {
			t.Errorf("existing dir %#o: changed to %#o", tc.mode, m)
		}
	}
}

func mode(t *testing.T, p string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
