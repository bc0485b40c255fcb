// Package peernet is the Raft backend's peer port: the stream layer raft's
// transport runs over, on a listener the node owns (so that the socket can
// be inherited across an upgrade without raft calling net.Listen), and its
// mutual TLS (docs/operations.md, "TLS on the peer port").
package peernet

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// StreamLayer is raft's transport stream over a listener we own, so the peer
// socket can be inherited, and wrapped in mutual TLS, without raft calling
// net.Listen.
type StreamLayer struct {
	net.Listener
	advertise net.Addr
	source    *net.TCPAddr
	tls       *peerTLS // nil: plaintext
}

// StreamOption tunes NewStreamLayer.
type StreamOption func(*streamOptions)

type streamOptions struct {
	tls *PeerTLS
}

// WithPeerTLS makes the stream layer speak mutual TLS: accepted peers and
// dialled ones must present a certificate that names their node
// (docs/operations.md, "TLS on the peer port").
func WithPeerTLS(p PeerTLS) StreamOption {
	return func(o *streamOptions) { o.tls = &p }
}

// NewStreamLayer wraps l; advertise is the address peers dial (the configured
// peer_addr, which may differ from l.Addr() when l listens on all interfaces
// or behind a proxy). A non-empty dialFrom is the local IP outbound peer
// connections leave from.
func NewStreamLayer(l net.Listener, advertise, dialFrom string, opts ...StreamOption) (*StreamLayer, error) {
	var o streamOptions
	for _, opt := range opts {
		opt(&o)
	}
	a, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("peer address %s: %w", advertise, err)
	}
	if a.IP == nil || a.IP.IsUnspecified() {
		return nil, errors.New("peer address " + advertise + ": not advertisable")
	}
	s := &StreamLayer{Listener: l, advertise: a}
	if dialFrom != "" {
		ip := net.ParseIP(dialFrom)
		if ip == nil {
			return nil, fmt.Errorf("peer source address %q: not an IP", dialFrom)
		}
		if !ip.IsUnspecified() {
			s.source = &net.TCPAddr{IP: ip}
		}
	}
	if o.tls != nil {
		t, err := newPeerTLS(*o.tls)
		if err != nil {
			return nil, err
		}
		s.tls = t
	}
	return s, nil
}

// Dial implements raft.StreamLayer. With peer TLS the handshake is done
// before it returns, within timeout; a refused connection is the TCP
// connect's own error (the exit watch tells an exited peer by it).
func (s *StreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	start := time.Now()
	d := net.Dialer{Timeout: timeout}
	if s.source != nil {
		d.LocalAddr = s.source
	}
	c, err := d.Dial("tcp", string(addr))
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if s.tls != nil {
		var deadline time.Time
		if timeout > 0 {
			deadline = start.Add(timeout)
		}
		return s.tls.dial(c, string(addr), deadline)
	}
	return c, nil
}

// Accept implements net.Listener. With peer TLS the handshake happens on
// the connection's first read or write, in the goroutine that serves it.
func (s *StreamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.tls == nil {
		return c, err
	}
	return &serverConn{Conn: tls.Server(c, s.tls.server), t: s.tls}, nil
}

// Addr implements net.Listener with the advertised address.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }
