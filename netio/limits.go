package netio

import (
	"math"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Limits bound what clients can make the API server hold.
type Limits struct {
	// MaxConnections caps the connections open at once; 0 means no cap
	// (and no reserve). When all are open, a new connection takes the
	// place of one that has not sent a request yet, or of one idle
	// between requests for longer than ReadHeaderTimeout; when there is
	// none, it goes to the health reserve.
	MaxConnections int
	// HealthReserve more connections may be open beyond MaxConnections,
	// for /healthz and /readyz only: anything else on them gets 503.
	// Beyond the reserve a new connection is closed as soon as it is
	// accepted, so accept never runs out of file descriptors.
	HealthReserve int
	// FDHeadroom is how many file descriptors are kept for everything but
	// client connections. At start the caps are lowered, with a warning,
	// so that they and FDHeadroom fit RLIMIT_NOFILE.
	FDHeadroom int
	// ReadHeaderTimeout bounds how long a client may take to send a
	// request's headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a request's body, from the request's
	// start (HTTP/1.1 and HTTP/2 alike). Once the body is read, the
	// handler runs without a read deadline.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing the response, from the request's start
	// or, for a request with a body, from the end of the body; on a
	// LongStream, each write instead.
	WriteTimeout time.Duration
	// IdleTimeout closes idle keep-alive connections.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps request headers.
	MaxHeaderBytes int
	// MaxConcurrentStreams caps HTTP/2 streams per connection.
	MaxConcurrentStreams int
}

// fitFDs lowers the connection caps so that general + reserve + headroom
// fit in limit file descriptors. The reserve keeps its size while it is at
// most half of what is left, and at least one general connection remains
// (if even that does not fit, the descriptors run out first). It returns
// the caps unchanged when they fit or when general is 0 (no cap).
func fitFDs(general, reserve int, limit uint64, headroom int) (int, int) {
	if general <= 0 || limit >= math.MaxInt32 {
		return general, reserve
	}
	avail := int(limit) - headroom
	if general+reserve <= avail {
		return general, reserve
	}
	r := min(reserve, max(avail/2, 0))
	return max(avail-r, 1), r
}

// IsLoopback reports whether addr (host:port, or a bare host) can only be
// reached from this machine: a loopback IP or "localhost". An empty host,
// an unspecified address (0.0.0.0, ::) and every other address are
// reachable from beyond it.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
