package backup

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"

	"github.com/xce/xce/persist/raftlog"
)

// Writer writes a backup file: the data goes to PATH.tmp behind a header
// whose size and checksum are filled in by Commit, which verifies the file
// as written and only then renames it to PATH. A file at PATH is thus
// always whole and verified; Abort, or any failure, leaves nothing.
type Writer struct {
	path, tmp string
	f         *os.File
	h         Header
	sum       hash.Hash
	n         uint64
	err       error
}

// Create starts a backup at path of a snapshot of cluster clusterID at
// index and term.
func Create(path, clusterID string, index, term uint64) (*Writer, error) {
	h := Header{Version: Version, ClusterID: clusterID, Index: index, Term: term}
	b, err := h.Encode()
	if err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	w := &Writer{path: path, tmp: tmp, f: f, h: h, sum: sha256.New()}
	if _, err := f.Write(b); err != nil {
		w.Abort()
		return nil, fmt.Errorf("write %s: %w", tmp, err)
	}
	return w, nil
}

// Write appends data.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.f.Write(p)
	w.sum.Write(p[:n])
	w.n += uint64(n)
	if err != nil {
		w.err = fmt.Errorf("write %s: %w", w.tmp, err)
	}
	return n, w.err
}

// Commit checks the data written against the size and SHA-256 (hex) the
// sender reported, completes the header, syncs the file, reads it back
// whole (Verify) and renames it into place. On any failure the
// temporary file is removed and the error returned.
func (w *Writer) Commit(size uint64, sha string) (h Header, err error) {
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	if w.err != nil {
		return h, w.err
	}
	got := fmt.Sprintf("%x", w.sum.Sum(nil))
	switch {
	case size != w.n:
		return h, fmt.Errorf("%w: received %d bytes, the sender sent %d", ErrTruncated, w.n, size)
	case sha != got:
		return h, fmt.Errorf("%w: received data has sha256 %s, the sender's is %q", ErrChecksum, got, sha)
	}
	w.h.Size = w.n
	copy(w.h.SHA256[:], w.sum.Sum(nil))
	b, err := w.h.Encode()
	if err != nil {
		return h, err
	}
	if _, err := w.f.WriteAt(b, 0); err != nil {
		return h, fmt.Errorf("write %s: %w", w.tmp, err)
	}
	if err := w.f.Sync(); err != nil {
		return h, fmt.Errorf("sync %s: %w", w.tmp, err)
	}
	// What reached the disk, not what was meant to: read it back.
	fi, err := w.f.Stat()
	if err != nil {
		return h, err
	}
	r, err := os.Open(w.tmp)
	if err != nil {
		return h, err
	}
	h, err = Verify(r, fi.Size())
	r.Close()
	if err != nil {
		return h, fmt.Errorf("%s as written: %w", w.tmp, err)
	}
	if err := w.f.Close(); err != nil {
		return h, fmt.Errorf("close %s: %w", w.tmp, err)
	}
	w.f = nil
	if err := os.Rename(w.tmp, w.path); err != nil {
		return h, err
	}
	return h, raftlog.SyncDir(filepath.Dir(w.path))
}

// Abort discards what was written.
func (w *Writer) Abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	if err := os.Remove(w.tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.err = err
	}
}
