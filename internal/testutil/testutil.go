// Package testutil holds the helpers that tests of several packages share.
// It is imported by tests only.
package testutil

import (
	"bytes"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond every few milliseconds until it holds, and fails
// the test, naming what it waited for, once within has passed.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	err := Poll(within, 5*time.Millisecond, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("not within %v: %s", within, what)
	}
}

var errNotYet = errors.New("not yet")

// Poll calls cond every interval until it returns nil, and returns nil, or
// until within has passed, and returns cond's last error: for waits whose
// failure a test words itself (or tolerates).
func Poll(within, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		<-tick.C
	}
}

// CopyDir copies the tree at src, byte for byte as it is on disk (no file
// is opened for writing or closed in src), into a new dir of the test and
// returns its path.
func CopyDir(t testing.TB, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "data")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o750)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a log sink for
// goroutines a test does not own.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// CheckErr reports, under name, an err that does not match want: want ""
// expects no error; otherwise the error's text must contain want.
func CheckErr(t testing.TB, name string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: %v", name, err)
	case want != "" && err == nil:
		t.Errorf("%s: no error, want %q", name, want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %v, want %q", name, err, want)
	}
}

// Bearer is an http.RoundTripper that adds "Authorization: Bearer Token"
// to every request (none when Token is empty) and sends it through RT.
type Bearer struct {
	RT    http.RoundTripper
	Token string
}

func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.Token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.Token)
	}
	return b.RT.RoundTrip(r)
}
