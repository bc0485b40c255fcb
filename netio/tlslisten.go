package netio

import (
	"crypto/tls"
	"net"
	"sync"

	"github.com/rs/zerolog"
)

// handshakeErrPrefix starts net/http's message for a failed handshake.
const handshakeErrPrefix = "http: TLS handshake error from "

// maxOnceLogged bounds the remote hosts and reasons a onceLog remembers;
// past it, it stops logging new ones (the refusals are still counted).
const maxOnceLogged = 4096

// tlsListener serves TLS over the (capped) connections of its listener.
// It looks at each connection's first byte: a TLS connection starts with a
// handshake record (22); anything else is cleartext, counted and logged.
type tlsListener struct {
	net.Listener
	s *Server
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(&sniffConn{Conn: c, s: l.s}, l.s.tls), nil
}

// sniffConn tells cleartext from TLS by the first byte read. A cleartext
// connection is counted and logged here, and its remote address kept in
// Server.cleartext until its handshake's failure is reported (see
// handshakeFailed).
type sniffConn struct {
	net.Conn
	s       *Server
	checked bool // only the handshake's goroutine reads before it is set
}

const recordTypeHandshake = 22

func (c *sniffConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.checked {
		c.checked = true
		if b[0] != recordTypeHandshake {
			remote := c.RemoteAddr().String()
			c.s.cleartext.Store(remote, true)
			c.s.m.refused[ReasonPlaintext].Inc()
			c.s.tlsLog.warn(remote, ReasonPlaintext, "cleartext connection to the TLS client port refused: the client must use TLS (https://)", "")
		}
	}
	return n, err
}

// capOf is the capped connection under c (a TLS connection's own), or
// nil when the listener has no cap.
func capOf(c net.Conn) *conn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if sc, ok := c.(*sniffConn); ok {
		c = sc.Conn
	}
	lc, _ := c.(*conn)
	return lc
}

// onceLog logs a warning once per remote host and reason, so that a
// reason a host has not been logged for yet is never hidden behind one it
// has (a client whose certificate is refused after a connection it closed
// early).
type onceLog struct {
	log zerolog.Logger
	max int

	mu   sync.Mutex
	seen map[string]bool
}

func newOnceLog(log zerolog.Logger, max int) *onceLog {
	return &onceLog{log: log, max: max, seen: map[string]bool{}}
}

// warn logs msg, with the error's detail when there is one, unless it
// logged reason for remote's host before.
func (o *onceLog) warn(remote, reason, msg, detail string) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	key := host + "\x00" + reason
	o.mu.Lock()
	logIt := !o.seen[key] && len(o.seen) < o.max
	if logIt {
		o.seen[key] = true
	}
	o.mu.Unlock()
	if logIt {
		e := o.log.Warn().Str("remote", remote)
		if detail != "" {
			e = e.Str("reason", detail)
		}
		e.Msg(msg + " (logged once per remote host and reason)")
	}
}
