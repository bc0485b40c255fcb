package netio

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/internal/testutil"
)

// limited is a Server under test with its metrics and log.
type limited struct {
	srv  *Server
	addr string
	reg  *prometheus.Registry
	log  *testutil.SyncBuffer
}

func startLimited(t *testing.T, lim Limits, h http.Handler, opts ...Option) *limited {
	t.Helper()
	reg := prometheus.NewRegistry()
	lg := &testutil.SyncBuffer{}
	srv := NewServer(h, lim, append([]Option{WithLogger(zerolog.New(lg)), WithMetrics(NewConnMetrics(reg))}, opts...)...)
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return &limited{srv: srv, addr: ln.Addr().String(), reg: reg, log: lg}
}

// metric is the value of the sample of name whose label has value.
func (l *limited) metric(t *testing.T, name, label, value string) float64 {
	t.Helper()
	mfs, err := l.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no sample %s{%s=%q}", name, label, value)
	return 0
}

func (l *limited) refused(t *testing.T, reason string) float64 {
	t.Helper()
	return l.metric(t, "xce_client_conn_refused_total", "reason", reason)
}

func testLimits() Limits {
	return Limits{
		MaxConnections: 2, HealthReserve: 1,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10, MaxConcurrentStreams: 16,
	}
}

// blocker is a handler whose requests with "X-Block: 1" wait until release.
type blocker struct {
	mu      sync.Mutex
	waiting int
	release chan struct{}
}

func newBlocker(t *testing.T) *blocker {
	b := &blocker{release: make(chan struct{})}
	t.Cleanup(b.free)
	return b
}

func (b *blocker) free() {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

func (b *blocker) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if r.Header.Get("X-Block") == "1" {
		b.mu.Lock()
		b.waiting++
		b.mu.Unlock()
		<-b.release
	}
	_, _ = fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
}

// rawConn is a client connection written by hand.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) send(t *testing.T, method, path string, hdr ...string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n", method, path)
	for i := 0; i+1 < len(hdr); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", hdr[i], hdr[i+1])
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(c, b.String()); err != nil {
		t.Fatal(err)
	}
}

// response reads one response within 5 s.
func (c *rawConn) response(t *testing.T) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// closedByServer reports whether the server closes the connection within
// timeout (end of stream or reset), reading and dropping what it sends.
func (c *rawConn) closedByServer(timeout time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, c.r)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

// The general pool, the health reserve, and beyond: two busy general
// connections, then a reserve connection that serves /healthz (and closes)
// but answers 503 to anything else, then a closed one once a busy health
// check holds the reserve; every refusal counted.
func TestCapAndHealthReserve(t *testing.T) {
	b := newBlocker(t)
	s := startLimited(t, testLimits(), b)
	for range 2 {
		dial(t, s.addr).send(t, "POST", "/api", "X-Block", "1")
	}
	testutil.Eventually(t, 5*time.Second, "two requests in the handler", func() bool { return b.count() == 2 })

	c := dial(t, s.addr)
	c.send(t, "GET", "/healthz")
	resp, body := c.response(t)
	if resp.StatusCode != http.StatusOK || body != "GET /healthz" || !resp.Close {
		t.Errorf("health check on the reserve: %d %q close=%v, want 200 and a closed connection", resp.StatusCode, body, resp.Close)
	}
	if !c.closedByServer(5 * time.Second) {
		t.Fatal("the reserve's connection stays open after its health check")
	}

	c = dial(t, s.addr)
	c.send(t, "POST", "/api")
	resp, body = c.response(t)
	if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
		t.Errorf("API call on the reserve: %d %q, want 503 and a closed connection", resp.StatusCode, body)
	}
	if !c.closedByServer(5 * time.Second) {
		t.Fatal("the reserve's connection stays open after its 503")
	}
	if n := s.refused(t, ReasonReserveNonHealth); n != 1 {
		t.Errorf("refused{reserve_non_health} = %v, want 1", n)
	}

	dial(t, s.addr).send(t, "GET", "/readyz", "X-Block", "1")
	testutil.Eventually(t, 5*time.Second, "a health check in the handler", func() bool { return b.count() == 3 })
	if g, r := s.metric(t, "xce_client_connections", "pool", PoolGeneral), s.metric(t, "xce_client_connections", "pool", PoolReserve); g != 2 || r != 1 {
		t.Errorf("connections open: general %v reserve %v, want 2 and 1", g, r)
	}
	for i := range 3 {
		if !dial(t, s.addr).closedByServer(5 * time.Second) {
			t.Fatalf("connection %d beyond the reserve still open", i)
		}
	}
	if n := s.refused(t, ReasonCap); n != 3 {
		t.Errorf("refused{cap} = %v, want 3", n)
	}

	// The health check ends and its connection leaves the reserve; the
	// general ones stay open, idle.
	b.free()
	testutil.Eventually(t, 5*time.Second, "the reserve empty", func() bool {
		return s.metric(t, "xce_client_connections", "pool", PoolReserve) == 0
	})
	if n := s.metric(t, "xce_client_connections", "pool", PoolGeneral); n != 2 {
		t.Errorf("general connections open: %v, want 2", n)
	}
}

// When the pools are full, a new connection takes the place of one that
// has sent nothing, oldest first, before one idle between requests; an idle
// one only once idle for ReadHeaderTimeout, longest idle first; a busy one
// never.
func TestEvictionOrder(t *testing.T) {
	lim := testLimits()
	lim.MaxConnections, lim.HealthReserve = 3, 0
	lim.ReadHeaderTimeout = time.Second
	b := newBlocker(t)
	s := startLimited(t, lim, b)

	busy := dial(t, s.addr)
	busy.send(t, "POST", "/api", "X-Block", "1")
	testutil.Eventually(t, 5*time.Second, "a request in the handler", func() bool { return b.count() == 1 })
	idle := dial(t, s.addr)
	idle.send(t, "GET", "/x")
	if resp, _ := idle.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d", resp.StatusCode)
	}
	idleAt := time.Now()
	unused := dial(t, s.addr)
	testutil.Eventually(t, 5*time.Second, "three connections open", func() bool {
		return s.metric(t, "xce_client_connections", "pool", PoolGeneral) == 3
	})

	// The unused one goes first, however recent.
	fresh := dial(t, s.addr)
	if !unused.closedByServer(5 * time.Second) {
		t.Fatal("the unused connection is still open")
	}
	if n := s.metric(t, "xce_client_conn_evicted_total", "kind", EvictedUnused); n != 1 {
		t.Errorf("evicted{unused} = %v, want 1", n)
	}
	// The fresh one is unused now: the next takes its place.
	next := dial(t, s.addr)
	if !fresh.closedByServer(5 * time.Second) {
		t.Fatal("the second unused connection is still open")
	}
	next.send(t, "GET", "/y")
	if resp, body := next.response(t); resp.StatusCode != http.StatusOK || body != "GET /y" {
		t.Fatalf("HTTP %d %q", resp.StatusCode, body)
	}

	// Now one busy and two idle: a new connection is refused while the
	// idle ones are young.
	if time.Since(idleAt) < lim.ReadHeaderTimeout/2 {
		if !dial(t, s.addr).closedByServer(5 * time.Second) {
			t.Fatal("a connection idle for less than ReadHeaderTimeout made room")
		}
		if n := s.refused(t, ReasonCap); n != 1 {
			t.Errorf("refused{cap} = %v, want 1", n)
		}
	} else {
		t.Logf("slow machine: %v passed since the connection went idle; not checking that young idle connections stay", time.Since(idleAt))
	}
	// Later the longest idle makes room.
	for admitted := false; !admitted; time.Sleep(20 * time.Millisecond) {
		c := dial(t, s.addr)
		c.send(t, "GET", "/probe")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if resp, err := http.ReadResponse(c.r, nil); err == nil {
			resp.Body.Close()
			admitted = true
		}
		if time.Since(idleAt) > 10*time.Second {
			t.Fatal("no idle connection ever made room")
		}
	}
	// (The server counts idleness from the end of the handler, a little
	// before the client has the answer.)
	if took := time.Since(idleAt); took < lim.ReadHeaderTimeout-100*time.Millisecond {
		t.Errorf("an idle connection made room %v after it went idle, before ReadHeaderTimeout", took)
	}
	if !idle.closedByServer(5 * time.Second) {
		t.Fatal("the longest idle connection is still open")
	}
	if n := s.metric(t, "xce_client_conn_evicted_total", "kind", EvictedIdle); n != 1 {
		t.Errorf("evicted{idle} = %v, want 1", n)
	}
	next.send(t, "GET", "/z")
	if resp, body := next.response(t); resp.StatusCode != http.StatusOK || body != "GET /z" {
		t.Fatalf("the more recently idle connection: HTTP %d %q", resp.StatusCode, body)
	}
	// The busy one was never touched.
	b.free()
	if resp, body := busy.response(t); resp.StatusCode != http.StatusOK || body != "POST /api" {
		t.Errorf("busy connection: HTTP %d %q", resp.StatusCode, body)
	}
}

// Silent connections and ones that send half a request are closed after
// ReadHeaderTimeout and counted; an idle keep-alive connection closed by
// IdleTimeout is not a refusal.
func TestSilentAndSlowHeaders(t *testing.T) {
	lim := testLimits()
	lim.MaxConnections, lim.HealthReserve = 100, 0
	lim.ReadHeaderTimeout, lim.IdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	s := startLimited(t, lim, newBlocker(t))
	start := time.Now()
	var conns []*rawConn
	for i := range 20 {
		c := dial(t, s.addr)
		if i%2 == 1 {
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		if !c.closedByServer(5 * time.Second) {
			t.Fatalf("connection %d still open", i)
		}
	}
	if took := time.Since(start); took < lim.ReadHeaderTimeout {
		t.Errorf("closed after %v, before the %v timeout", took, lim.ReadHeaderTimeout)
	}
	testutil.Eventually(t, 5*time.Second, "20 read timeouts counted", func() bool { return s.refused(t, ReasonReadTimeout) == 20 })

	c := dial(t, s.addr)
	c.send(t, "GET", "/x")
	c.response(t)
	if !c.closedByServer(5 * time.Second) {
		t.Fatal("idle connection still open")
	}
	if n := s.refused(t, ReasonReadTimeout); n != 20 {
		t.Errorf("refused{read_timeout} = %v after an idle timeout, want 20", n)
	}
}

// trickle is a request body that sends a byte at a time, slowly, until
// the request is cancelled.
type trickle struct {
	ctx   context.Context
	every time.Duration
}

func (b trickle) Read(p []byte) (int, error) {
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-time.After(b.every):
	}
	p[0] = 'x'
	return 1, nil
}

// A body that trickles in is cut off after ReadTimeout, over HTTP/1.1 and
// HTTP/2, and counted.
func TestSlowBodyCutOff(t *testing.T) {
	lim := testLimits()
	lim.MaxConnections, lim.ReadTimeout = 100, 300*time.Millisecond
	type result struct {
		err  error
		took time.Duration
	}
	got := make(chan result, 4)
	s := startLimited(t, lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, err := io.ReadAll(r.Body)
		got <- result{err, time.Since(start)}
	}))
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	for i, tr := range []*http.Transport{{}, {Protocols: &h2}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+"/api", io.NopCloser(trickle{ctx, 20 * time.Millisecond}))
		req.ContentLength = 1 << 20
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := tr.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
		var r result
		select {
		case r = <-got:
		case <-ctx.Done():
			t.Fatalf("transport %d: the body was never cut off", i)
		}
		cancel()
		<-done
		tr.CloseIdleConnections()
		if !errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Errorf("transport %d: body read ended with %v after %v, want a timeout", i, r.err, r.took)
		}
		if r.took < lim.ReadTimeout/2 || r.took > lim.ReadTimeout+2*time.Second {
			t.Errorf("transport %d: body cut off after %v, want about %v", i, r.took, lim.ReadTimeout)
		}
		testutil.Eventually(t, 5*time.Second, "the timeout counted", func() bool { return s.refused(t, ReasonReadTimeout) == float64(i+1) })
	}
	if n := s.refused(t, ReasonWriteTimeout); n != 0 {
		t.Errorf("refused{write_timeout} = %v: a cut-off body counted twice", n)
	}
}

// The answer to a request with a body has WriteTimeout from the end of
// the body, however long the body took within ReadTimeout.
func TestWriteDeadlineAfterBody(t *testing.T) {
	lim := testLimits()
	lim.ReadTimeout, lim.WriteTimeout = time.Second, 300*time.Millisecond
	s := startLimited(t, lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		time.Sleep(lim.WriteTimeout / 2) // work after the body
		_, _ = w.Write(b)
	}))
	c := dial(t, s.addr)
	if _, err := io.WriteString(c, "POST /api HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbo"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lim.WriteTimeout) // the body's second half comes late
	if _, err := io.WriteString(c, "dy"); err != nil {
		t.Fatal(err)
	}
	if resp, body := c.response(t); resp.StatusCode != http.StatusOK || body != "body" {
		t.Errorf("HTTP %d %q", resp.StatusCode, body)
	}
}

// A connection of the reserve refused with 503 is closed without waiting
// for the rest of its body, and makes room at once though the server may
// hold it a while for its client to read the answer.
func TestRefusedReserveConnectionMakesRoom(t *testing.T) {
	lim := testLimits()
	lim.MaxConnections, lim.HealthReserve = 1, 1
	b := newBlocker(t)
	s := startLimited(t, lim, b)
	dial(t, s.addr).send(t, "POST", "/api", "X-Block", "1")
	testutil.Eventually(t, 5*time.Second, "a request in the handler", func() bool { return b.count() == 1 })
	// Calls with bodies they do not send whole: one the server would read
	// on to keep the connection, one too large for that, after which it
	// closes its side and waits a little before it closes the connection.
	for _, length := range []int{100 << 10, 1 << 20} {
		r := dial(t, s.addr)
		if _, err := fmt.Fprintf(r, "POST /api HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\nsome", length); err != nil {
			t.Fatal(err)
		}
		if resp, _ := r.response(t); resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("HTTP %d, want 503", resp.StatusCode)
		}
		if !r.closedByServer(5 * time.Second) {
			t.Errorf("%d-byte body: the refused connection stays open, waiting for the rest of its body", length)
		}
		h := dial(t, s.addr)
		h.send(t, "GET", "/healthz")
		if resp, body := h.response(t); resp.StatusCode != http.StatusOK || body != "GET /healthz" {
			t.Errorf("%d-byte body: health check after a refusal on the reserve: HTTP %d %q", length, resp.StatusCode, body)
		}
		// Wait for the health check's connection to leave the reserve.
		h.closedByServer(5 * time.Second)
	}
	if n := s.refused(t, ReasonCap); n != 0 {
		t.Errorf("refused{cap} = %v, want 0", n)
	}
}

// Once the body is read, the handler runs past ReadTimeout with its
// request's context intact.
func TestHandlerOutlivesReadTimeout(t *testing.T) {
	lim := testLimits()
	lim.ReadTimeout = 100 * time.Millisecond
	s := startLimited(t, lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusInternalServerError)
			return
		case <-time.After(3 * lim.ReadTimeout):
		}
		_, _ = w.Write(b)
	}))
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	for i, tr := range []*http.Transport{{}, {Protocols: &h2}} {
		resp, err := (&http.Client{Transport: tr}).Post("http://"+s.addr+"/api", "text/plain", strings.NewReader("body"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if resp.StatusCode != http.StatusOK || string(b) != "body" {
			t.Errorf("transport %d: HTTP %d %q", i, resp.StatusCode, b)
		}
	}
}

// A LongStream may stay open past WriteTimeout as long as each write goes
// out in time; an ordinary response may not.
func TestLongStream(t *testing.T) {
	lim := testLimits()
	lim.WriteTimeout = 150 * time.Millisecond
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			if i > 0 {
				time.Sleep(2 * lim.WriteTimeout) // a quiet stream, longer than the timeout
			}
			if _, err := fmt.Fprintf(w, "msg%d;", i); err != nil {
				return
			}
			http.NewResponseController(w).Flush()
		}
	})
	mux := http.NewServeMux()
	mux.Handle("/stream", LongStream(stream))
	mux.Handle("/plain", stream)
	s := startLimited(t, lim, mux)
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	for i, tr := range []*http.Transport{{}, {Protocols: &h2}} {
		cl := &http.Client{Transport: tr}
		get := func(path string) string {
			resp, err := cl.Get("http://" + s.addr + path)
			if err != nil {
				return err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
		if got := get("/stream"); got != "msg0;msg1;msg2;" {
			t.Errorf("transport %d: long stream got %q", i, got)
		}
		if got := get("/plain"); got == "msg0;msg1;msg2;" {
			t.Errorf("transport %d: an ordinary response outlived its write deadline", i)
		}
		tr.CloseIdleConnections()
	}
}

// A client that does not read its response is cut off after WriteTimeout
// and counted.
func TestWriteTimeout(t *testing.T) {
	lim := testLimits()
	lim.WriteTimeout = 200 * time.Millisecond
	wrote := make(chan error, 1)
	s := startLimited(t, lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 1024 { // far more than the socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}))
	c, err := net.DialTimeout("tcp", s.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("64 MiB went to a client that reads nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's writes never timed out")
	}
	testutil.Eventually(t, 5*time.Second, "the write timeout counted", func() bool { return s.refused(t, ReasonWriteTimeout) == 1 })
}

// Headers over MaxHeaderBytes and requests the server cannot parse are
// counted.
func TestMalformedRequestsCounted(t *testing.T) {
	s := startLimited(t, testLimits(), newBlocker(t))
	c := dial(t, s.addr)
	c.send(t, "GET", "/", "X-Big", strings.Repeat("b", 16<<10))
	if resp, _ := c.response(t); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("HTTP %d, want 431", resp.StatusCode)
	}
	c = dial(t, s.addr)
	_, _ = io.WriteString(c, "NOT HTTP AT ALL\r\n\r\n")
	if resp, _ := c.response(t); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("HTTP %d, want 400", resp.StatusCode)
	}
	if a, b := s.refused(t, ReasonHeaderTooLarge), s.refused(t, ReasonBadRequest); a != 1 || b != 1 {
		t.Errorf("refused{header_too_large} = %v, refused{bad_request} = %v, want 1 and 1", a, b)
	}
}

// At start the caps are lowered to fit RLIMIT_NOFILE, with a warning that
// names the numbers.
func TestCapsFitRLimit(t *testing.T) {
	lim := testLimits()
	lim.MaxConnections, lim.HealthReserve, lim.FDHeadroom = 1000, 8, 200
	s := startLimited(t, lim, newBlocker(t), func(s *Server) {
		s.fdLimit = func() (uint64, error) { return 300, nil }
	})
	// Serve has run once a request is answered.
	resp, err := http.Get("http://" + s.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if g, r := s.metric(t, "xce_client_connection_limit", "pool", PoolGeneral), s.metric(t, "xce_client_connection_limit", "pool", PoolReserve); g != 92 || r != 8 {
		t.Errorf("caps in force: general %v reserve %v, want 92 and 8", g, r)
	}
	log := s.log.String()
	for _, want := range []string{"RLIMIT_NOFILE is 300", "lowered from 1000 to 92", `"max_connections_now":92`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestFitFDs(t *testing.T) {
	for _, tc := range []struct {
		general, reserve int
		limit            uint64
		headroom         int
		wantG, wantR     int
	}{
		{1024, 8, 1 << 20, 256, 1024, 8}, // plenty
		{1024, 8, 1288, 256, 1024, 8},    // exactly
		{1024, 8, 1287, 256, 1023, 8},    // one short: general gives
		{1024, 8, 512, 256, 248, 8},      // ulimit -n 512
		{1024, 8, 270, 256, 7, 7},        // reserve at most half of what is left
		{1024, 8, 256, 256, 1, 0},        // nothing left: one general connection
		{1024, 8, 100, 256, 1, 0},        // less than nothing
		{0, 8, 100, 256, 0, 8},           // no cap
		{1024, 8, 1 << 62, 256, 1024, 8}, // unlimited
		{10, 0, 20, 15, 5, 0},            // no reserve
		{1 << 20, 1024, 65536, 256, 64256, 1024},
	} {
		g, r := fitFDs(tc.general, tc.reserve, tc.limit, tc.headroom)
		if g != tc.wantG || r != tc.wantR {
			t.Errorf("fitFDs(%d, %d, %d, %d) = %d, %d; want %d, %d", tc.general, tc.reserve, tc.limit, tc.headroom, g, r, tc.wantG, tc.wantR)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7101": true, "127.1.2.3:80": true, "[::1]:7101": true, "localhost:7101": true, "LocalHost:1": true,
		"[::ffff:127.0.0.1]:80": true, "127.0.0.1": true, "::1": true, "[::1]": true,
		"0.0.0.0:7101": false, "[::]:7101": false, ":7101": false, "10.0.0.5:7101": false, "192.168.1.2:80": false,
		"[2001:db8::1]:80": false, "node-1.example.com:7101": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// The defaults pass Validate, and each limit out of range is named.
func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		edit func(l *Limits)
		want string
	}{
		{func(l *Limits) { l.MaxConnections = 0 }, "max_connections: must be between 1 and 1048576 (got 0)"},
		{func(l *Limits) { l.HealthReserve = -1 }, "health_reserve: must be between 0 and 1024 (got -1)"},
		{func(l *Limits) { l.ReadHeaderTimeout = 50 * time.Millisecond }, "read_header_timeout: must be between 100ms and 1h0m0s (got 50ms)"},
		{func(l *Limits) { l.IdleTimeout = 500 * time.Millisecond }, "idle_timeout: must be between 1s and 24h0m0s (got 500ms)"},
		{func(l *Limits) { l.MaxHeaderBytes = 1000 }, "max_header_bytes: must be between 4096 and 16777216 (got 1000)"},
	} {
		l := DefaultLimits()
		tc.edit(&l)
		if err := l.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

// Refusals are logged once per reason at the start of a spell, then
// summed up one line per period, and what is left at stop.
func TestRefusalLogSummarizes(t *testing.T) {
	buf := &testutil.SyncBuffer{}
	r := newRefusalLog(zerolog.New(buf), 100*time.Millisecond)
	for i := range 100 {
		r.note(reasons[i%2], "127.0.0.1:1")
	}
	testutil.Eventually(t, 5*time.Second, "a summary line", func() bool { return strings.Count(buf.String(), "\n") >= 3 })
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], `"reason":"cap"`) || !strings.Contains(lines[1], `"reason":"reserve_non_health"`) ||
		!strings.Contains(lines[2], `"total":98`) || !strings.Contains(lines[2], `"cap":49`) || !strings.Contains(lines[2], `"reserve_non_health":49`) {
		t.Errorf("log:\n%s", buf.String())
	}
	// The quiet period ends the spell: the next refusal is logged at once.
	testutil.Eventually(t, 5*time.Second, "the spell to end", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.timer == nil
	})
	r.note(ReasonReadTimeout, "127.0.0.1:2")
	r.note(ReasonReadTimeout, "127.0.0.1:3")
	r.stop()
	r.note(ReasonReadTimeout, "127.0.0.1:4")
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[3], `"remote":"127.0.0.1:2"`) || !strings.Contains(lines[4], `"total":1`) {
		t.Errorf("log after stop:\n%s", buf.String())
	}
}

// A reason new to a spell is logged at once, with its remote address,
// even while other reasons are being summed up; a reason seen in the
// spell is not, until the spell ends.
func TestRefusalLogShowsNewReasons(t *testing.T) {
	buf := &testutil.SyncBuffer{}
	r := newRefusalLog(zerolog.New(buf), time.Hour)
	defer r.stop()
	for range 10 {
		r.note(ReasonCap, "10.0.0.1:1")
	}
	r.note(ReasonTLSHandshake, "10.0.0.2:1")
	r.note(ReasonCap, "10.0.0.3:1")
	r.note(ReasonTLSHandshake, "10.0.0.4:1")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"reason":"cap"`) || !strings.Contains(lines[0], `"remote":"10.0.0.1:1"`) ||
		!strings.Contains(lines[1], `"reason":"tls_handshake"`) || !strings.Contains(lines[1], `"remote":"10.0.0.2:1"`) {
		t.Errorf("log:\n%s", buf.String())
	}
}

// The TLS refusal log remembers what it logged by remote host and reason:
// another reason from a host is logged, the same one again is not.
func TestOnceLogKeysByHostAndReason(t *testing.T) {
	buf := &testutil.SyncBuffer{}
	o := newOnceLog(zerolog.New(buf), maxOnceLogged)
	for _, w := range []struct{ remote, reason, detail string }{
		{"10.0.0.1:1000", ReasonPlaintext, ""},
		{"10.0.0.1:1001", ReasonPlaintext, ""},
		{"10.0.0.1:1002", ReasonTLSHandshake, "remote error: tls: bad certificate"},
		{"10.0.0.1:1003", ReasonTLSHandshake, "tls: client offered only unsupported versions"},
		{"10.0.0.2:1000", ReasonTLSHandshake, "remote error: tls: bad certificate"},
	} {
		o.warn(w.remote, w.reason, "refused", w.detail)
	}
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{"10.0.0.1:1000", "10.0.0.1:1002", "10.0.0.2:1000"}
	if len(got) != len(want) {
		t.Fatalf("logged %d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i, remote := range want {
		if !strings.Contains(got[i], `"remote":"`+remote+`"`) {
			t.Errorf("line %d: %s, want the one from %s", i, got[i], remote)
		}
	}
}
