package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
)

// pki is a CA with its certificates in a temp dir.
type pki struct {
	dir, cluster string
}

func newPKI(t *testing.T, cluster string) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir(), cluster: cluster}
	if err := tlsconf.CreateCA(p.dir, cluster); err != nil {
		t.Fatal(err)
	}
	return p
}

// cert creates a certificate of the kind and name and returns its files
// (with the CA).
func (p *pki) cert(t *testing.T, kind, name string, hosts ...string) client.Credentials {
	t.Helper()
	cert, key, err := tlsconf.CreateCert(p.dir, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: p.cluster, Kind: kind, Name: name}, Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(p.dir)
	return client.Credentials{CAFile: ca, CertFile: cert, KeyFile: key}
}

// secureNode is a fakeNode behind TLS and a small permission check: the
// token "admin" may do anything, "reader" only reads, and a verified
// client certificate is an admin; no credentials is Unauthenticated.
type secureNode struct {
	*fakeNode
	refused atomic.Int64
}

func startSecureNode(t *testing.T, p *pki, auth tlsconf.ClientAuth) *secureNode {
	t.Helper()
	files := p.cert(t, tlsconf.KindNode, "n1", "127.0.0.1")
	src, err := tlsconf.NewSource(tlsconf.Files{CA: files.CAFile, Cert: files.CertFile, Key: files.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	n := &secureNode{fakeNode: &fakeNode{sessions: map[string]bool{}}}
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(n.fakeNode))
	mux.Handle(xcev1connect.NewWorkerServiceHandler(n.fakeNode))
	ew := connect.NewErrorWriter()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, hasTok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		hasCert := r.TLS != nil && len(r.TLS.PeerCertificates) > 0
		read := strings.HasSuffix(r.URL.Path, "/ListWorkers") || strings.HasSuffix(r.URL.Path, "/Status")
		var err error
		switch {
		case !hasTok && !hasCert:
			err = connect.NewError(connect.CodeUnauthenticated, errors.New("no credentials"))
		case hasCert, tok == "admin":
		case tok == "reader" && read:
		case tok == "reader":
			err = connect.NewError(connect.CodePermissionDenied, errors.New("reader lacks permission write"))
		default:
			err = connect.NewError(connect.CodeUnauthenticated, errors.New("unknown token"))
		}
		if err != nil {
			n.refused.Add(1)
			_ = ew.Write(w, r, err)
			return
		}
		mux.ServeHTTP(w, r)
	})
	cfg := src.ServerConfig(auth, nil)
	cfg.NextProtos = []string{"h2", "http/1.1"}
	// A plain net/http server: it sees the TLS state of its connections.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	n.addr = ln.Addr().String()
	return n
}

// A token and the cluster's CA: calls go over TLS with the token; a
// reader's write is PermissionDenied and no credentials Unauthenticated,
// each answered once and not retried.
func TestTokenOverTLS(t *testing.T) {
	p := newPKI(t, "c1")
	n := startSecureNode(t, p, tlsconf.ClientAuthOptional)
	ca, _ := tlsconf.CAFiles(p.dir)

	admin := newClient(t, []string{n.addr}, client.Options{Credentials: client.Credentials{CAFile: ca, Token: "admin"}})
	if _, err := admin.Register(ctxT(t), "w1", 1, ""); err != nil {
		t.Fatalf("admin register: %v", err)
	}
	if _, err := admin.ListWorkers(ctxT(t)); err != nil {
		t.Fatalf("admin list: %v", err)
	}

	reader := newClient(t, []string{n.addr}, client.Options{Credentials: client.Credentials{CAFile: ca, Token: "reader"}})
	if _, err := reader.ListWorkers(ctxT(t)); err != nil {
		t.Fatalf("reader list: %v", err)
	}
	before := n.refused.Load()
	_, err := reader.Register(ctxT(t), "w2", 1, "")
	if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), "PermissionDenied: reader lacks permission write") {
		t.Fatalf("reader register: %v, want PermissionDenied with the reason", err)
	}
	if got := n.refused.Load() - before; got != 1 {
		t.Fatalf("the refused call was made %d times, want once", got)
	}

	anon := newClient(t, []string{n.addr}, client.Options{Credentials: client.Credentials{CAFile: ca}})
	if _, err := anon.ListWorkers(ctxT(t)); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("no credentials: %v, want Unauthenticated", err)
	}
	if _, err := anon.Status(ctxT(t), n.addr); !errors.Is(err, client.ErrUnauthenticated) {
		t.Fatalf("status without credentials: %v, want Unauthenticated", err)
	}
}

// A client certificate is the identity when the node asks for one; a node
// that requires one refuses a client without, at once.
func TestClientCertificate(t *testing.T) {
	p := newPKI(t, "c1")
	n := startSecureNode(t, p, tlsconf.ClientAuthRequired)
	creds := p.cert(t, tlsconf.KindClient, "alice")
	c := newClient(t, []string{n.addr}, client.Options{Credentials: creds})
	if _, err := c.Register(ctxT(t), "w1", 1, ""); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	start := time.Now()
	noCert := newClient(t, []string{n.addr}, client.Options{Credentials: client.Credentials{CAFile: creds.CAFile, Token: "admin"}})
	_, err := noCert.ListWorkers(ctxT(t))
	if !errors.Is(err, client.ErrBadCertificate) {
		t.Fatalf("without a client certificate: %v, want ErrBadCertificate", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the refusal took %s: retried", d)
	}
}

// The node must chain to the CA given and name an xce node; the address
// dialled need not be in its certificate.
func TestServerVerification(t *testing.T) {
	p := newPKI(t, "c1")
	n := startSecureNode(t, p, tlsconf.ClientAuthNone)
	other := newPKI(t, "c1")
	ca, _ := tlsconf.CAFiles(other.dir)
	c := newClient(t, []string{n.addr}, client.Options{Credentials: client.Credentials{CAFile: ca, Token: "admin"}})
	_, err := c.ListWorkers(ctxT(t))
	if !errors.Is(err, client.ErrBadCertificate) || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("a node of another CA: %v, want ErrBadCertificate naming the unknown authority", err)
	}

	// "localhost" is not in the node's certificate (127.0.0.1 is): the
	// identity is what counts.
	good, _ := tlsconf.CAFiles(p.dir)
	port := n.addr[strings.LastIndex(n.addr, ":"):]
	c = newClient(t, []string{"localhost" + port}, client.Options{Credentials: client.Credentials{CAFile: good, Token: "admin"}})
	if _, err := c.ListWorkers(ctxT(t)); err != nil {
		t.Fatalf("by a name the certificate lacks: %v", err)
	}

	// A plaintext client to the TLS port fails.
	plain := newClient(t, []string{n.addr}, client.Options{Credentials: client.Credentials{Token: "admin"}})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := plain.ListWorkers(ctx); err == nil {
		t.Fatal("plaintext to a TLS port succeeded")
	}
}
