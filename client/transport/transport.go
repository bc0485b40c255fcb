// Package transport is the client library's HTTP transport for the API:
// HTTP/1.1 on keep-alive connections, each call made on its caller's
// goroutine, TLS handshakes to one address taken in turns, and Warm, which
// holds connections open to nodes no call uses yet so that a failover
// finds them made (docs/design.md, "Identities, TLS and permissions"). It
// imports nothing of the server: programs that embed a client or a worker
// link only this.
package transport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// New returns an HTTP transport for the API: HTTP/1.1 with keep-alive
// connections, one per call in flight, each call made on its caller's
// goroutine.
//
// The server speaks cleartext HTTP/2 too, but for short unary calls HTTP/1.1
// costs fewer goroutine hand-offs on both sides, so reads are faster and
// writes per second higher. net/http's own HTTP/1.1 transport still hands
// each call to two goroutines of its connection (one writes the request,
// one reads the response) and back; the loop here writes and reads on the
// caller's, which helps most with many concurrent clients. On a small
// machine the clients' and the leader's CPU per call, not the disk, bounds
// how fast a committed wave of writes turns into the next one.
//
// Requests it cannot carry that way (https without NewTLS, bodies over
// maxOneWriteBody or of unknown length, Expect or Upgrade headers) go
// through net/http's transport. Idle connections are closed after 90 s,
// before the server's 2-minute idle timeout, and one the server has closed
// meanwhile (a node's restart) is noticed before it is used.
func New() *Transport {
	return newTransport((&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext, nil)
}

// NewTLS is New that also carries https requests, over TLS with cfg:
// HTTP/1.1 (offered by ALPN), the same loop on the caller's goroutine, the
// handshake made when a connection is dialled, at most
// clientHandshakesPerHost of them with one address at a time (callers
// beyond those take the first connection given back, or wait their turn to
// dial). cfg.ServerName, when empty, is each request's host.
func NewTLS(cfg *tls.Config) *Transport {
	return newTransport((&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext, cfg)
}

const (
	clientIdleTimeout    = 90 * time.Second
	clientMaxIdlePerHost = 256
	// clientHandshakesPerHost bounds the TLS handshakes in flight to one
	// address (see turn).
	clientHandshakesPerHost = 2
)

func newTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error), tlsCfg *tls.Config) *Transport {
	var p http.Protocols
	p.SetHTTP1(true)
	if tlsCfg != nil {
		tlsCfg = tlsCfg.Clone()
		tlsCfg.NextProtos = []string{"http/1.1"}
	}
	return &Transport{
		t: &http.Transport{
			Protocols:           &p,
			DialContext:         dial,
			TLSClientConfig:     tlsCfg,
			MaxIdleConnsPerHost: clientMaxIdlePerHost,
			IdleConnTimeout:     clientIdleTimeout,
			// Room for the headers and a body of maxOneWriteBody.
			WriteBufferSize: 2 * maxOneWriteBody,
		},
		dial:        dial,
		tls:         tlsCfg,
		idleTimeout: clientIdleTimeout,
		idle:        make(map[poolKey][]*h1Conn),
		turns:       make(map[poolKey]*dialTurns),
		open:        make(map[poolKey]int),
		busy:        make(map[poolKey]int),
		peak:        make(map[poolKey]int),
		warmEvery:   warmEvery,
		renewAfter:  warmRenewAfter,
	}
}

// poolKey names the connections a call may reuse: to one address, over
// TLS or not.
type poolKey struct {
	addr string
	tls  bool
}

// Transport is New's http.RoundTripper.
type Transport struct {
	t           *http.Transport // what the h1 loop does not carry
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	tls         *tls.Config // nil: https goes through t
	idleTimeout time.Duration

	mu    sync.Mutex
	idle  map[poolKey][]*h1Conn // least recently used first
	sweep *time.Timer           // closes expired idle connections; nil when none are idle
	turns map[poolKey]*dialTurns
	open  map[poolKey]int // connections made and not yet dropped
	// busy counts the connections carrying a caller's call; peak is the
	// most at once since the last Warm.
	busy, peak map[poolKey]int
	// warming: a Warm runs; warmed is when the last began.
	warming bool
	warmed  time.Time
	// warmEvery and renewAfter are warmEvery and warmRenewAfter, but in
	// tests.
	warmEvery, renewAfter time.Duration

	// slotWaits counts the calls that waited for a handshake slot.
	slotWaits atomic.Int64
}

// dialTurns are the TLS handshakes with one address (see turn).
type dialTurns struct {
	slots chan struct{} // one per handshake in flight
	// waiting counts the callers waiting for a slot or a connection;
	// back is closed, and replaced, when a connection comes back idle
	// while any wait. Both under Transport.mu.
	waiting int
	back    chan struct{}
}

// maxOneWriteBody bounds the request bodies Transport reads into
// memory before sending; larger ones are streamed as given.
const maxOneWriteBody = 16 << 10

// RoundTrip sends a request whose body has a known length of at most
// maxOneWriteBody in one write, headers and body together, so the server
// reads the whole call at one wake-up (net/http sends the headers of a body
// it does not know to be in memory on their own first, and the RPC
// library's bodies are of its own type).
func (c *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	hasBody := req.Body != nil && req.Body != http.NoBody
	if hasBody && (req.ContentLength <= 0 || req.ContentLength > maxOneWriteBody) {
		return c.t.RoundTrip(req)
	}
	var body []byte
	if hasBody {
		body = make([]byte, req.ContentLength)
		_, err := io.ReadFull(req.Body, body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read request body: %w", err)
		}
	}
	if !c.carries(req) {
		r := *req // RoundTrip must not change the caller's request
		if hasBody {
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		}
		return c.t.RoundTrip(&r)
	}
	return c.roundTrip(req, body)
}

// carries reports whether the h1 loop takes req.
func (c *Transport) carries(req *http.Request) bool {
	return req.URL != nil && (req.URL.Scheme == "http" || req.URL.Scheme == "https" && c.tls != nil) && req.URL.Host != "" &&
		req.Method != http.MethodConnect &&
		req.Header.Get("Expect") == "" && req.Header.Get("Upgrade") == ""
}

// CloseIdleConnections closes the connections no call is using.
func (c *Transport) CloseIdleConnections() {
	c.mu.Lock()
	idle := c.idle
	c.idle = make(map[poolKey][]*h1Conn)
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	c.mu.Unlock()
	for _, l := range idle {
		for _, hc := range l {
			c.drop(hc)
		}
	}
	c.t.CloseIdleConnections()
}

// errServerClosed is a reused connection the server closed before it
// answered: the request may not have reached it, or reached it just as it
// closed.
var errServerClosed = errors.New("server closed the connection before answering")

// roundTrip makes the call on an idle connection to the host, or a new one.
// A call that fails on a reused connection before any of it was sent, or
// that the server closed unanswered when the call may be sent twice, goes
// once more on a new connection, as net/http's transport does.
func (c *Transport) roundTrip(req *http.Request, body []byte) (*http.Response, error) {
	key := poolKey{addr: req.URL.Host, tls: req.URL.Scheme == "https"}
	if req.URL.Port() == "" {
		port := "80"
		if key.tls {
			port = "443"
		}
		key.addr = net.JoinHostPort(req.URL.Hostname(), port)
	}
	fresh := false
	for {
		hc, err := c.conn(req.Context(), key, fresh)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		hc.busy = true
		c.busy[key]++
		c.peak[key] = max(c.peak[key], c.busy[key])
		c.mu.Unlock()
		resp, err := c.call(hc, req, body)
		if err == nil {
			return resp, nil
		}
		var retry *retryable
		if !errors.As(err, &retry) {
			return nil, err
		}
		if fresh || req.Context().Err() != nil {
			return nil, retry.err
		}
		fresh = true
	}
}

// retryable marks an error on a reused connection after which the call can
// go again on a new one.
type retryable struct{ err error }

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// replayable mirrors net/http: a request the server may see twice.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// aLongTimeAgo is a deadline that has passed: it interrupts a blocked read
// or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// call writes req on hc and reads the response's header.
func (c *Transport) call(hc *h1Conn, req *http.Request, body []byte) (*http.Response, error) {
	ctx := req.Context()
	stop := context.AfterFunc(ctx, func() { _ = hc.c.SetDeadline(aLongTimeAgo) })
	fail := func(err error, retry bool) (*http.Response, error) {
		cancelled := !stop()
		c.drop(hc)
		if cancelled {
			return nil, fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		if retry && hc.reused {
			return nil, &retryable{err}
		}
		return nil, err
	}
	r := *req
	r.Body, r.ContentLength = http.NoBody, 0
	if len(body) > 0 {
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	}
	before := hc.w.n
	err := r.Write(hc.bw)
	if err == nil {
		err = hc.bw.Flush()
	}
	if err != nil {
		return fail(err, hc.w.n == before)
	}
	if _, err := hc.br.Peek(1); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return fail(fmt.Errorf("%w: %v", errServerClosed, err), replayable(req))
		}
		return fail(err, false)
	}
	resp, err := http.ReadResponse(hc.br, &r)
	// Skip informational answers (the server sends none unless asked).
	for n := 0; err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols; n++ {
		if n == 5 {
			return fail(errors.New("too many informational responses"), false)
		}
		resp, err = http.ReadResponse(hc.br, &r)
	}
	if err != nil {
		return fail(err, false)
	}
	resp.Request = req
	b := &h1Body{rc: resp.Body, hc: hc, c: c, stop: stop, ctx: ctx,
		reuse: !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// conn returns an idle connection to key that is still open, or dials a
// new one (always when fresh), making its TLS handshake when key says so.
func (c *Transport) conn(ctx context.Context, key poolKey, fresh bool) (*h1Conn, error) {
	if !fresh {
		if hc := c.idleConn(key); hc != nil {
			return hc, nil
		}
	}
	if key.tls {
		hc, release, err := c.turn(ctx, key, fresh)
		if err != nil || hc != nil {
			return hc, err
		}
		defer release()
	}
	raw, err := c.dial(ctx, "tcp", key.addr)
	if err != nil {
		return nil, err
	}
	nc := raw
	if key.tls {
		cfg := c.tls
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(key.addr)
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", key.addr, err)
		}
		nc = tc
	}
	hc := &h1Conn{c: nc, raw: raw, key: key}
	hc.w = countingWriter{w: nc}
	hc.br = bufio.NewReaderSize(nc, 16<<10)
	hc.bw = bufio.NewWriterSize(&hc.w, 2*maxOneWriteBody)
	c.mu.Lock()
	c.open[key]++
	c.mu.Unlock()
	return hc, nil
}

// idleConn takes the most recently used idle connection to key that is
// still open, closing the expired and closed ones it meets; nil when none.
func (c *Transport) idleConn(key poolKey) *h1Conn {
	for {
		c.mu.Lock()
		l := c.idle[key]
		if len(l) == 0 {
			c.mu.Unlock()
			return nil
		}
		hc := l[len(l)-1]
		l[len(l)-1] = nil
		if l = l[:len(l)-1]; len(l) == 0 {
			delete(c.idle, key)
		} else {
			c.idle[key] = l
		}
		c.mu.Unlock()
		if time.Since(hc.idleSince) < c.idleTimeout && hc.open() {
			hc.reused = true
			return hc
		}
		c.drop(hc)
	}
}

// turn waits until fewer than clientHandshakesPerHost TLS handshakes with
// key are in flight and returns the function that ends this one's; or,
// unless fresh, until a connection to key comes back idle, and returns
// that connection instead. Many callers that need a connection at once
// (every caller of a client whose PRIMARY just failed, all moving to the
// same node) would otherwise make as many full handshakes together, on the
// node that is being elected; in turns, the first calls are answered
// sooner and the later ones take the connections those calls give back.
func (c *Transport) turn(ctx context.Context, key poolKey, fresh bool) (*h1Conn, func(), error) {
	c.mu.Lock()
	t := c.turns[key]
	if t == nil {
		t = &dialTurns{slots: make(chan struct{}, clientHandshakesPerHost), back: make(chan struct{})}
		c.turns[key] = t
	}
	c.mu.Unlock()
	release := func() { <-t.slots }
	select {
	case t.slots <- struct{}{}:
		return nil, release, nil
	default:
	}
	c.slotWaits.Add(1)
	for {
		c.mu.Lock()
		t.waiting++
		back := t.back
		c.mu.Unlock()
		var (
			hc  *h1Conn
			got bool
			err error
		)
		if !fresh {
			// Looked at after counting this caller, so a connection put
			// back from now on closes back.
			hc = c.idleConn(key)
		} else {
			back = nil
		}
		if hc == nil {
			select {
			case t.slots <- struct{}{}:
				got = true
			case <-back:
			case <-ctx.Done():
				err = fmt.Errorf("waiting to connect to %s: %w", key.addr, context.Cause(ctx))
			}
		}
		c.mu.Lock()
		t.waiting--
		c.mu.Unlock()
		switch {
		case hc != nil:
			return hc, nil, nil
		case got:
			// A connection may have come back just as the slot freed.
			if !fresh {
				if hc := c.idleConn(key); hc != nil {
					release()
					return hc, nil, nil
				}
			}
			return nil, release, nil
		case err != nil:
			return nil, nil, err
		}
	}
}

const (
	// warmEvery spaces the Warm calls that do anything.
	warmEvery = time.Second
	// warmRenewAfter: Warm renews an idle connection this old, so that
	// neither side closes it for idleness before the next Warm.
	warmRenewAfter = clientIdleTimeout / 3
)

// Warm holds connections open to every address in addrs (HOST:PORT;
// over TLS when useTLS), as many to each as the most calls the transport
// has had at once to one address since the last Warm, with a GET /healthz
// on each new one and on each idle one that has not carried a call for a
// while (beyond that many, such idle ones are closed instead). When the node those
// calls go to fails and they all move to another, they find connections
// made, instead of making a handshake each on the node being elected.
// The connections it opens count against the nodes' connection caps only
// as idle ones, which a node closes first when it is full. A Warm within
// warmEvery of the last does nothing. It returns the first error it met,
// having still tried every address.
func (c *Transport) Warm(ctx context.Context, addrs []string, useTLS bool) error {
	c.mu.Lock()
	if c.warming || (!c.warmed.IsZero() && time.Since(c.warmed) < c.warmEvery) {
		c.mu.Unlock()
		return nil
	}
	c.warming, c.warmed = true, time.Now()
	depth := 1
	for k, n := range c.peak {
		if k.tls == useTLS {
			depth = max(depth, n)
		}
	}
	c.peak = make(map[poolKey]int, len(c.busy))
	for k, n := range c.busy {
		c.peak[k] = n
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.warming = false
		c.mu.Unlock()
	}()
	depth = min(depth, clientMaxIdlePerHost)
	scheme := "http"
	if useTLS {
		if c.tls == nil {
			return errors.New("warm: this transport does not carry https")
		}
		scheme = "https"
	}
	var first error
	for _, addr := range addrs {
		if err := c.warm(ctx, poolKey{addr: addr, tls: useTLS}, scheme+"://"+addr+"/healthz", depth); err != nil && first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return first
}

// warm renews key's idle connections older than renewAfter (closing those
// beyond depth) and opens new ones until depth are open, or one is not
// kept open.
func (c *Transport) warm(ctx context.Context, key poolKey, url string, depth int) error {
	c.mu.Lock()
	stale := c.takeIdle(key, time.Now(), c.renewAfter)
	c.mu.Unlock()
	var first error
	for _, hc := range stale {
		c.mu.Lock()
		excess := c.open[key] > depth
		c.mu.Unlock()
		if excess || !hc.open() {
			// Fewer calls at once now: let the pool shrink.
			c.drop(hc)
			continue
		}
		hc.reused = true
		if err := c.ping(ctx, hc, url); err != nil && first == nil {
			first = err
		}
	}
	for ctx.Err() == nil {
		c.mu.Lock()
		n := c.open[key]
		c.mu.Unlock()
		if n >= depth {
			break
		}
		hc, err := c.conn(ctx, key, true)
		if err == nil {
			err = c.ping(ctx, hc, url)
		}
		if err == nil {
			c.mu.Lock()
			if hc.dropped {
				// Not kept open (a node at its connection cap answers
				// from its health reserve and closes).
				err = errors.New("the node closed the connection after its answer")
			}
			c.mu.Unlock()
		}
		if err != nil {
			if first == nil {
				first = fmt.Errorf("warm %s: %w", key.addr, err)
			}
			break
		}
	}
	return first
}

// ping makes a GET of url on hc, which goes back to the pool when the
// answer has been read.
func (c *Transport) ping(ctx context.Context, hc *h1Conn, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		c.drop(hc)
		return err
	}
	resp, err := c.call(hc, req, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
	return err
}

// takeIdle removes from key's idle connections those idle for d or longer
// at now (the oldest come first) and returns them; c.mu is held.
func (c *Transport) takeIdle(key poolKey, now time.Time, d time.Duration) []*h1Conn {
	l := c.idle[key]
	n := 0
	for n < len(l) && now.Sub(l[n].idleSince) >= d {
		n++
	}
	if n == 0 {
		return nil
	}
	if n == len(l) {
		delete(c.idle, key)
	} else {
		c.idle[key] = append(l[:0:0], l[n:]...)
	}
	return l[:n:n]
}

// put returns hc to the idle pool, or closes it when the pool is full.
func (c *Transport) put(key poolKey, hc *h1Conn) {
	hc.idleSince = time.Now()
	c.mu.Lock()
	c.done(hc)
	l := c.idle[key]
	if len(l) >= clientMaxIdlePerHost {
		c.mu.Unlock()
		c.drop(hc)
		return
	}
	c.idle[key] = append(l, hc)
	if t := c.turns[key]; t != nil && t.waiting > 0 {
		close(t.back)
		t.back = make(chan struct{})
	}
	if c.sweep == nil {
		c.sweep = time.AfterFunc(c.idleTimeout, c.sweepIdle)
	}
	c.mu.Unlock()
}

// sweepIdle closes the connections idle for idleTimeout and comes back
// when the oldest of the others expires.
func (c *Transport) sweepIdle() {
	var expired []*h1Conn
	now := time.Now()
	c.mu.Lock()
	var next time.Duration
	for key := range c.idle {
		expired = append(expired, c.takeIdle(key, now, c.idleTimeout)...)
		l := c.idle[key]
		if len(l) == 0 {
			continue
		}
		if d := c.idleTimeout - now.Sub(l[0].idleSince); next == 0 || d < next {
			next = d
		}
	}
	if c.sweep != nil { // else CloseIdleConnections stopped it
		if next > 0 {
			c.sweep.Reset(next)
		} else {
			c.sweep = nil
		}
	}
	c.mu.Unlock()
	for _, hc := range expired {
		c.drop(hc)
	}
}

// h1Conn is one HTTP/1.1 connection, used by one call at a time.
type h1Conn struct {
	c         net.Conn // raw, or a TLS connection over it
	raw       net.Conn // the socket, for open's look
	key       poolKey
	w         countingWriter
	br        *bufio.Reader
	bw        *bufio.Writer
	reused    bool // has carried a call before this one
	idleSince time.Time
	dropped   bool // closed and no longer counted; under Transport.mu
	busy      bool // carrying a caller's call; under Transport.mu
}

// drop closes hc and stops counting it among the open connections.
func (c *Transport) drop(hc *h1Conn) {
	_ = hc.c.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc.dropped {
		return
	}
	hc.dropped = true
	c.done(hc)
	if c.open[hc.key]--; c.open[hc.key] <= 0 {
		delete(c.open, hc.key)
	}
}

// done ends hc's call, if it carried one; c.mu is held.
func (c *Transport) done(hc *h1Conn) {
	if !hc.busy {
		return
	}
	hc.busy = false
	if c.busy[hc.key]--; c.busy[hc.key] <= 0 {
		delete(c.busy, hc.key)
	}
}

// open reports whether the server has neither closed hc nor sent anything
// unasked, without waiting. Over TLS it looks at the socket: a TLS server
// sends nothing unasked on an idle connection either (its session tickets
// arrive before the first answer, and are read with it) but its close.
func (hc *h1Conn) open() bool {
	if hc.br.Buffered() > 0 {
		return false
	}
	sc, ok := hc.raw.(syscall.Conn)
	if !ok {
		return true // cannot look; a closed one fails its call
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return peekOpen(rc)
}

// countingWriter counts the bytes written to the connection, so a call
// whose request never left can go again.
type countingWriter struct {
	w io.Writer
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.n += int64(n)
	return n, err
}

// h1Body is a response body; at its end the connection goes back to the
// pool, and closing it early closes the connection.
type h1Body struct {
	rc    io.ReadCloser
	hc    *h1Conn
	c     *Transport
	stop  func() bool
	ctx   context.Context
	reuse bool

	mu   sync.Mutex
	done bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.finish(true)
	case err != nil:
		if b.ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(b.ctx), err)
		}
		b.finish(false)
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.finish(false)
	return nil
}

// finish settles the connection once: back to the pool when the body was
// read to its end and no cancellation touched the connection, else closed.
func (b *h1Body) finish(complete bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if b.stop() && complete && b.reuse {
		b.c.put(b.hc.key, b.hc)
		return
	}
	b.c.drop(b.hc)
}
