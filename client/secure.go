package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/xce/xce/client/transport"
	"github.com/xce/xce/tlsconf"
)

// Credentials are what a client presents to the nodes and trusts them by,
// all optional: a CA file to verify the nodes' certificates, a certificate
// and key of its own (a client or worker identity), a bearer token. The
// CLI reads them from --ca-file, --cert-file, --key-file and --token, or
// XCE_CA_FILE, XCE_CERT_FILE, XCE_KEY_FILE and XCE_TOKEN.
type Credentials struct {
	CAFile, CertFile, KeyFile string
	Token                     string
}

// String names the files and whether a token is set, never the token.
func (c Credentials) String() string {
	tok := "no token"
	if c.Token != "" {
		tok = "token set"
	}
	return fmt.Sprintf("ca %q, cert %q, key %q, %s", c.CAFile, c.CertFile, c.KeyFile, tok)
}

// TLS reports whether the credentials ask for TLS: a file is named.
func (c Credentials) TLS() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// TLSConfig is the TLS client configuration of the credentials' files, nil
// when none is named (plaintext). A renewed certificate and key are picked
// up at the next handshake.
//
// How a node is verified (docs/design.md, "Interfaces that tests and
// operators rely on"): with a CA file, the node's certificate must chain
// to that CA and name an xce node identity (xce://<cluster>/node/<id>);
// the address dialled (often an IP address, or a leader hint) need not
// appear in it, since a cluster's own CA signs only its members. Without a CA file (a node whose certificate a
// public CA signed) the system's roots verify it and it must name the
// host dialled, as for any HTTPS server.
func (c Credentials) TLSConfig() (*tls.Config, error) {
	if !c.TLS() {
		return nil, nil
	}
	src, err := tlsconf.NewSource(tlsconf.Files{CA: c.CAFile, Cert: c.CertFile, Key: c.KeyFile})
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := src.Certificate(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil
	}
	if c.CAFile != "" {
		// Verified in VerifyConnection against the current pool, by
		// identity rather than by the name dialled.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error { return verifyNode(src.Pool(), cs.PeerCertificates) }
	}
	return cfg, nil
}

// verifyNode checks that the chain the server sent verifies against roots
// and names an xce node.
func verifyNode(roots *x509.CertPool, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("the server sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain, Err: err}
	}
	id, ok := tlsconf.IdentityOf(chain[0])
	if !ok || id.Kind != tlsconf.KindNode {
		return &tls.CertificateVerificationError{UnverifiedCertificates: chain,
			Err: fmt.Errorf("the server's certificate %q names no xce node", chain[0].Subject.CommonName)}
	}
	return nil
}

// NewHTTPClient returns the HTTP client the library uses by default: the
// transport package's (HTTP/1.1, calls made on the caller's goroutine),
// carrying https with cfg when cfg is not nil.
func NewHTTPClient(cfg *tls.Config) *http.Client {
	if cfg == nil {
		return &http.Client{Transport: transport.New()}
	}
	return &http.Client{Transport: transport.NewTLS(cfg)}
}

// bearer sets the Authorization header of every call.
type bearer struct{ header string }

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", b.header)
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", b.header)
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// refusal maps an Unauthenticated or PermissionDenied answer to the
// client's error, nil for any other.
func refusal(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated:
		return fmt.Errorf("%w: %s", ErrUnauthenticated, connectMsg(err))
	case connect.CodePermissionDenied:
		return fmt.Errorf("%w: %s", ErrPermissionDenied, connectMsg(err))
	}
	return nil
}

// badCertificate reports whether err is a TLS handshake that failed on a
// certificate, either side's: another node would refuse it the same way,
// so no retry helps.
func badCertificate(err error) bool {
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		return true
	}
	// The node's refusal of the client's certificate arrives as an alert
	// ("remote error: tls: bad certificate", "… certificate required",
	// "… unknown certificate authority", "… expired certificate").
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return strings.Contains(op.Err.Error(), "certificate")
	}
	return false
}
