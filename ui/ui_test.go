package ui

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, path, token string) *http.Response {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every answer carries the strict headers; the page, script and style
// sheet are served with their types; anything else is 404, 405 or a
// redirect to the console.
func TestHandlerServesTheConsole(t *testing.T) {
	h := Handler(Options{All: []string{"read", "status"}})
	for _, tc := range []struct {
		method, path string
		code         int
		ctype        string
	}{
		{"GET", "/ui/", 200, "text/html"},
		{"GET", "/ui/index.html", 200, "text/html"},
		{"HEAD", "/ui/", 200, "text/html"},
		{"GET", "/ui/app.js", 200, "text/javascript"},
		{"GET", "/ui/app.css", 200, "text/css"},
		{"GET", "/ui/whoami", 200, "application/json"},
		{"GET", "/ui/nope.js", 404, ""},
		{"GET", "/ui/../go.mod", 404, ""},
		{"GET", "/ui/static/app.js", 404, ""},
		{"POST", "/ui/", 405, ""},
		{"DELETE", "/ui/whoami", 405, ""},
		{"GET", "/ui", 301, ""},
	} {
		r := get(t, h, tc.method, tc.path, "")
		if r.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, r.StatusCode, tc.code)
		}
		if !strings.HasPrefix(r.Header.Get("Content-Type"), tc.ctype) {
			t.Errorf("%s %s: Content-Type %q, want %s", tc.method, tc.path, r.Header.Get("Content-Type"), tc.ctype)
		}
		for k, v := range map[string]string{"Content-Security-Policy": ContentSecurityPolicy, "X-Content-Type-Options": "nosniff",
			"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"} {
			if got := r.Header.Get(k); got != v {
				t.Errorf("%s %s: %s %q", tc.method, tc.path, k, got)
			}
		}
	}
}

// The page has no inline script, style or event handler, which the policy
// would refuse, and loads only its own files.
func TestPageFitsThePolicy(t *testing.T) {
	page := body(t, get(t, Handler(Options{}), "GET", "/ui/", ""))
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]+</script>`),
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\sstyle=`),
		regexp.MustCompile(`\son[a-z]+=`),
		regexp.MustCompile(`(?:src|href)="(?:https?:)?//`),
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("the page has %q, which the policy refuses or which leaves the node", m)
		}
	}
	script := body(t, get(t, Handler(Options{}), "GET", "/ui/app.js", ""))
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage"} {
		if strings.Contains(script, bad) {
			t.Errorf("app.js uses %s: data is written as text, tokens kept in session storage only", bad)
		}
	}
}

// whoami: without permissions enforced every caller has every permission;
// with, the caller Identify names, or 401 with the reason.
func TestWhoami(t *testing.T) {
	decode := func(r *http.Response) Identity {
		t.Helper()
		var id Identity
		if err := json.NewDecoder(r.Body).Decode(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id := decode(get(t, Handler(Options{All: []string{"write", "read"}}), "GET", "/ui/whoami", ""))
	if id.Auth || id.Name != "anonymous" || strings.Join(id.Permissions, ",") != "read,write" {
		t.Fatalf("permissions off: %+v", id)
	}
	h := Handler(Options{All: []string{"write", "read"}, Identify: func(r *http.Request) (Identity, error) {
		if r.Header.Get("Authorization") != "Bearer good" {
			return Identity{}, errors.New("unauthenticated: the bearer token is not one this node knows")
		}
		return Identity{Name: "viewer", Via: "token", Permissions: []string{"status", "read"}}, nil
	}})
	r := get(t, h, "GET", "/ui/whoami", "bad")
	if b := body(t, r); r.StatusCode != 401 || !strings.Contains(b, "not one this node knows") || strings.Contains(b, "bad") {
		t.Fatalf("a bad token: %d %s", r.StatusCode, b)
	}
	id = decode(get(t, h, "GET", "/ui/whoami", "good"))
	if !id.Auth || id.Name != "viewer" || strings.Join(id.Permissions, ",") != "read,status" {
		t.Fatalf("a good token: %+v", id)
	}
}
