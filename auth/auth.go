// Package auth decides who a caller of the client port is (a principal,
// from a verified client certificate or a bearer token) and what it may do
// (its roles' permissions). See docs/operations.md, "TLS and permissions on
// the client port", and docs/design.md, "The gate".
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/xce/xce/tlsconf"
)

// Role is a named set of permissions.
type Role string

// The roles.
const (
	// Admin may do everything, deletes included.
	Admin Role = "admin"
	// Writer submits and reads.
	Writer Role = "writer"
	// Reader reads tasks, the assignment, workers, the status and metrics.
	Reader Role = "reader"
	// Worker registers and heartbeats, only as the worker its identity
	// names, and reads Status (the worker library follows the cluster's
	// members through it); nothing else.
	Worker Role = "worker"
	// Node is a controller node's own certificate: it reads, and joins the
	// cluster only as the node it names.
	Node Role = "node"
)

// Permission is what one method needs.
type Permission string

// The permissions.
const (
	// PermStatus is Status: the node's role, its primary and the
	// members' client addresses, which every client (a worker's
	// included) follows.
	PermStatus Permission = "status"
	// PermCluster is the cluster's shape beyond Status: WatchStatus,
	// ListMembers and server reflection.
	PermCluster Permission = "cluster"
	PermRead    Permission = "read"
	PermMetrics Permission = "metrics"
	PermWrite   Permission = "write"
	PermDelete  Permission = "delete"
	// PermWorker is Register and Heartbeat, as the principal's own worker
	// id (see Principal.MaySpeakAs).
	PermWorker Permission = "worker"
	// PermMembers adds, promotes and removes members and transfers
	// leadership.
	PermMembers Permission = "members"
	// PermJoin is Join, as the principal's own node id (see
	// Principal.MayJoinAs).
	PermJoin Permission = "join"
	// PermBackup takes snapshots of the whole state.
	PermBackup Permission = "backup"
	// PermDrain drains workers and ends their drains, and freezes and
	// unfreezes the placement: it steers where work runs.
	PermDrain Permission = "drain"
)

// Grants is what each role may do.
var Grants = map[Role][]Permission{
	Admin:  {PermStatus, PermCluster, PermRead, PermMetrics, PermWrite, PermDelete, PermWorker, PermMembers, PermJoin, PermBackup, PermDrain},
	Writer: {PermStatus, PermCluster, PermRead, PermMetrics, PermWrite},
	Reader: {PermStatus, PermCluster, PermRead, PermMetrics},
	Worker: {PermStatus, PermWorker},
	Node:   {PermStatus, PermCluster, PermRead, PermMetrics, PermJoin},
}

// ParseRole reads a role name.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if _, ok := Grants[r]; !ok || r == Node {
		return "", fmt.Errorf("unknown role %q (admin, writer, reader, worker)", s)
	}
	return r, nil
}

// Principal is who a caller is.
type Principal struct {
	// Name is the client certificate's name, "worker:<id>" for a worker
	// certificate, a token's principal, or "anonymous".
	Name string
	// Via says how the caller was identified: certificate, token or
	// anonymous.
	Via   string
	Roles []Role
}

// Permissions lists what p's roles grant, each once, sorted.
func (p Principal) Permissions() []Permission {
	var out []Permission
	for _, r := range p.Roles {
		for _, perm := range Grants[r] {
			if !slices.Contains(out, perm) {
				out = append(out, perm)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Can reports whether one of p's roles grants perm.
func (p Principal) Can(perm Permission) bool {
	for _, r := range p.Roles {
		if slices.Contains(Grants[r], perm) {
			return true
		}
	}
	return false
}

// WorkerID is the worker id p speaks for: its name without a "worker:"
// prefix.
func (p Principal) WorkerID() string { return strings.TrimPrefix(p.Name, "worker:") }

// MaySpeakAs reports whether p may register or heartbeat as worker id: an
// admin as any worker, a worker only as its own id, or as any worker when
// its id is AnyWorker (a fleet's shared token).
func (p Principal) MaySpeakAs(id string) bool {
	if slices.Contains(p.Roles, Admin) {
		return true
	}
	return slices.Contains(p.Roles, Worker) && (id == p.WorkerID() || p.WorkerID() == AnyWorker)
}

// AnyWorker is the worker id of a principal that may speak as every
// worker: a token shared by a fleet whose workers' ids are not known
// ahead (a Deployment's pods). It may do no more than a worker.
const AnyWorker = "*"

// NodeID is the node id p speaks for: its name without a "node:" prefix.
func (p Principal) NodeID() string { return strings.TrimPrefix(p.Name, "node:") }

// MayJoinAs reports whether p may ask the cluster to add node id: an admin
// any node, a node only itself.
func (p Principal) MayJoinAs(id string) bool {
	if slices.Contains(p.Roles, Admin) {
		return true
	}
	return slices.Contains(p.Roles, Node) && id == p.NodeID()
}

// Config is how a node identifies its callers.
type Config struct {
	// Cluster is the node's cluster id: a certificate must name it.
	Cluster string
	// Tokens, when set, are the bearer tokens and the roles of principals.
	Tokens *Tokens
	// ClientAuth is the client port's tls.client_auth.
	ClientAuth tlsconf.ClientAuth
	// Anonymous is the role of a caller with no credentials: empty (none)
	// or Reader.
	Anonymous Role
}

// Authenticator identifies callers. A nil *Authenticator enforces nothing.
type Authenticator struct {
	cfg Config
}

// New returns the authenticator of cfg.
func New(cfg Config) *Authenticator { return &Authenticator{cfg: cfg} }

// Enforced reports whether the node can tell callers apart, and so
// enforces permissions: a tokens file, or client certificates optional or
// required.
func (a *Authenticator) Enforced() bool {
	if a == nil {
		return false
	}
	return a.cfg.Tokens != nil || a.cfg.ClientAuth == tlsconf.ClientAuthOptional || a.cfg.ClientAuth == tlsconf.ClientAuthRequired
}

// ErrUnauthenticated wraps every reason a caller is not identified.
var ErrUnauthenticated = errors.New("unauthenticated")

func unauth(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnauthenticated, fmt.Sprintf(format, args...))
}

// Identify names the caller of a request from its Authorization header and
// its connection's TLS state (nil without TLS). A bearer token wins over a
// certificate; with neither the caller is anonymous, which is an error
// unless anonymous callers have a role. An error wraps ErrUnauthenticated
// and never quotes the token.
func (a *Authenticator) Identify(h http.Header, cs *tls.ConnectionState) (Principal, error) {
	leafOK := cs != nil && len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 && a.cfg.ClientAuth != tlsconf.ClientAuthNone
	if a.cfg.ClientAuth == tlsconf.ClientAuthRequired && !leafOK {
		return Principal{}, unauth("a client certificate signed by the cluster's CA is required (tls.client_auth: required)")
	}
	if v := h.Get("Authorization"); v != "" {
		scheme, tok, _ := strings.Cut(v, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
			return Principal{}, unauth("the Authorization header is not \"Bearer <token>\"")
		}
		p, ok := a.cfg.Tokens.lookup(strings.TrimSpace(tok))
		if !ok {
			return Principal{}, unauth("the bearer token is not one this node knows")
		}
		return p, nil
	}
	if leafOK {
		return a.fromCertificate(cs)
	}
	if a.cfg.Anonymous != "" {
		return Principal{Name: "anonymous", Via: "anonymous", Roles: []Role{a.cfg.Anonymous}}, nil
	}
	return Principal{}, unauth("no credentials: send a bearer token (Authorization: Bearer …) or a client certificate")
}

// fromCertificate names the principal of a verified client certificate:
// xce://<cluster>/client/<name> is <name>, with the roles the tokens file
// gives <name> (admin when there is no tokens file);
// xce://<cluster>/worker/<id> is worker:<id>, with the worker role;
// xce://<cluster>/node/<id> is node:<id>, with the node role (it reads,
// and joins only as itself); no tokens file can give that role.
func (a *Authenticator) fromCertificate(cs *tls.ConnectionState) (Principal, error) {
	leaf := cs.VerifiedChains[0][0]
	id, ok := tlsconf.IdentityOf(leaf)
	switch {
	case !ok:
		return Principal{}, unauth("the client certificate %q names no xce identity", leaf.Subject.CommonName)
	case id.Cluster != a.cfg.Cluster:
		return Principal{}, unauth("the client certificate names %s, of another cluster than %q", id, a.cfg.Cluster)
	}
	switch id.Kind {
	case tlsconf.KindClient:
		p := Principal{Name: id.Name, Via: "certificate"}
		if a.cfg.Tokens == nil {
			p.Roles = []Role{Admin}
		} else {
			p.Roles = a.cfg.Tokens.roles[id.Name]
		}
		return p, nil
	case tlsconf.KindWorker:
		return Principal{Name: "worker:" + id.Name, Via: "certificate", Roles: []Role{Worker}}, nil
	case tlsconf.KindNode:
		// The cluster's nodes read each other's status (the primary asks
		// every voter which log format it applies before it batches).
		return Principal{Name: "node:" + id.Name, Via: "certificate", Roles: []Role{Node}}, nil
	}
	return Principal{Name: id.Kind + ":" + id.Name, Via: "certificate"}, nil
}

// Tokens are the bearer tokens of a tokens file, by hash, and the roles
// it gives each principal.
type Tokens struct {
	entries []token
	roles   map[string][]Role
}

type token struct {
	hash      [sha256.Size]byte
	principal string
	roles     []Role
}

// lookup finds the principal of a token, comparing hashes in constant
// time (every entry is compared).
func (t *Tokens) lookup(tok string) (Principal, bool) {
	if t == nil {
		return Principal{}, false
	}
	h := sha256.Sum256([]byte(tok))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	e := t.entries[found]
	return Principal{Name: e.principal, Via: "token", Roles: e.roles}, true
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

type tlsKey struct{}

// WithTLS records a request's TLS state in its context for Identify.
func WithTLS(ctx context.Context, cs *tls.ConnectionState) context.Context {
	if cs == nil {
		return ctx
	}
	return context.WithValue(ctx, tlsKey{}, cs)
}

// TLSFrom is the TLS state WithTLS recorded, or nil.
func TLSFrom(ctx context.Context) *tls.ConnectionState {
	cs, _ := ctx.Value(tlsKey{}).(*tls.ConnectionState)
	return cs
}

// Require serves h only to callers whose roles grant perm, when a
// enforces permissions; others get 401 or 403 with the reason, and refused
// is told of each refusal with its status code.
func (a *Authenticator) Require(perm Permission, h http.Handler, refused func(code int)) http.Handler {
	if !a.Enforced() {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.Identify(r.Header, r.TLS)
		code := 0
		msg := ""
		switch {
		case err != nil:
			code, msg = http.StatusUnauthorized, err.Error()
		case !p.Can(perm):
			code, msg = http.StatusForbidden, fmt.Sprintf("permission denied: %s (%s) lacks permission %q", p.Name, p.Via, perm)
		}
		if code != 0 {
			if refused != nil {
				refused(code)
			}
			http.Error(w, msg, code)
			return
		}
		h.ServeHTTP(w, r)
	})
}
