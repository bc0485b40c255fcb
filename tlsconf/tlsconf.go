// Package tlsconf builds the TLS configurations of xce's ports and clients
// from PEM files, reloads them when the files change (rotation without a
// restart), names identities in certificates, and creates a small CA and
// the certificates it signs (xce tls). See docs/operations.md, "TLS and
// permissions on the client port" and "TLS on the peer port".
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Files names a CA bundle, a certificate and its key, all PEM.
type Files struct {
	CA, Cert, Key string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.CA == "" && f.Cert == "" && f.Key == "" }

// reloadEvery is how often a Source looks at its files' modification times
// (at a handshake, never in a goroutine of its own).
const reloadEvery = 2 * time.Second

// Source serves a certificate and a CA pool loaded from Files, reloading
// them at a handshake when a file has changed since it last looked (at most
// every few seconds). A failed reload keeps what was loaded before, and is
// reported through OnReload. It is safe for concurrent use.
type Source struct {
	files Files
	// OnReload, when set, is told of each reload (err nil) or failed
	// reload attempt.
	OnReload func(err error)
	now      func() time.Time

	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	leaf    *x509.Certificate
	pool    *x509.CertPool
}

// NewSource loads files once: an error names the file that is missing or
// does not parse. Cert and Key must be named together; CA may be empty
// when nothing is verified with it.
func NewSource(files Files) (*Source, error) {
	s := &Source{files: files, now: time.Now}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.checked = s.now()
	return s, nil
}

func (s *Source) load() error {
	f := s.files
	if (f.Cert == "") != (f.Key == "") {
		return errors.New("a certificate and its key are named together: cert_file and key_file")
	}
	stamp, err := stampOf(f)
	if err != nil {
		return err
	}
	var cert *tls.Certificate
	var leaf *x509.Certificate
	if f.Cert != "" {
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("certificate %s with key %s: %w", f.Cert, f.Key, err)
		}
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return fmt.Errorf("certificate %s: %w", f.Cert, err)
		}
		c.Leaf = leaf
		cert = &c
	}
	var pool *x509.CertPool
	if f.CA != "" {
		b, err := os.ReadFile(f.CA)
		if err != nil {
			return fmt.Errorf("CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("CA file %s: no PEM certificate in it", f.CA)
		}
	}
	s.stamp, s.cert, s.leaf, s.pool = stamp, cert, leaf, pool
	return nil
}

// stampOf is the files' sizes and modification times: a change in any
// means a reload.
func stampOf(f Files) (string, error) {
	var b strings.Builder
	for _, p := range []string{f.CA, f.Cert, f.Key} {
		if p == "" {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %d %d;", p, st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// refresh reloads the files if they changed since the last look. OnReload
// is called after the lock is released, so that it may use s.
func (s *Source) refresh() {
	reloaded, err := s.reload()
	if reloaded && s.OnReload != nil {
		s.OnReload(err)
	}
}

// reload reloads the files if they changed since the last look; it reports
// whether it tried, and how that went.
func (s *Source) reload() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.checked) < reloadEvery {
		return false, nil
	}
	s.checked = now
	stamp, err := stampOf(s.files)
	if err == nil && stamp == s.stamp {
		return false, nil
	}
	if err == nil {
		err = s.load()
	}
	return true, err
}

// Certificate is the current certificate (nil when none is named).
func (s *Source) Certificate() *tls.Certificate {
	s.refresh()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert
}

// Leaf is the current certificate, parsed (nil when none is named).
func (s *Source) Leaf() *x509.Certificate {
	s.refresh()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaf
}

// Pool is the current CA pool (nil when no CA file is named).
func (s *Source) Pool() *x509.CertPool {
	s.refresh()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool
}

// Expiry is when the current certificate stops being valid (zero when
// none is named).
func (s *Source) Expiry() time.Time {
	if l := s.Leaf(); l != nil {
		return l.NotAfter
	}
	return time.Time{}
}

// ClientAuth is how the client port asks for client certificates.
type ClientAuth string

const (
	ClientAuthNone     ClientAuth = "none"
	ClientAuthOptional ClientAuth = "optional"
	ClientAuthRequired ClientAuth = "required"
)

// ServerConfig is a TLS 1.3 server configuration that presents s's
// certificate and, unless auth is none, asks for a client certificate
// verified against s's CA pool (optional: one may be absent, but one that
// is sent must verify). verify, when set, vets a verified client chain
// further (a peer's identity).
func (s *Source) ServerConfig(auth ClientAuth, verify func(leaf *x509.Certificate) error) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS13}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{*s.Certificate()},
			NextProtos:   base.NextProtos,
		}
		switch auth {
		case ClientAuthOptional:
			c.ClientAuth, c.ClientCAs = tls.VerifyClientCertIfGiven, s.Pool()
		case ClientAuthRequired:
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, s.Pool()
		}
		if verify != nil && auth != ClientAuthNone {
			c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
				if len(chains) == 0 || len(chains[0]) == 0 {
					if auth == ClientAuthOptional {
						return nil
					}
					return errors.New("no verified client certificate")
				}
				return verify(chains[0][0])
			}
		}
		return c, nil
	}
	return base
}

// ClientConfig is a TLS 1.3 client configuration that verifies the server
// against s's CA pool (the system's when s has none) and presents s's
// certificate when one is named. verify, when set, vets the server's
// verified certificate further (a peer's identity); serverName, when set,
// is the name the server's certificate must carry instead.
func (s *Source) ClientConfig(serverName string, verify func(leaf *x509.Certificate) error) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: serverName}
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := s.Certificate(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil
	}
	if verify != nil || s.files.CA != "" {
		// Verified here rather than by crypto/tls, so that the pool is
		// the current one and the name check can be the caller's.
		c.InsecureSkipVerify = true
		c.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			leaf, err := s.verifyChain(raw, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if verify != nil {
				return verify(leaf)
			}
			if serverName != "" {
				return leaf.VerifyHostname(serverName)
			}
			return nil
		}
	}
	return c
}

// verifyChain verifies a peer's raw chain against the current pool.
func (s *Source) verifyChain(raw [][]byte, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(raw) == 0 {
		return nil, errors.New("no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("certificate does not parse: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: s.Pool(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, err
	}
	return certs[0], nil
}

// Identity is who a certificate names: a node of a cluster, a client, or
// a worker, as a URI SAN xce://<cluster>/<kind>/<name>.
type Identity struct {
	Cluster, Kind, Name string
}

// Kinds of identity.
const (
	KindNode   = "node"
	KindClient = "client"
	KindWorker = "worker"
)

// URI is the identity as a URI SAN.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: "xce", Host: id.Cluster, Path: "/" + id.Kind + "/" + id.Name}
}

func (id Identity) String() string { return id.URI().String() }

// IdentityOf reads the xce identity a certificate names; ok is false when
// it names none.
func IdentityOf(c *x509.Certificate) (Identity, bool) {
	for _, u := range c.URIs {
		if u.Scheme != "xce" {
			continue
		}
		kind, name, found := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if !found || name == "" || strings.Contains(name, "/") {
			continue
		}
		return Identity{Cluster: u.Host, Kind: kind, Name: name}, true
	}
	return Identity{}, false
}

// NodeVerifier vets a peer certificate: it must name a node of cluster,
// and, when want is not empty, that node. The error says what it names
// instead.
func NodeVerifier(cluster string, want func() string) func(*x509.Certificate) error {
	return func(c *x509.Certificate) error {
		id, ok := IdentityOf(c)
		switch {
		case !ok:
			return fmt.Errorf("certificate %q names no xce identity", c.Subject.CommonName)
		case id.Kind != KindNode:
			return fmt.Errorf("certificate names %s, not a node", id)
		case id.Cluster != cluster:
			return fmt.Errorf("certificate names %s, of another cluster than %q", id, cluster)
		}
		if want != nil {
			if w := want(); w != "" && id.Name != w {
				return fmt.Errorf("certificate names %s, want node %q", id, w)
			}
		}
		return nil
	}
}
