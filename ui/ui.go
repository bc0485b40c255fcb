// Package ui is the console every node serves at /ui/ on its client port: a
// page, a script and a style sheet embedded in the binary, which read the
// cluster through the same API and identities as any client
// (docs/design.md, "The console").
package ui

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strings"
)

//go:embed static
var static embed.FS

// Prefix is where the console is served.
const Prefix = "/ui/"

// ContentSecurityPolicy is sent with every response of the console: its own
// script, style and API only; no inline code, no frames, no other origin.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Identity is who the console's caller is and what it may do.
type Identity struct {
	// Auth is whether the node enforces permissions; without, every
	// caller may do everything.
	Auth bool `json:"auth"`
	// Name and Via name the caller as the API does (a token's principal,
	// a certificate's name, anonymous).
	Name string `json:"name"`
	Via  string `json:"via"`
	// Permissions are the caller's, sorted (auth.Permission names).
	Permissions []string `json:"permissions"`
}

// Options configure Handler.
type Options struct {
	// Identify names the caller of r from its Authorization header and
	// TLS state; an error means the caller is not identified (the console
	// asks for a token). Nil: permissions are not enforced, and every
	// caller has every permission in All.
	Identify func(r *http.Request) (Identity, error)
	// All are the permissions a caller has when permissions are not
	// enforced.
	All []string
}

// Handler serves the console under Prefix: the page, its script and style
// sheet, and whoami (the caller's Identity as JSON, 401 with the reason
// when the caller is not identified). It serves GET and HEAD only.
func Handler(o Options) http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	fileServer := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "the console serves GET and HEAD only", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		switch name = path.Clean("/" + name)[1:]; name {
		case "whoami":
			whoami(w, r, o)
			return
		case "", "index.html":
			name = "index.html"
		}
		if _, err := fs.Stat(files, name); err != nil || name == "." {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		if name == "index.html" {
			// FileServer redirects index.html to its directory.
			r2.URL.Path = "/"
		}
		fileServer.ServeHTTP(w, r2)
	})
}

func whoami(w http.ResponseWriter, r *http.Request, o Options) {
	w.Header().Set("Content-Type", "application/json")
	id := Identity{Name: "anonymous", Via: "anonymous", Permissions: slices.Sorted(slices.Values(o.All))}
	if o.Identify != nil {
		var err error
		if id, err = o.Identify(r); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
			return
		}
		id.Auth = true
		slices.Sort(id.Permissions)
	}
	if id.Permissions == nil {
		id.Permissions = []string{}
	}
	json.NewEncoder(w).Encode(id)
}
