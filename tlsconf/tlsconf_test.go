package tlsconf

import (
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki makes a CA and certificates for n1, n2 of cluster c1, and a client.
func pki(t *testing.T, cluster string) string {
	t.Helper()
	dir := t.TempDir()
	if err := CreateCA(dir, cluster); err != nil {
		t.Fatal(err)
	}
	for _, id := range []Identity{{cluster, KindNode, "n1"}, {cluster, KindNode, "n2"}, {cluster, KindClient, "ops"}} {
		if _, _, err := CreateCert(dir, CertRequest{ID: id, Hosts: []string{"127.0.0.1", "localhost"}}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func source(t *testing.T, dir, name string) *Source {
	t.Helper()
	ca, _ := CAFiles(dir)
	cert, key := CertFiles(dir, name)
	s, err := NewSource(Files{CA: ca, Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// handshake runs one TLS connection over a real socket and returns each
// side's error.
func handshake(t *testing.T, server, client *tls.Config) (serr, cerr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		err = tc.Handshake()
		if err == nil {
			_, err = tc.Write([]byte("x"))
		}
		done <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_, err = io.ReadFull(c, make([]byte, 1))
		c.Close()
	}
	return <-done, err
}

func TestKeysAre0600AndNothingIsOverwritten(t *testing.T) {
	dir := pki(t, "c1")
	for _, p := range []string{"ca-key.pem", "n1-key.pem", "ops-key.pem"} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v", p, err, st.Mode())
		}
	}
	if err := CreateCA(dir, "c1"); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Fatalf("second CA: %v", err)
	}
	if _, _, err := CreateCert(dir, CertRequest{ID: Identity{"c1", KindNode, "n1"}}); err == nil {
		t.Fatal("a second n1 certificate overwrote the first")
	}
}

func TestPeersVerifyEachOthersNodeIdentity(t *testing.T) {
	dir := pki(t, "c1")
	n1, n2 := source(t, dir, "n1"), source(t, dir, "n2")
	server := n1.ServerConfig(ClientAuthRequired, NodeVerifier("c1", nil))
	// n2 dials n1 and wants n1.
	if serr, cerr := handshake(t, server, n2.ClientConfig("", NodeVerifier("c1", func() string { return "n1" }))); serr != nil || cerr != nil {
		t.Fatalf("n2 → n1: server %v, client %v", serr, cerr)
	}
	// n2 dials what it thinks is n3: n1's certificate names n1.
	_, cerr := handshake(t, server, n2.ClientConfig("", NodeVerifier("c1", func() string { return "n3" })))
	if cerr == nil || !strings.Contains(cerr.Error(), `want node "n3"`) {
		t.Fatalf("wrong node: %v", cerr)
	}
	// A client certificate is not a node.
	ops := source(t, dir, "ops")
	serr, _ := handshake(t, server, ops.ClientConfig("", nil))
	if serr == nil || !strings.Contains(serr.Error(), "not a node") {
		t.Fatalf("client cert on the peer port: %v", serr)
	}
}

func TestAnotherCAIsRefused(t *testing.T) {
	mine, theirs := pki(t, "c1"), pki(t, "c1")
	server := source(t, mine, "n1").ServerConfig(ClientAuthRequired, NodeVerifier("c1", nil))
	serr, cerr := handshake(t, server, source(t, theirs, "n2").ClientConfig("", NodeVerifier("c1", nil)))
	if serr == nil || cerr == nil {
		t.Fatalf("another CA: server %v, client %v; want both refused", serr, cerr)
	}
}

func TestOptionalClientAuthAcceptsNoCertificate(t *testing.T) {
	dir := pki(t, "c1")
	server := source(t, dir, "n1").ServerConfig(ClientAuthOptional, nil)
	ca, _ := CAFiles(dir)
	anon, err := NewSource(Files{CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(t, server, anon.ClientConfig("", nil)); serr != nil || cerr != nil {
		t.Fatalf("no client certificate, optional: server %v, client %v", serr, cerr)
	}
	required := source(t, dir, "n1").ServerConfig(ClientAuthRequired, nil)
	if serr, _ := handshake(t, required, anon.ClientConfig("", nil)); serr == nil {
		t.Fatal("no client certificate accepted where one is required")
	}
}

func TestRenewedFilesAreServedWithoutARestart(t *testing.T) {
	dir := pki(t, "c1")
	s := source(t, dir, "n1")
	clock := time.Now()
	s.now = func() time.Time { return clock }
	old := s.Expiry()
	// Renew: a new certificate for n1 with a shorter lifetime, in place.
	cert, key := CertFiles(dir, "n1")
	os.Remove(cert)
	os.Remove(key)
	if _, _, err := CreateCert(dir, CertRequest{ID: Identity{"c1", KindNode, "n1"}, Lifetime: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := s.Expiry(); !got.Equal(old) {
		t.Fatalf("reloaded before reloadEvery: %v", got)
	}
	reloaded := make(chan error, 1)
	s.OnReload = func(err error) { reloaded <- err }
	clock = clock.Add(reloadEvery)
	if got := s.Expiry(); got.After(time.Now().Add(49 * time.Hour)) {
		t.Fatalf("expiry %v after the renewal, want within 48h", got)
	}
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	// A broken file keeps the old certificate and reports the failure.
	if err := os.WriteFile(cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(reloadEvery)
	if s.Certificate() == nil {
		t.Fatal("a broken renewal dropped the certificate")
	}
	if err := <-reloaded; err == nil {
		t.Fatal("a broken renewal reported no error")
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	dir := pki(t, "prod")
	leaf := source(t, dir, "n2").Leaf()
	id, ok := IdentityOf(leaf)
	if !ok || id != (Identity{"prod", KindNode, "n2"}) || id.String() != "xce://prod/node/n2" {
		t.Fatalf("identity %v %v", id, ok)
	}
}
