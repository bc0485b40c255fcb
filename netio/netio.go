// Package netio owns the node's client port: the listener that carries the
// HTTP/2 API, its connection limits and metrics, and the client transport.
// Listeners are created here or handed in (inherited across a graceful
// restart). The Raft peer port is the Raft backend's (ha/raftha/peernet).
package netio

import (
	"fmt"
	"net"
)

// Listen opens a TCP listener, naming the address in the error.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}
