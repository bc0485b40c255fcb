package netio

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
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
	// Counted once each: the failed handshakes that follow are not
	// refused handshakes too.
	testutil.Eventually(t, 5*time.Second, "the failed handshakes reported", func() bool {
		n := 0
		s.srv.cleartext.Range(func(any, any) bool { n++; return true })
		return n == 0
	})
	if n := s.refused(t, ReasonTLSHandshake); n != 0 {
		t.Errorf("refused{tls_handshake} = %v, want 0", n)
	}
	if strings.Contains(s.log.String(), "tls handshake failed on the client port") {
		t.Errorf("cleartext logged as a failed handshake too:\n%s", s.log.String())
	}
	// A TLS client still gets through.
	tc := dialTLS(t, s.addr)
	tc.send(t, "GET", "/healthz")
	if resp, _ := tc.response(t); resp.StatusCode != http.StatusOK {
		t.Errorf("TLS after cleartext: %d", resp.StatusCode)
	}
}

// What a failed TLS handshake was, from net/http's detail of it.
func TestHandshakeFailure(t *testing.T) {
	for _, tc := range []struct {
		cleartext bool
		detail    string
		want      string
	}{
		{true, "client sent an HTTP request to an HTTPS server", ReasonPlaintext},
		{true, "tls: first record does not look like a TLS handshake", ReasonPlaintext},
		{true, "EOF", ReasonPlaintext},
		{false, "remote error: tls: bad certificate", ReasonTLSHandshake},
		{false, "tls: failed to verify certificate: x509: certificate signed by unknown authority", ReasonTLSHandshake},
		{false, "tls: client offered only unsupported versions: [302 301]", ReasonTLSHandshake},
		{false, "tls: client didn't provide a certificate", ReasonTLSHandshake},
		{false, "tls: first record does not look like a TLS handshake", ReasonTLSHandshake},
		{false, "EOF", ReasonClosedBeforeHandshake},
		{false, "unexpected EOF", ReasonClosedBeforeHandshake},
		{false, "read tcp 127.0.0.1:7101->127.0.0.1:50000: read: connection reset by peer", ReasonClosedBeforeHandshake},
		{false, "write tcp 127.0.0.1:7101->127.0.0.1:50000: write: broken pipe", ReasonClosedBeforeHandshake},
		{false, "read tcp 127.0.0.1:7101->127.0.0.1:50000: i/o timeout", ReasonReadTimeout},
		{false, "write tcp 127.0.0.1:7101->127.0.0.1:50000: i/o timeout", ReasonWriteTimeout},
		{false, "read tcp 127.0.0.1:7101->127.0.0.1:50000: use of closed network connection", ""},
	} {
		if got := handshakeFailure(tc.cleartext, tc.detail); got != tc.want {
			t.Errorf("handshakeFailure(%v, %q) = %q, want %q", tc.cleartext, tc.detail, got, tc.want)
		}
	}
}

// closeAfterWrite closes the connection once its first write is out: a
// client that sends its ClientHello and goes.
type closeAfterWrite struct{ net.Conn }

func (c closeAfterWrite) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	_ = c.Conn.Close()
	return n, err
}

// A client that closes its connection before the handshake ends, whether
// before a byte or after its ClientHello, is no refused handshake: it is
// counted as closed_before_handshake and logged at debug level only. A
// handshake TLS refuses from the same host later is still counted and
// logged.
func TestTLSClosedBeforeHandshake(t *testing.T) {
	s := startLimited(t, testLimits(), newBlocker(t), WithTLS(tlsServerConfig(t)))
	dial(t, s.addr).Close()
	raw, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := tls.Client(closeAfterWrite{raw}, &tls.Config{InsecureSkipVerify: true}).Handshake(); err == nil {
		t.Fatal("a handshake on a closed connection succeeded")
	}
	testutil.Eventually(t, 5*time.Second, "two connections closed before the handshake counted", func() bool {
		return s.refused(t, ReasonClosedBeforeHandshake) == 2
	})
	if n := s.refused(t, ReasonTLSHandshake); n != 0 {
		t.Errorf("refused{tls_handshake} = %v, want 0", n)
	}
	if strings.Contains(s.log.String(), `"level":"warn"`) {
		t.Errorf("warned of connections the client closed:\n%s", s.log.String())
	}

	// The same host with a client that trusts no CA: refused, and logged.
	c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := tls.Client(c, &tls.Config{ServerName: "127.0.0.1", RootCAs: x509.NewCertPool()}).Handshake(); err == nil {
		t.Fatal("a client that trusts no CA finished the handshake")
	}
	testutil.Eventually(t, 5*time.Second, "the refused handshake counted", func() bool { return s.refused(t, ReasonTLSHandshake) == 1 })
	if n := strings.Count(s.log.String(), "tls handshake failed on the client port"); n != 1 {
		t.Errorf("logged %d refused handshakes, want 1:\n%s", n, s.log.String())
	}
	if n := s.refused(t, ReasonClosedBeforeHandshake); n != 2 {
		t.Errorf("refused{closed_before_handshake} = %v, want 2", n)
	}
}

// A TLS connection that sends nothing is cut off at read_header_timeout
// and counted once, as a read timeout: the handshake it never began is no
// refused handshake.
func TestTLSSilentConnection(t *testing.T) {
	lim := testLimits()
	lim.ReadHeaderTimeout = 200 * time.Millisecond
	s := startLimited(t, lim, newBlocker(t), WithTLS(tlsServerConfig(t)))
	if !dial(t, s.addr).closedByServer(5 * time.Second) {
		t.Fatal("a silent connection is left open")
	}
	testutil.Eventually(t, 5*time.Second, "the read timeout counted", func() bool { return s.refused(t, ReasonReadTimeout) == 1 })
	for _, r := range []string{ReasonTLSHandshake, ReasonClosedBeforeHandshake} {
		if n := s.refused(t, r); n != 0 {
			t.Errorf("refused{%s} = %v, want 0", r, n)
		}
	}
}
