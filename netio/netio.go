// Package netio owns the node's sockets: the client listener that carries the
// HTTP/2 API and the Raft peer stream layer. Listeners are created here or
// handed in (inherited across a graceful restart), never opened by raft.
package netio

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/raft"
)

// Listen opens a TCP listener, naming the address in the error.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}

// StreamLayer is raft's transport stream over a listener we own, so the peer
// socket can be inherited or wrapped (TLS) without raft calling net.Listen.
type StreamLayer struct {
	net.Listener
	advertise net.Addr
	source    *net.TCPAddr
}

// NewStreamLayer wraps l; advertise is the address peers dial (the configured
// peer_addr, which may differ from l.Addr() when l listens on all interfaces
// or behind a proxy). A non-empty dialFrom is the local IP outbound peer
// connections leave from.
func NewStreamLayer(l net.Listener, advertise, dialFrom string) (*StreamLayer, error) {
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
	return s, nil
}

// Dial implements raft.StreamLayer.
func (s *StreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
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
	return c, nil
}

// Addr implements net.Listener with the advertised address.
func (s *StreamLayer) Addr() net.Addr { return s.advertise }

// Limits bound what one client can make the API server hold.
type Limits struct {
	// ReadHeaderTimeout bounds how long a client may take to send headers.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps request headers.
	MaxHeaderBytes int
	// MaxConcurrentStreams caps HTTP/2 streams per connection.
	MaxConcurrentStreams int
}

// DefaultLimits are the API server's limits unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{
		ReadHeaderTimeout:    5 * time.Second,
		IdleTimeout:          2 * time.Minute,
		MaxHeaderBytes:       64 << 10,
		MaxConcurrentStreams: 256,
	}
}

// NewServer returns an HTTP server speaking HTTP/1.1 and cleartext HTTP/2
// (h2c, prior knowledge) on the same port.
func NewServer(h http.Handler, lim Limits) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: lim.MaxConcurrentStreams,
		},
	}
}
