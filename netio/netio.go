// Package netio owns the node's sockets: the client listener that carries the
// HTTP/2 API and the Raft peer stream layer. Listeners are created here or
// handed in (inherited across a graceful restart), never opened by raft.
package netio

import (
	"errors"
	"fmt"
	"net"
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
