package backup_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xce/xce/backup"
	"github.com/xce/xce/state"
)

// fsmWith returns a state machine of cluster id holding n tasks, applied
// at indexes 1..n.
func fsmWith(t testing.TB, id string, n int) *state.FSM {
	t.Helper()
	f := state.NewFSM(id)
	for i := 1; i <= n; i++ {
		c := state.Command{Type: state.CmdSubmitTask, Task: state.Task{ID: "t" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)}}
		if r := f.Apply(uint64(i), 1, c.Encode()).(state.Result); r.Code != state.CodeOK {
			t.Fatalf("submit %d: %+v", i, r)
		}
	}
	return f
}

func snapshotBytes(t testing.TB, f *state.FSM) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := f.Snapshot().Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	data := snapshotBytes(t, fsmWith(t, "c1", 30))
	file, err := backup.Marshal("c1", 30, 4, data)
	if err != nil {
		t.Fatal(err)
	}
	h, err := backup.Verify(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != backup.Version || h.ClusterID != "c1" || h.Index != 30 || h.Term != 4 || h.Size != uint64(len(data)) {
		t.Errorf("header %+v", h)
	}
	if !bytes.Equal(file[h.Len():], data) {
		t.Error("data differs")
	}
	path := filepath.Join(t.TempDir(), "b.xce")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := backup.Inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	want := backup.Summary{Format: backup.Version, ClusterID: "c1", Index: 30, Term: 4, Size: uint64(len(data)), SHA256: h.Sum(),
		ChecksumOK: true, Tasks: 30, OutboxLen: 30, AppliedIndex: 30}
	if s != want {
		t.Errorf("inspect:\n got %+v\nwant %+v", s, want)
	}
}

// Every damage is refused with its own error, and Inspect never decodes
// data that fails the checksum.
func TestCorruption(t *testing.T) {
	data := snapshotBytes(t, fsmWith(t, "c1", 5))
	good, err := backup.Marshal("c1", 5, 2, data)
	if err != nil {
		t.Fatal(err)
	}
	hlen := len(good) - len(data)
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	newer, _ := (backup.Header{Version: backup.Version + 1, ClusterID: "c1"}).Encode()
	for _, tc := range []struct {
		name string
		file []byte
		want error
	}{
		{"empty", nil, backup.ErrTruncated},
		{"bad magic", edit(func(b []byte) []byte { b[0] = 'Y'; return b }), backup.ErrNotBackup},
		{"another file", []byte("hello, this is not a backup at all\n"), backup.ErrNotBackup},
		{"the state's own snapshot", data, backup.ErrNotBackup},
		{"wrong version", append(newer, data...), backup.ErrVersion},
		{"truncated header", good[:hlen-3], backup.ErrTruncated},
		{"magic only", good[:len(backup.Magic)], backup.ErrTruncated},
		{"header only", good[:hlen], backup.ErrTruncated},
		{"truncated data", good[:len(good)-1], backup.ErrTruncated},
		{"bytes after the data", append(bytes.Clone(good), 0), backup.ErrCorrupt},
		{"flipped index bit", edit(func(b []byte) []byte { b[len(backup.Magic)+4+2+2+7] ^= 1; return b }), backup.ErrCorrupt},
		{"flipped data byte", edit(func(b []byte) []byte { b[hlen+len(data)/2] ^= 0x20; return b }), backup.ErrChecksum},
		{"flipped last byte", edit(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), backup.ErrChecksum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := backup.Verify(bytes.NewReader(tc.file), int64(len(tc.file)))
			if !errors.Is(err, tc.want) || !errors.Is(err, backup.ErrInvalid) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
			path := filepath.Join(t.TempDir(), "b.xce")
			if err := os.WriteFile(path, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := backup.Open(path); !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Open: %v, want %v naming the file", err, tc.want)
			}
			s, err := backup.Inspect(path)
			if !errors.Is(err, tc.want) {
				t.Errorf("Inspect: %v, want %v", err, tc.want)
			}
			if s.ChecksumOK || s.Tasks != 0 {
				t.Errorf("Inspect of a damaged file: %+v", s)
			}
		})
	}
}

// Commit renames a verified file into place; a mismatch with what the
// sender reported, or Abort, leaves no file at all.
func TestWriter(t *testing.T) {
	data := snapshotBytes(t, fsmWith(t, "c1", 7))
	whole, _ := backup.Marshal("c1", 7, 3, data)
	for _, tc := range []struct {
		name   string
		size   func() uint64
		sha    func(h backup.Header) string
		abort  bool
		wantOK bool
	}{
		{"whole", nil, nil, false, true},
		{"short", func() uint64 { return uint64(len(data)) + 1 }, nil, false, false},
		{"other checksum", nil, func(h backup.Header) string { return strings.Repeat("0", 64) }, false, false},
		{"aborted", nil, nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "b.xce")
			w, err := backup.Create(path, "c1", 7, 3)
			if err != nil {
				t.Fatal(err)
			}
			for p := data; len(p) > 0; p = p[min(len(p), 100):] {
				if _, err := w.Write(p[:min(len(p), 100)]); err != nil {
					t.Fatal(err)
				}
			}
			wh, _ := backup.Verify(bytes.NewReader(whole), int64(len(whole)))
			size, sha := uint64(len(data)), wh.Sum()
			if tc.size != nil {
				size = tc.size()
			}
			if tc.sha != nil {
				sha = tc.sha(wh)
			}
			if tc.abort {
				w.Abort()
			} else if _, err := w.Commit(size, sha); (err == nil) != tc.wantOK {
				t.Fatalf("Commit: %v", err)
			}
			ents, _ := os.ReadDir(dir)
			if !tc.wantOK {
				if len(ents) != 0 {
					t.Errorf("left %v", ents)
				}
				return
			}
			if len(ents) != 1 || ents[0].Name() != "b.xce" {
				t.Fatalf("dir holds %v", ents)
			}
			got, _ := os.ReadFile(path)
			if !bytes.Equal(got, whole) {
				t.Error("file differs from Marshal's")
			}
		})
	}
}
