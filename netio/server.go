package netio

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Server is the API's HTTP server (http.Server's fields and methods are
// its own) with the client port's limits: a cap on connections with a
// reserve for health checks (see Limits), a deadline for each request's
// headers and body and for its response, idle timeouts, and refusals
// counted in ConnMetrics and logged without flooding. Serve applies them
// to its listener.
type Server struct {
	*http.Server
	lim      Limits
	h        http.Handler
	log      zerolog.Logger
	m        *ConnMetrics
	refusals *refusalLog
	fdLimit  func() (uint64, error)
	tls      *tls.Config
	tlsLog   *onceLog
	// cleartext holds the remote addresses of the connections found
	// cleartext whose failed handshake net/http has yet to report.
	cleartext sync.Map

	hookOnce sync.Once
}

// Option configures NewServer.
type Option func(*Server)

// WithLogger logs the server's warnings (caps lowered to fit
// RLIMIT_NOFILE, refusals) to log; the default logs nothing.
func WithLogger(log zerolog.Logger) Option { return func(s *Server) { s.log = log } }

// WithMetrics counts in m; the default counts in metrics of its own that
// no registry exports.
func WithMetrics(m *ConnMetrics) Option { return func(s *Server) { s.m = m } }

// WithTLS serves TLS with cfg (HTTP/2 and HTTP/1.1 by ALPN) instead of
// cleartext. The connection caps apply to the TCP connections under it; a
// client that speaks cleartext to it is refused, counted and logged once
// per remote host (docs/operations.md, "TLS and permissions on the client
// port").
func WithTLS(cfg *tls.Config) Option { return func(s *Server) { s.tls = cfg } }

// healthPaths are the paths a connection of the health reserve serves.
var healthPaths = map[string]bool{"/healthz": true, "/readyz": true}

// NewServer returns a server of h speaking HTTP/1.1 and cleartext HTTP/2
// (h2c, prior knowledge) on the same port, or with WithTLS HTTP/1.1 and
// HTTP/2 over TLS, with lim applied.
func NewServer(h http.Handler, lim Limits, opts ...Option) *Server {
	s := &Server{lim: lim, h: h, log: zerolog.Nop(), fdLimit: fdLimit}
	for _, o := range opts {
		o(s)
	}
	if s.m == nil {
		s.m = NewConnMetrics(nil)
	}
	s.refusals = newRefusalLog(s.log, refusalSummaryEvery)
	s.tlsLog = newOnceLog(s.log, maxOnceLogged)
	var p http.Protocols
	p.SetHTTP1(true)
	if s.tls != nil {
		p.SetHTTP2(true)
		if len(s.tls.NextProtos) == 0 {
			s.tls.NextProtos = []string{"h2", "http/1.1"}
		}
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	s.Server = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		Protocols:         &p,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnContext:       s.connContext,
		// net/http's own messages (accept errors, malformed requests) come
		// in floods under attack; the limits log their own summary.
		ErrorLog: log.New(debugWriter{s}, "", 0),
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: lim.MaxConcurrentStreams,
			// A connection that takes no bytes for this long is closed.
			WriteByteTimeout: lim.WriteTimeout,
		},
	}
	return s
}

// Serve serves connections accepted on l, under the connection caps (after
// fitting them to RLIMIT_NOFILE), until the server is closed.
func (s *Server) Serve(l net.Listener) error {
	s.hookOnce.Do(func() {
		user := s.Server.ConnState
		s.Server.ConnState = func(c net.Conn, st http.ConnState) {
			if lc := capOf(c); lc != nil {
				lc.state(st)
			}
			if user != nil {
				user(c, st)
			}
		}
	})
	if s.lim.MaxConnections > 0 {
		l = s.limit(l)
	}
	if s.tls != nil {
		l = &tlsListener{Listener: l, s: s}
	}
	return s.Server.Serve(l)
}

// Shutdown is http.Server's, then logs what is left of the refusal
// summary.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.Server.Shutdown(ctx)
	s.refusals.stop()
	return err
}

// Close is http.Server's, then logs what is left of the refusal summary.
func (s *Server) Close() error {
	err := s.Server.Close()
	s.refusals.stop()
	return err
}

// limit wraps l in the connection caps, lowered to fit RLIMIT_NOFILE.
func (s *Server) limit(l net.Listener) net.Listener {
	general, reserve := s.lim.MaxConnections, s.lim.HealthReserve
	if n, err := s.fdLimit(); err != nil {
		s.log.Warn().Err(err).Msg("cannot read RLIMIT_NOFILE; the client connection caps are used as configured")
	} else if g, r := fitFDs(general, reserve, n, s.lim.FDHeadroom); g != general || r != reserve {
		s.log.Warn().Int("max_connections", general).Int("health_reserve", reserve).Uint64("rlimit_nofile", n).
			Int("fd_headroom", s.lim.FDHeadroom).Int("max_connections_now", g).Int("health_reserve_now", r).
			Msgf("RLIMIT_NOFILE is %d: limits.client.max_connections lowered from %d to %d and health_reserve from %d to %d, "+
				"keeping %d descriptors for the peer port and files; raise the limit (ulimit -n, LimitNOFILE=) to use the configured caps",
				n, general, g, reserve, r, s.lim.FDHeadroom)
		general, reserve = g, r
	}
	s.m.limit[PoolGeneral].Set(float64(general))
	s.m.limit[PoolReserve].Set(float64(reserve))
	return newLimitListener(l, s, general, reserve)
}

// refuse counts and logs one refusal.
func (s *Server) refuse(reason, remote string) {
	s.m.refused[reason].Inc()
	s.refusals.note(reason, remote)
}

type connKey struct{}

// connInfo is what a request's context knows of its server and connection.
type connInfo struct {
	s *Server
	c *conn // nil when the listener has no cap
}

func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, &connInfo{s: s, c: capOf(c)})
}

func isHealth(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && healthPaths[r.URL.Path]
}

// serveHTTP applies the per-request limits and the reserve's rule, then
// hands the request to the handler.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rc := http.NewResponseController(w)
	// (HTTP/2 gives a request without a body a Body that is at its end.)
	hasBody := r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
	if d := s.lim.WriteTimeout; d > 0 {
		// A body may take until its read deadline; the answer has
		// WriteTimeout after that (see deadlineBody).
		if hasBody && s.lim.ReadTimeout > 0 {
			d += s.lim.ReadTimeout
		}
		_ = rc.SetWriteDeadline(start.Add(d))
	}
	var c *conn
	if ci, _ := r.Context().Value(connKey{}).(*connInfo); ci != nil && ci.c != nil {
		c = ci.c
		c.begin()
		defer c.end()
		if c.reserve {
			// Free the reserve's place as soon as this answer is out.
			w.Header().Set("Connection", "close")
			if !isHealth(r) {
				c.refused(ReasonReserveNonHealth)
				// The connection is done for: it may make room at once
				// (the server may hold it a while to let the client read
				// the answer).
				c.doom()
				// Nor is its body wanted: the server would read what is
				// left of it to keep the connection.
				if hasBody {
					_ = rc.SetReadDeadline(time.Now())
				}
				w.Header().Set("Retry-After", "1")
				http.Error(w, "the client port is at its connection limit; this connection serves only /healthz and /readyz", http.StatusServiceUnavailable)
				return
			}
		}
	}
	if d := s.lim.ReadTimeout; d > 0 && hasBody {
		_ = rc.SetReadDeadline(start.Add(d))
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, s: s, c: c, remote: r.RemoteAddr}
	}
	s.h.ServeHTTP(w, r)
}

// deadlineBody is a request body read under ReadTimeout. Once the body is
// read whole, the read deadline is lifted (a handler may run on, and a
// long stream stay open, without it) and the answer has WriteTimeout from
// then; a timeout is counted.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	s       *Server
	c       *conn // nil without a connection cap
	remote  string
	long    bool // the handler is a LongStream: it bounds its writes itself
	settled bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.settled {
		b.settled = true
		switch {
		case errors.Is(err, io.EOF):
			_ = b.rc.SetReadDeadline(time.Time{})
			if d := b.s.lim.WriteTimeout; d > 0 && !b.long {
				_ = b.rc.SetWriteDeadline(time.Now().Add(d))
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			if b.c != nil {
				b.c.refused(ReasonReadTimeout)
			} else {
				b.s.refuse(ReasonReadTimeout, b.remote)
			}
		}
	}
	return n, err
}

// LongStream marks h's calls as long streams (server streaming RPCs,
// profiles): instead of the whole call, each write must complete within
// WriteTimeout, so a stream may stay open as long as its client reads.
// The request body is still read under ReadTimeout.
func LongStream(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ci, _ := r.Context().Value(connKey{}).(*connInfo)
		if ci == nil || ci.s.lim.WriteTimeout <= 0 {
			h.ServeHTTP(w, r)
			return
		}
		if b, ok := r.Body.(*deadlineBody); ok {
			b.long = true
		}
		sw := &streamWriter{ResponseWriter: w, rc: http.NewResponseController(w), d: ci.s.lim.WriteTimeout}
		_ = sw.rc.SetWriteDeadline(time.Time{})
		// What the server writes after the handler (the end of the
		// response) is bounded too.
		defer sw.arm()
		h.ServeHTTP(sw, r)
	})
}

// streamWriter gives each write and flush of a long stream WriteTimeout.
type streamWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *streamWriter) arm()    { _ = w.rc.SetWriteDeadline(time.Now().Add(w.d)) }
func (w *streamWriter) disarm() { _ = w.rc.SetWriteDeadline(time.Time{}) }

func (w *streamWriter) Write(p []byte) (int, error) {
	w.arm()
	defer w.disarm()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher, which the RPC library's streams need.
func (w *streamWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush with its error, for http.ResponseController.
func (w *streamWriter) FlushError() error {
	w.arm()
	defer w.disarm()
	return w.rc.Flush()
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// debugWriter logs net/http's messages at debug level, except a failed
// TLS handshake, which is counted and logged as handshakeFailed says.
type debugWriter struct{ s *Server }

func (d debugWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if d.s.tls != nil && strings.HasPrefix(msg, handshakeErrPrefix) {
		remote, detail, _ := strings.Cut(strings.TrimPrefix(msg, handshakeErrPrefix), ": ")
		d.s.handshakeFailed(remote, detail, msg)
		return len(p), nil
	}
	d.s.log.Debug().Str("component", "http").Msg(msg)
	return len(p), nil
}

// handshakeFailed counts once, and logs, a TLS handshake with remote that
// failed with detail (msg is net/http's whole message). Only a handshake
// TLS refused is a warning, once per remote host and reason; the rest is
// logged at debug level. A cleartext connection was counted and warned of
// at its first byte (sniffConn); a timeout, by the capped connection when
// there is a cap (conn.Read).
func (s *Server) handshakeFailed(remote, detail, msg string) {
	_, cleartext := s.cleartext.LoadAndDelete(remote)
	reason := handshakeFailure(cleartext, detail)
	switch reason {
	case ReasonTLSHandshake:
		s.m.refused[reason].Inc()
		s.tlsLog.warn(remote, reason, "tls handshake failed on the client port", detail)
		return
	case ReasonClosedBeforeHandshake:
		s.m.refused[reason].Inc()
	case ReasonReadTimeout, ReasonWriteTimeout:
		if s.lim.MaxConnections <= 0 {
			s.refuse(reason, remote)
		}
	}
	s.log.Debug().Str("component", "http").Msg(msg)
}

// handshakeFailure names what a failed TLS handshake on the client port
// was. net/http reports only the text of the handshake's error (detail):
// an error of the socket is a *net.OpError ("read tcp …: …", "write tcp
// …: …") or io.EOF; anything else is TLS's own (crypto/tls, x509, an
// alert from the client), a refused handshake. Of the socket's, a
// deadline is a read or write timeout, a connection the server closed (it
// shuts down) is nothing (""), and the rest, a connection the client
// closed or reset, is ReasonClosedBeforeHandshake. A connection whose
// first byte was cleartext is ReasonPlaintext, whatever followed.
func handshakeFailure(cleartext bool, detail string) string {
	switch {
	case cleartext:
		return ReasonPlaintext
	case detail == io.EOF.Error(), detail == io.ErrUnexpectedEOF.Error():
		return ReasonClosedBeforeHandshake
	case !strings.HasPrefix(detail, "read ") && !strings.HasPrefix(detail, "write "):
		// Not a *net.OpError of the socket: TLS's own.
		return ReasonTLSHandshake
	case strings.HasSuffix(detail, os.ErrDeadlineExceeded.Error()):
		if strings.HasPrefix(detail, "write ") {
			return ReasonWriteTimeout
		}
		return ReasonReadTimeout
	case strings.HasSuffix(detail, net.ErrClosed.Error()):
		return ""
	}
	return ReasonClosedBeforeHandshake
}
