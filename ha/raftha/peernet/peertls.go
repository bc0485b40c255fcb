package peernet

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/tlsconf"
)

// Reasons a peer is refused at the TLS handshake of the peer port: the
// values of the reason label of xce_peer_tls_refused_total
// (docs/operations.md, "TLS on the peer port").
const (
	// PeerRefusedPlaintext: the peer spoke plaintext (no peer_tls in its
	// config) to this TLS port.
	PeerRefusedPlaintext = "plaintext"
	// PeerRefusedNoCertificate: the dialling peer sent no certificate.
	PeerRefusedNoCertificate = "no_certificate"
	// PeerRefusedBadCertificate: the certificate does not verify against
	// peer_tls.ca_file (another CA, a self-signed one, a wrong key usage).
	PeerRefusedBadCertificate = "bad_certificate"
	// PeerRefusedExpired: the certificate has expired (or is not yet
	// valid).
	PeerRefusedExpired = "expired"
	// PeerRefusedNotANode: the certificate names no node (a client's or a
	// worker's, or no xce identity at all).
	PeerRefusedNotANode = "not_a_node"
	// PeerRefusedOtherCluster: the certificate names a node of another
	// cluster.
	PeerRefusedOtherCluster = "other_cluster"
	// PeerRefusedWrongNode: the certificate names a node that is not a
	// member of the cluster's configuration, or, dialling, not the node
	// the configuration gives the address dialled.
	PeerRefusedWrongNode = "wrong_node"
	// PeerRefusedByPeer: the other end aborted the handshake, refusing this
	// node's certificate (its own log says why).
	PeerRefusedByPeer = "refused_by_peer"
	// PeerRefusedHandshake: any other handshake failure.
	PeerRefusedHandshake = "handshake"
)

var peerRefusedReasons = []string{
	PeerRefusedPlaintext, PeerRefusedNoCertificate, PeerRefusedBadCertificate, PeerRefusedExpired,
	PeerRefusedNotANode, PeerRefusedOtherCluster, PeerRefusedWrongNode, PeerRefusedByPeer, PeerRefusedHandshake,
}

// PeerTLSMetrics count the peer port's TLS refusals.
type PeerTLSMetrics struct {
	refused *prometheus.CounterVec
}

// NewPeerTLSMetrics creates the metrics and registers them with reg (none
// when reg is nil; a registry that already has them lends its own). Every
// reason shows, at zero until it happens.
func NewPeerTLSMetrics(reg prometheus.Registerer) *PeerTLSMetrics {
	m := &PeerTLSMetrics{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xce_peer_tls_refused_total",
		Help: "Peer connections refused at the TLS handshake of the peer port, either end, by reason: plaintext (the peer has no peer_tls), " +
			"no_certificate, bad_certificate (does not verify against peer_tls.ca_file), expired, not_a_node (a client's certificate, or no xce identity), " +
			"other_cluster, wrong_node (a node not in the cluster's configuration, or not the one dialled), refused_by_peer (the other end refused this node's certificate), " +
			"handshake (any other failure).",
	}, []string{"reason"})}
	if reg != nil {
		if err := reg.Register(m.refused); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if v, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					m.refused = v
				}
			}
		}
	}
	for _, r := range peerRefusedReasons {
		m.refused.WithLabelValues(r)
	}
	return m
}

func (m *PeerTLSMetrics) inc(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

// PeerTLS is the peer port's mutual TLS: both ends present a certificate
// signed by the cluster's CA that names their node of this cluster
// (tlsconf.Identity, kind node), and that node is a member of the
// cluster's configuration (docs/operations.md, "TLS on the peer port").
type PeerTLS struct {
	// Files are peer_tls's CA, certificate and key; renewed files are
	// used for new handshakes without a restart.
	Files tlsconf.Files
	// Cluster is this node's cluster id.
	Cluster string
	// Peers maps each member's peer address to its node id, as the config
	// names them; it stands in while Members is nil or returns nil.
	Peers map[string]string
	// Members, when set, returns the current configuration's members
	// (peer address → node id). It is called at each handshake, from the
	// goroutines that make them, so a member added or removed at run time
	// is accepted or refused from the next connection on. nil means not
	// known yet (Peers is used); an empty map is a configuration that does
	// not hold this node yet.
	Members func() map[string]string
	// Metrics, when set, count the refusals.
	Metrics *PeerTLSMetrics
	// Logger receives each refusal, once per peer and reason.
	Logger zerolog.Logger
}

// peerTLS is a PeerTLS in use.
type peerTLS struct {
	PeerTLS
	src *tlsconf.Source
	// self is the node this node's certificate names.
	self   string
	server *tls.Config

	mu     sync.Mutex
	logged map[refusalKey]bool
}

type refusalKey struct{ peer, reason string }

// maxLoggedRefusals bounds the memory of refusals already logged; past it
// the memory starts again.
const maxLoggedRefusals = 4096

func newPeerTLS(p PeerTLS) (*peerTLS, error) {
	if p.Files.CA == "" || p.Files.Cert == "" || p.Files.Key == "" {
		return nil, errors.New("peer TLS needs a CA file, a certificate and its key (mutual TLS)")
	}
	src, err := tlsconf.NewSource(p.Files)
	if err != nil {
		return nil, fmt.Errorf("peer_tls: %w", err)
	}
	t := &peerTLS{PeerTLS: p, src: src, logged: map[refusalKey]bool{}}
	log := p.Logger
	src.OnReload = func(err error) {
		if err != nil {
			log.Warn().Err(err).Msg("peer_tls: the renewed files do not load; handshakes keep the certificate loaded before")
			return
		}
		log.Info().Time("expires", src.Expiry()).Msg("peer_tls: loaded renewed certificate files for new handshakes")
	}
	t.server = src.ServerConfig(tlsconf.ClientAuthRequired, t.acceptVerifier())
	var name string
	if id, ok := tlsconf.IdentityOf(src.Leaf()); ok {
		name, t.self = id.String(), id.Name
	}
	log.Info().Str("certificate", name).Time("expires", src.Expiry()).
		Msg("peer port: mutual TLS; a peer must present a certificate of the cluster's CA naming a member of the cluster's configuration")
	return t, nil
}

// members is the current configuration: peer address → node id.
func (t *peerTLS) members() map[string]string {
	if t.Members != nil {
		if m := t.Members(); m != nil {
			return m
		}
	}
	return t.Peers
}

// refusal is a certificate refused for reason.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// nodeOf vets that a verified certificate names a node of this cluster
// whose name want (when set) returns, and returns that node.
func (t *peerTLS) nodeOf(c *x509.Certificate, want func() string) (string, error) {
	id, ok := tlsconf.IdentityOf(c)
	if err := tlsconf.NodeVerifier(t.Cluster, want)(c); err != nil {
		switch {
		case !ok || id.Kind != tlsconf.KindNode:
			return "", &refusal{PeerRefusedNotANode, err}
		case id.Cluster != t.Cluster:
			return "", &refusal{PeerRefusedOtherCluster, err}
		default:
			return "", &refusal{PeerRefusedWrongNode, err}
		}
	}
	return id.Name, nil
}

// acceptVerifier vets a connecting peer: a node of this cluster that is a
// member of the current configuration. A node that is not in a
// configuration itself (one joining, before its leader's first entries
// reach it) accepts any node of this cluster: its new leader dials it
// before the configuration that names both reaches it.
func (t *peerTLS) acceptVerifier() func(*x509.Certificate) error {
	return func(c *x509.Certificate) error {
		name, err := t.nodeOf(c, nil)
		if err != nil {
			return err
		}
		member, selfMember := false, false
		for _, id := range t.members() {
			member = member || id == name
			selfMember = selfMember || id == t.self
		}
		if !member && selfMember {
			return &refusal{PeerRefusedWrongNode, fmt.Errorf("certificate names node %q of cluster %q, not a member of this cluster's configuration", name, t.Cluster)}
		}
		return nil
	}
}

// dialVerifier vets a dialled peer at addr: the node the configuration
// gives that address, or, for an address it does not hold, any member.
func (t *peerTLS) dialVerifier(addr string) func(*x509.Certificate) error {
	return func(c *x509.Certificate) error {
		m := t.members()
		want := m[addr]
		name, err := t.nodeOf(c, func() string { return want })
		if err != nil || want != "" {
			return err
		}
		for _, id := range m {
			if id == name {
				return nil
			}
		}
		return &refusal{PeerRefusedWrongNode, fmt.Errorf("certificate names node %q of cluster %q, not a member of this cluster's configuration", name, t.Cluster)}
	}
}

// classify names why a handshake failed; "" is no refusal of the peer's
// identity (the connection closed or timed out), which is not counted.
func classify(err error) (reason string, e error) {
	var ref *refusal
	var rh tls.RecordHeaderError
	var inv x509.CertificateInvalidError
	var ua x509.UnknownAuthorityError
	var cv *tls.CertificateVerificationError
	var op *net.OpError
	var ne net.Error
	switch {
	case errors.As(err, &ref):
		return ref.reason, err
	case errors.As(err, &rh) && rh.Conn != nil:
		return PeerRefusedPlaintext, fmt.Errorf("the peer spoke plaintext to this TLS peer port (is peer_tls set in its config?): %w", err)
	case errors.As(err, &inv) && inv.Reason == x509.Expired:
		return PeerRefusedExpired, err
	case errors.As(err, &ua), errors.As(err, &inv), errors.As(err, &cv):
		return PeerRefusedBadCertificate, err
	case strings.Contains(err.Error(), "didn't provide a certificate"):
		return PeerRefusedNoCertificate, err
	case errors.As(err, &op) && op.Op == "remote error":
		return PeerRefusedByPeer, fmt.Errorf("the peer refused this node's certificate: %w", err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.As(err, &ne) && ne.Timeout():
		return "", err
	}
	return PeerRefusedHandshake, err
}

// refused counts a failed handshake with peer and logs it, once per peer
// and reason. It reports whether the failure was a refusal.
func (t *peerTLS) refused(side, peer string, err error) (string, error) {
	reason, e := classify(err)
	if reason == "" {
		return "", e
	}
	t.Metrics.inc(reason)
	k := refusalKey{peer, reason}
	t.mu.Lock()
	first := !t.logged[k]
	if first {
		if len(t.logged) >= maxLoggedRefusals {
			clear(t.logged)
		}
		t.logged[k] = true
	}
	t.mu.Unlock()
	if first {
		t.Logger.Warn().Str("peer", peer).Str("side", side).Str("reason", reason).Err(e).
			Msg("refused a peer at the TLS handshake (logged once per peer and reason; every refusal counts in xce_peer_tls_refused_total)")
	}
	return reason, e
}

// dial completes the TLS handshake on a connection to addr within
// deadline.
func (t *peerTLS) dial(c net.Conn, addr string, deadline time.Time) (net.Conn, error) {
	tc := tls.Client(c, t.src.ClientConfig("", t.dialVerifier(addr)))
	_ = c.SetDeadline(deadline)
	err := tc.Handshake()
	_ = c.SetDeadline(time.Time{})
	if err != nil {
		_ = c.Close()
		reason, e := t.refused("dial", addr, err)
		if reason == "" && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			return nil, fmt.Errorf("peer TLS handshake with %s: %w (the port closed the connection: is peer_tls set on that node?)", addr, e)
		}
		return nil, fmt.Errorf("peer TLS handshake with %s: %w", addr, e)
	}
	return tc, nil
}

// serverConn is an accepted peer connection: its handshake runs on its
// first Read or Write, in the goroutine that serves it, under the deadlines
// raft set, so that a slow or silent peer never holds up the accept loop.
type serverConn struct {
	*tls.Conn
	t    *peerTLS
	once sync.Once
	err  error
}

func (c *serverConn) handshake() error {
	c.once.Do(func() {
		err := c.Conn.Handshake()
		if err == nil {
			return
		}
		reason, e := c.t.refused("accept", hostOf(c.Conn.NetConn().RemoteAddr()), err)
		if reason != "" {
			// Counted and logged here: raft closes the connection
			// without a word of its own.
			e = io.EOF
		}
		c.err = e
	})
	return c.err
}

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
