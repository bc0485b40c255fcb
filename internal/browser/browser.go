// Package browser drives a real headless Chromium for the console's tests
// (chromedp over the DevTools protocol). The browser is Debian's chromium,
// installed by `make browser` (scripts/chromium.sh); where none is found
// the tests that need it skip and say so.
package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// Path is the Chromium binary on the PATH, or "".
func Path() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Options of a browser.
type Options struct {
	// Width and Height of the window (1280×800 when zero).
	Width, Height int
	// InsecureTLS accepts any server certificate (a test CA's).
	InsecureTLS bool
}

// New starts a headless Chromium for t and returns a context of its first
// tab; the browser is closed when t ends. It skips t when no Chromium is
// installed.
func New(t testing.TB, o Options) context.Context {
	t.Helper()
	path := Path()
	if path == "" {
		t.Skip("no chromium on the PATH: `make browser` installs Debian's (scripts/chromium.sh; needs root and apt-get)")
	}
	if o.Width == 0 {
		o.Width, o.Height = 1280, 800
	}
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts,
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.WindowSize(o.Width, o.Height),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	if o.InsecureTLS {
		opts = append(opts, chromedp.Flag("ignore-certificate-errors", true))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now, so that a failure to start is reported here.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// Do runs actions in ctx's tab, with a deadline.
func Do(ctx context.Context, d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return chromedp.Do(tctx, actions...)
}

// Eval evaluates a JavaScript expression in ctx's tab, with a deadline.
func Eval[T any](ctx context.Context, d time.Duration, expr string) (T, error) {
	tctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return chromedp.Run(tctx, chromedp.Evaluate[T](expr))
}

// Screenshot saves a PNG of ctx's tab as name.png in t's artifact directory
// (go test -artifacts keeps it; see testing.T.ArtifactDir), and in
// $XCE_SCREENSHOTS when set (the docs' screenshots).
func Screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(tctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv("XCE_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, strings.ReplaceAll(name, "/", "-")+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Logf("screenshot %s: %v", name, err)
			continue
		}
		t.Logf("screenshot: %s", p)
	}
}

// ColorScheme makes the tab's pages see prefers-color-scheme as scheme
// ("light" or "dark").
func ColorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return chromedp.Void{}, err
	}
}
