package raft

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-msgpack/v2/codec"
)

// Bounds a NetworkTransport puts on its peer port. A zero field of
// NetworkTransportConfig takes these.
const (
	// DefaultMaxRPCSize bounds the encoded size of one RPC request or
	// response (InstallSnapshot's data stream excluded). A leader never
	// builds an AppendEntries above its own limit unless a single entry is
	// larger, so the limit must exceed the largest entry an application
	// writes.
	DefaultMaxRPCSize int64 = 32 << 20

	// DefaultRPCTimeout bounds reading one inbound RPC once its first byte
	// has arrived, and writing its response. The transport uses the larger
	// of it and NetworkTransportConfig.Timeout.
	DefaultRPCTimeout = 10 * time.Second

	// DefaultIdleTimeout closes an inbound connection that starts no RPC
	// for this long. Raft's leader sends on its connections every
	// heartbeat interval and commit timeout; what sits idle longer is a
	// pooled connection nobody uses or a connection nobody meant to use.
	DefaultIdleTimeout = 2 * time.Minute

	// DefaultFirstByteTimeout closes an inbound connection that has not
	// begun its first RPC (or announced itself a watcher) this long after
	// it was accepted. A peer sends its first RPC as soon as it has dialed;
	// a pipeline sends at least every CommitTimeout.
	DefaultFirstByteTimeout = 5 * time.Second

	// DefaultMaxInboundConns caps the inbound connections open at once. A
	// peer holds a few (heartbeats, replication, its connection pool).
	DefaultMaxInboundConns = 128

	// maxRPCContainers bounds the maps and arrays in one RPC. Each decodes
	// into an allocation much larger than its one-byte encoding; raft's
	// largest message, an AppendEntries of MaxAppendEntries entries (at
	// most 1024), holds about one per entry.
	maxRPCContainers = 1 << 14

	// refusalLogInterval is how often a refusal is logged per peer and
	// reason; the refusals in between are counted in the next line.
	refusalLogInterval = time.Minute
)

// Reasons a NetworkTransport refuses a connection or an RPC: the values of
// the "reason" label of the raft.net.refused counter it reports through
// go-metrics, and of TransportStats.
const (
	RefusedTooLarge           = "too_large"            // over MaxRPCSize, or a declared length beyond it
	RefusedTooManyConnections = "too_many_connections" // over MaxInboundConns: closed on accept
	RefusedIdle               = "idle"                 // no RPC started within IdleTimeout
	RefusedSlow               = "slow"                 // an RPC not read, or its response not written, within RPCTimeout
	RefusedBadTerm            = "bad_term"             // a term that is not TermOK
	RefusedMalformed          = "malformed"            // an RPC that does not decode, truncated or of unknown type
	RefusedFirstByte          = "first_byte"           // no RPC begun within FirstByteTimeout of the accept
	RefusedEvicted            = "evicted"              // closed at MaxInboundConns to admit a newer one: it had carried no RPC
)

// RefusalReasons lists the reasons a NetworkTransport refuses, in the order
// of TransportStats' fields.
var RefusalReasons = []string{RefusedTooLarge, RefusedTooManyConnections, RefusedIdle, RefusedSlow, RefusedBadTerm,
	RefusedMalformed, RefusedFirstByte, RefusedEvicted}

type refusalReason int

const (
	reasonTooLarge refusalReason = iota
	reasonTooManyConnections
	reasonIdle
	reasonSlow
	reasonBadTerm
	reasonMalformed
	reasonFirstByte
	reasonEvicted
	numRefusalReasons
)

func (r refusalReason) String() string { return RefusalReasons[r] }

// refusedMetric is the go-metrics key of the refusal counter.
var refusedMetric = []string{"raft", "net", "refused"}

// TransportStats counts what a NetworkTransport refused since it started,
// by reason (see the Refused* constants).
type TransportStats struct {
	TooLarge, TooManyConnections, Idle, Slow, BadTerm, Malformed, FirstByte, Evicted uint64
}

// ByReason returns the counts keyed by the Refused* constants.
func (s TransportStats) ByReason() map[string]uint64 {
	return map[string]uint64{
		RefusedTooLarge: s.TooLarge, RefusedTooManyConnections: s.TooManyConnections, RefusedIdle: s.Idle,
		RefusedSlow: s.Slow, RefusedBadTerm: s.BadTerm, RefusedMalformed: s.Malformed,
		RefusedFirstByte: s.FirstByte, RefusedEvicted: s.Evicted,
	}
}

// Total is the sum of all counts.
func (s TransportStats) Total() uint64 {
	return s.TooLarge + s.TooManyConnections + s.Idle + s.Slow + s.BadTerm + s.Malformed + s.FirstByte + s.Evicted
}

// refusalCounters is what a NetworkTransport has refused, by reason.
type refusalCounters [numRefusalReasons]atomic.Uint64

// TransportStats returns what the transport has refused since it started.
func (n *NetworkTransport) TransportStats() TransportStats {
	c := &n.refused
	return TransportStats{
		TooLarge: c[reasonTooLarge].Load(), TooManyConnections: c[reasonTooManyConnections].Load(),
		Idle: c[reasonIdle].Load(), Slow: c[reasonSlow].Load(), BadTerm: c[reasonBadTerm].Load(),
		Malformed: c[reasonMalformed].Load(), FirstByte: c[reasonFirstByte].Load(), Evicted: c[reasonEvicted].Load(),
	}
}

// MaxRPCSize is the largest encoded RPC the transport accepts (0: no
// limit). Raft's leader keeps its AppendEntries below it (see
// WithMaxRPCSize).
func (n *NetworkTransport) MaxRPCSize() int64 {
	if n.maxRPCSize < 0 {
		return 0
	}
	return n.maxRPCSize
}

// WithMaxRPCSize is a Transport whose peers refuse RPCs above a size. A
// leader keeps each AppendEntries below it, sending at least one entry
// per request.
type WithMaxRPCSize interface {
	// MaxRPCSize returns the limit in bytes, 0 for none.
	MaxRPCSize() int64
}

// refuse counts a refusal, reports it to go-metrics and logs it, at most
// once per peer and reason per refusalLogInterval.
func (n *NetworkTransport) refuse(reason refusalReason, peer string, err error) {
	n.refused[reason].Add(1)
	metrics.IncrCounterWithLabels(refusedMetric, 1, []metrics.Label{{Name: "reason", Value: reason.String()}})
	show, suppressed := n.refusalLog.allow(peer, reason, time.Now())
	if !show || n.logger == nil {
		return
	}
	level := hclog.Warn
	if reason == reasonIdle {
		// Idle pooled connections are closed in normal operation too.
		level = hclog.Debug
	}
	n.logger.Log(level, "refused a peer connection or RPC", "peer", peer, "reason", reason.String(),
		"error", err, "refused-since-last-logged", suppressed)
}

// refusalLog rate-limits refusal logs per peer and reason.
type refusalLog struct {
	mu   sync.Mutex
	last map[refusalKey]*refusalSeen
}

type refusalKey struct {
	peer   string
	reason refusalReason
}

type refusalSeen struct {
	at         time.Time
	suppressed uint64
}

// allow reports whether a refusal may be logged now, and how many for the
// same peer and reason were not logged since the last one that was.
func (l *refusalLog) allow(peer string, reason refusalReason, now time.Time) (bool, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[refusalKey]*refusalSeen)
	}
	k := refusalKey{peer, reason}
	if s, ok := l.last[k]; ok && now.Sub(s.at) < refusalLogInterval {
		s.suppressed++
		return false, 0
	}
	var suppressed uint64
	if s, ok := l.last[k]; ok {
		suppressed = s.suppressed
	}
	if len(l.last) >= 1024 {
		// Many peers: forget those not seen for an interval.
		for key, s := range l.last {
			if now.Sub(s.at) >= refusalLogInterval {
				delete(l.last, key)
			}
		}
	}
	l.last[k] = &refusalSeen{at: now}
	return true, suppressed
}

// remoteHost names a connection's peer for logs: its host, without the
// port, which changes with every connection.
func remoteHost(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return "unknown"
	}
	s := a.String()
	if h, _, err := net.SplitHostPort(s); err == nil {
		return h
	}
	return s
}

// errRPCTooLarge is returned by an rpcGuard that refused the rest of a
// message.
type errRPCTooLarge struct{ msg string }

func (e *errRPCTooLarge) Error() string { return e.msg }

// rpcGuard sits between the msgpack decoder and a connection's buffered
// reader and bounds one message: its encoded size, and the lengths and
// counts it declares, before the decoder allocates from them. It follows
// the msgpack encoding byte by byte, as the decoder asks for it (without a
// read buffer the decoder reads exactly what it needs), and withholds the
// last byte of a header that declares more than the rest of the limit
// holds, so the decoder never learns the length.
//
// reset starts a new message. A refusal is sticky until then.
type rpcGuard struct {
	r     io.Reader
	limit int64 // of the current message; <= 0: none

	left int64 // bytes the current message may still use
	read int64 // bytes of the current message read so far
	err  error // the refusal
	// ioErr is the last error of r, unwrapped: the decoder's own errors
	// do not say whether a deadline passed or the peer hung up.
	ioErr error

	// Where the scan is: the header bytes of a token still to come (and
	// what they mean), or payload bytes to pass over.
	hdrNeed    int
	hdrKind    byte
	hdr        uint64
	skip       uint64
	containers int
}

func (g *rpcGuard) reset(limit int64) {
	*g = rpcGuard{r: g.r, limit: limit, left: limit}
}

func (g *rpcGuard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if g.limit > 0 {
		if g.left <= 0 {
			g.err = &errRPCTooLarge{fmt.Sprintf("message exceeds the %d-byte limit", g.limit)}
			return 0, g.err
		}
		if int64(len(p)) > g.left {
			p = p[:g.left]
		}
	}
	n, err := g.r.Read(p)
	if err != nil {
		g.ioErr = err
	}
	if g.limit > 0 && n > 0 {
		if k, serr := g.scan(p[:n]); serr != nil {
			g.err = serr
			g.read += int64(k)
			g.left -= int64(k)
			return k, serr
		}
		g.left -= int64(n)
	}
	g.read += int64(n)
	return n, err
}

// scan follows p through the msgpack encoding. On a refusal it returns
// how many bytes of p may still reach the decoder.
func (g *rpcGuard) scan(p []byte) (int, error) {
	i := 0
	for i < len(p) {
		if g.skip > 0 {
			k := uint64(len(p) - i)
			if k > g.skip {
				k = g.skip
			}
			g.skip -= k
			i += int(k)
			continue
		}
		b := p[i]
		i++
		// What the message may still use after this byte.
		rest := uint64(g.left - int64(i))
		if g.hdrNeed > 0 {
			g.hdr = g.hdr<<8 | uint64(b)
			g.hdrNeed--
			if g.hdrNeed == 0 {
				if err := g.endHeader(rest); err != nil {
					return i - 1, err
				}
			}
			continue
		}
		if err := g.startToken(b, rest); err != nil {
			return i - 1, err
		}
	}
	return len(p), nil
}

func (g *rpcGuard) header(kind byte, n int) {
	g.hdrKind, g.hdrNeed, g.hdr = kind, n, 0
}

// startToken reads a msgpack type byte.
func (g *rpcGuard) startToken(b byte, rest uint64) error {
	switch {
	case b <= 0x7f || b >= 0xe0: // fixint
		return nil
	case b <= 0x8f: // fixmap
		return g.container(true, uint64(b&0x0f), rest)
	case b <= 0x9f: // fixarray
		return g.container(false, uint64(b&0x0f), rest)
	case b <= 0xbf: // fixstr
		return g.payload(uint64(b&0x1f), rest)
	}
	switch b {
	case 0xc4, 0xd9, 0xc7: // bin8, str8, ext8
		g.header(b, 1)
	case 0xc5, 0xda, 0xc8, 0xdc, 0xde: // bin16, str16, ext16, array16, map16
		g.header(b, 2)
	case 0xc6, 0xdb, 0xc9, 0xdd, 0xdf: // bin32, str32, ext32, array32, map32
		g.header(b, 4)
	case 0xcc, 0xd0: // uint8, int8
		g.skip = 1
	case 0xcd, 0xd1: // uint16, int16
		g.skip = 2
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		g.skip = 4
	case 0xcb, 0xcf, 0xd3: // float64, uint64, int64
		g.skip = 8
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16, after a type byte
		g.skip = 1 + 1<<(b-0xd4)
	}
	// nil, bool and the unused 0xc1 have no more bytes; the decoder
	// refuses 0xc1 itself.
	return nil
}

// endHeader acts on a complete length or count.
func (g *rpcGuard) endHeader(rest uint64) error {
	switch g.hdrKind {
	case 0xdc, 0xdd:
		return g.container(false, g.hdr, rest)
	case 0xde, 0xdf:
		return g.container(true, g.hdr, rest)
	case 0xc7, 0xc8, 0xc9:
		return g.payload(g.hdr+1, rest) // the extension's type byte, then its data
	}
	return g.payload(g.hdr, rest)
}

func (g *rpcGuard) payload(n, rest uint64) error {
	if n > rest {
		return &errRPCTooLarge{fmt.Sprintf("message declares a %d-byte value, more than the %d bytes left of the %d-byte limit", n, rest, g.limit)}
	}
	g.skip = n
	return nil
}

func (g *rpcGuard) container(isMap bool, n, rest uint64) error {
	g.containers++
	if g.containers > maxRPCContainers {
		return &errRPCTooLarge{fmt.Sprintf("message holds more than %d maps and arrays", maxRPCContainers)}
	}
	elems := n
	if isMap {
		elems = 2 * n
	}
	// Every element takes at least a byte.
	if n > rest || elems > rest {
		return &errRPCTooLarge{fmt.Sprintf("message declares %d elements, more than the %d bytes left of the %d-byte limit", n, rest, g.limit)}
	}
	return nil
}

// refusal is why the transport closed a connection.
type refusal struct {
	reason refusalReason
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }

// classifyReadError says why reading an RPC through g failed: the guard's
// refusal, a deadline, or a message that does not decode.
func classifyReadError(g *rpcGuard, err error) *refusal {
	switch {
	case g.err != nil:
		return &refusal{reasonTooLarge, g.err}
	case isTimeout(g.ioErr):
		return &refusal{reasonSlow, fmt.Errorf("rpc not read within the deadline after %d bytes: %w", g.read, g.ioErr)}
	case g.ioErr != nil && (errors.Is(g.ioErr, io.EOF) || errors.Is(g.ioErr, io.ErrUnexpectedEOF)):
		return &refusal{reasonMalformed, fmt.Errorf("connection closed in the middle of an rpc, after %d bytes", g.read)}
	}
	return &refusal{reasonMalformed, err}
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	err = codecCause(err)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peerHungUp reports whether err means the peer closed the connection.
func peerHungUp(err error) bool {
	err = codecCause(err)
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED))
}

// codecCause returns the error under the msgpack codec's wrapping of
// it, which does not unwrap.
func codecCause(err error) error {
	for err != nil {
		c, ok := err.(interface{ Cause() error })
		if !ok || c.Cause() == nil || c.Cause() == err {
			return err
		}
		err = c.Cause()
	}
	return err
}

// zeroResponse clears a response refused after it was decoded, so that a
// caller that looks at it despite the error sees nothing of it.
func zeroResponse(resp interface{}) {
	switch m := resp.(type) {
	case *AppendEntriesResponse:
		*m = AppendEntriesResponse{}
	case *RequestVoteResponse:
		*m = RequestVoteResponse{}
	case *RequestPreVoteResponse:
		*m = RequestPreVoteResponse{}
	case *InstallSnapshotResponse:
		*m = InstallSnapshotResponse{}
	case *TimeoutNowResponse:
		*m = TimeoutNowResponse{}
	}
}

// emptyResponseTo is the response that goes with an error to a refused
// request.
func emptyResponseTo(req interface{}) interface{} {
	switch req.(type) {
	case *AppendEntriesRequest:
		return &AppendEntriesResponse{}
	case *RequestVoteRequest:
		return &RequestVoteResponse{}
	case *RequestPreVoteRequest:
		return &RequestPreVoteResponse{}
	case *InstallSnapshotRequest:
		return &InstallSnapshotResponse{}
	case *TimeoutNowRequest:
		return &TimeoutNowResponse{}
	}
	return nil
}

// emptyResponse is the response sent with an error to a refused request.
func emptyResponse(rpcType uint8) interface{} {
	switch rpcType {
	case rpcAppendEntries:
		return &AppendEntriesResponse{}
	case rpcRequestVote:
		return &RequestVoteResponse{}
	case rpcRequestPreVote:
		return &RequestPreVoteResponse{}
	case rpcInstallSnapshot:
		return &InstallSnapshotResponse{}
	case rpcTimeoutNow:
		return &TimeoutNowResponse{}
	}
	return nil
}

// errorNotingReader passes an InstallSnapshot's data stream to raft and
// keeps the first error, to count a stream that missed its deadline.
type errorNotingReader struct {
	r   io.Reader
	err error
}

func (e *errorNotingReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// inboundState is how far an inbound connection has come.
type inboundState uint8

const (
	inboundNew     inboundState = iota // accepted, no RPC begun yet
	inboundWatcher                     // sent rpcWatch: held open, nothing read
	inboundUsed                        // has begun an RPC: never evicted
)

// inboundConn is what handleCommand reads an RPC from and answers on, and
// what the transport tracks of an open inbound connection.
type inboundConn struct {
	conn  net.Conn
	r     *bufio.Reader
	guard *rpcGuard
	dec   *codec.Decoder
	enc   *codec.Encoder
	peer  string

	// Guarded by inboundSet.mu.
	seq     uint64 // accept order
	state   inboundState
	evicted bool
}

// inboundSet tracks the open inbound connections for MaxInboundConns.
// At the cap a new connection takes the place of the oldest one that has
// begun no RPC (a silent one or a watcher); only if every open connection
// has carried an RPC is the new one refused. Connections that never speak
// thus cannot lock peers out for longer than a peer takes to dial again.
type inboundSet struct {
	mu     sync.Mutex
	conns  map[*inboundConn]struct{}
	seq    uint64
	closed bool // the transport has shut down
}

// admit adds ic under a cap of max (<= 0: none). At the cap it evicts the
// oldest connection that has begun no RPC and returns it, for the caller
// to close; ok is false when ic cannot be admitted: every open connection
// has carried an RPC, or the transport has shut down.
func (s *inboundSet) admit(ic *inboundConn, max int) (victim *inboundConn, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	if s.conns == nil {
		s.conns = make(map[*inboundConn]struct{})
	}
	if max > 0 && len(s.conns) >= max {
		for c := range s.conns {
			if c.state != inboundUsed && (victim == nil || c.seq < victim.seq) {
				victim = c
			}
		}
		if victim == nil {
			return nil, false
		}
		victim.evicted = true
		delete(s.conns, victim)
	}
	s.seq++
	ic.seq = s.seq
	s.conns[ic] = struct{}{}
	return victim, true
}

// remove forgets ic once its handler is done.
func (s *inboundSet) remove(ic *inboundConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, ic)
}

// mark moves ic to state unless it was evicted meanwhile, or the transport
// has shut down and state is inboundWatcher (shutdown closes watchers;
// one marked after it would stay open). It reports whether ic may go on.
func (s *inboundSet) mark(ic *inboundConn, state inboundState) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ic.evicted || (s.closed && state == inboundWatcher) {
		return false
	}
	ic.state = state
	return true
}

// wasEvicted reports whether ic was closed to make room for another.
func (s *inboundSet) wasEvicted(ic *inboundConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ic.evicted
}

// len is the number of inbound connections open.
func (s *inboundSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// shutdown refuses new connections and closes the watchers: nothing else
// would end them while the process lives, and a watcher's peer takes the
// close for the end of this node.
func (s *inboundSet) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		if c.state == inboundWatcher {
			_ = c.conn.Close()
		}
	}
}
