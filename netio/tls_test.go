package netio

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/tlsconf"
)

func tlsServerConfig(t *testing.T) *tls.Config {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, "c"); err != nil {
		t.Fatal(err)
	}
	cert, key, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "c", Kind: tlsconf.KindNode, Name: "n1"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	src, err := tlsconf.NewSource(tlsconf.Files{Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return src.ServerConfig(tlsconf.ClientAuthNone, nil)
}

func dialTLS(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// The caps and the health reserve hold under TLS: two busy general
// connections, then a reserve connection that serves /healthz but answers
// 503 to anything else, then a refused one.
func TestTLSCapAndHealthReserve(t *testing.T) {
	b := newBlocker(t)
	s := startLimited(t, testLimits(), b, WithTLS(tlsServerConfig(t)))
	for range 2 {
		dialTLS(t, s.addr).send(t, "POST", "/api", "X-Block", "1")
	}
	testutil.Eventually(t, 5*time.Second, "two requests in the handler", func() bool { return b.count() == 2 })

	c := dialTLS(t, s.addr)
	c.send(t, "GET", "/healthz")
	if resp, body := c.response(t); resp.StatusCode != http.StatusOK || body != "GET /healthz" {
		t.Errorf("health check on the reserve: %d %q", resp.StatusCode, body)
	}
	testutil.Eventually(t, 5*time.Second, "the reserve's place freed", func() bool {
		return s.metric(t, "xce_client_connections", "pool", PoolReserve) == 0
	})
	c = dialTLS(t, s.addr)
	c.send(t, "POST", "/api")
	if resp, _ := c.response(t); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("API call on the reserve: %d, want 503", resp.StatusCode)
	}
	if n := s.refused(t, ReasonReserveNonHealth); n != 1 {
		t.Errorf("refused{reserve_non_health} = %v, want 1", n)
	}
}

// Cleartext to a TLS port: an HTTP/1 request is told to use HTTPS, an
// h2c preface is closed; both counted, and logged once per remote host.
func TestTLSRefusesCleartext(t *testing.T) {
	s := startLimited(t, testLimits(), newBlocker(t), WithTLS(tlsServerConfig(t)))
	for range 2 {
		c := dial(t, s.addr)
		c.send(t, "GET", "/healthz")
		b, _ := io.ReadAll(io.LimitReader(c.r, 4096))
		if !strings.Contains(string(b), "400 Bad Request") || !strings.Contains(string(b), "HTTPS") {
			t.Errorf("cleartext HTTP/1 answered %q", b)
		}
	}
	c := dial(t, s.addr)
	io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	if !c.closedByServer(5 * time.Second) {
		t.Error("an h2c preface to a TLS port is left open")
	}
	testutil.Eventually(t, 5*time.Second, "three cleartext connections counted", func() bool { return s.refused(t, ReasonPlaintext) == 3 })
	if n := strings.Count(s.log.String(), "cleartext connection to the TLS client port refused"); n != 1 {
		t.Errorf("logged %d times, want once per remote host:\n%s", n, s.log.String())
	}
	// A TLS client still gets through.
	tc := dialTLS(t, s.addr)
	tc.send(t, "GET", "/healthz")
	if resp, _ := tc.response(t); resp.StatusCode != http.StatusOK {
		t.Errorf("TLS after cleartext: %d", resp.StatusCode)
	}
}
