package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/tlsconf"
)

// connServer is an API-like server that counts the connections it accepts
// and closes.
type connServer struct {
	addr   string
	mu     sync.Mutex
	opened int
	closed int
}

// track counts the connections the server opens and closes.
func (s *connServer) track(_ net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.opened++
	case http.StateClosed, http.StateHijacked:
		s.closed++
	}
}

func startConnServer(t *testing.T, lim netio.Limits, h http.HandlerFunc) *connServer {
	t.Helper()
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &connServer{addr: ln.Addr().String()}
	srv := netio.NewServer(h, lim)
	srv.ConnState = s.track
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return s
}

func (s *connServer) counts() (opened, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened, s.closed
}

// waitClosed polls until the server has closed n connections.
func (s *connServer) waitClosed(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the server closes %d connections", n), func() bool {
		_, c := s.counts()
		return c >= n
	})
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	_, _ = fmt.Fprintf(w, "%s %s", r.Method, b)
}

func post(ctx context.Context, cl *http.Client, url, body string, hdr ...string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, opaqueBody{strings.NewReader(body)})
	if err != nil {
		return "", err
	}
	req.ContentLength = int64(len(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(cl, req)
}

func get(cl *http.Client, url string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	return do(cl, req)
}

func do(cl *http.Client, req *http.Request) (string, error) {
	resp, err := cl.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Calls one after another share one connection; concurrent calls use one
// connection each and return them for the calls that follow.
func TestTransportReusesConnections(t *testing.T) {
	s := startConnServer(t, netio.DefaultLimits(), echo)
	tr := New()
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	url := "http://" + s.addr + "/"
	for i := range 20 {
		got, err := post(context.Background(), cl, url, fmt.Sprint("task-", i))
		if want := fmt.Sprint("POST task-", i); err != nil || got != want {
			t.Fatalf("call %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if o, _ := s.counts(); o != 1 {
		t.Fatalf("20 calls in a row opened %d connections, want 1", o)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8*20)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				body := fmt.Sprintf("g%d-%d", g, i)
				got, err := post(context.Background(), cl, url, body)
				if err == nil && got != "POST "+body {
					err = fmt.Errorf("got %q for %q", got, body)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if o, _ := s.counts(); o > 9 {
		t.Errorf("8 concurrent callers opened %d connections in all, want at most 9", o)
	}
}

// A pooled connection the server closed while it was idle (its idle
// timeout, a restart) is noticed before use: a call that may not be sent
// twice still succeeds, on a new connection.
func TestTransportNoticesAClosedIdleConnection(t *testing.T) {
	lim := netio.DefaultLimits()
	lim.IdleTimeout = 20 * time.Millisecond
	s := startConnServer(t, lim, echo)
	tr := New()
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	url := "http://" + s.addr + "/"
	for i := range 3 {
		if _, err := post(context.Background(), cl, url, "x"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		s.waitClosed(t, i+1)
	}
	if o, _ := s.counts(); o != 3 {
		t.Errorf("opened %d connections, want 3", o)
	}
}

// rawServer answers HTTP/1.1 requests by hand; on the first connection it
// reads the second request and closes without answering.
func rawServer(t *testing.T) (addr string, requests func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Go(func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					mu.Lock()
					n++
					mu.Unlock()
					if first && i == 1 {
						return
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
		}
	})
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// A reused connection the server closes without answering: the call goes
// again on a new connection only when it may be sent twice (a GET, or an
// idempotency key), as with net/http's transport; otherwise the caller
// learns the server closed it.
func TestTransportRetriesOnlyWhatMayGoTwice(t *testing.T) {
	for _, c := range []struct {
		name string
		call func(cl *http.Client, url string) (string, error)
		ok   bool
	}{
		{"GET", get, true},
		{"POST", func(cl *http.Client, url string) (string, error) {
			return post(context.Background(), cl, url, "x")
		}, false},
		{"POST with an idempotency key", func(cl *http.Client, url string) (string, error) {
			return post(context.Background(), cl, url, "x", "Idempotency-Key", "k1")
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, requests := rawServer(t)
			tr := New()
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr}
			url := "http://" + addr + "/"
			if _, err := c.call(cl, url); err != nil {
				t.Fatalf("first call: %v", err)
			}
			got, err := c.call(cl, url)
			if c.ok {
				if err != nil || got != "ok" {
					t.Fatalf("second call: %q, %v; want it sent again and answered", got, err)
				}
				if n := requests(); n != 3 {
					t.Errorf("server read %d requests, want 3 (the second twice)", n)
				}
				return
			}
			if !errors.Is(err, errServerClosed) {
				t.Fatalf("second call: %q, %v; want %v", got, err, errServerClosed)
			}
			if n := requests(); n != 2 {
				t.Errorf("server read %d requests, want 2 (none sent twice)", n)
			}
		})
	}
}

// A call whose context ends while it waits returns the context's error at
// once and its connection is closed, never reused.
func TestTransportCancel(t *testing.T) {
	release := make(chan struct{})
	s := startConnServer(t, netio.DefaultLimits(), func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // only then does the server watch for a close
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_, _ = fmt.Fprintf(w, "%s %s", r.Method, b)
	})
	defer close(release)
	tr := New()
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := post(ctx, cl, "http://"+s.addr+"/slow", "x")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call returned %v after its deadline", d)
	}
	s.waitClosed(t, 1)
	if got, err := post(context.Background(), cl, "http://"+s.addr+"/", "y"); err != nil || got != "POST y" {
		t.Fatalf("next call: %q, %v", got, err)
	}
	if o, _ := s.counts(); o != 2 {
		t.Errorf("opened %d connections, want 2", o)
	}
}

// A body closed before its end closes its connection; one read to its end
// gives the connection back.
func TestTransportBodyClosedEarly(t *testing.T) {
	big := strings.Repeat("z", 1<<20)
	s := startConnServer(t, netio.DefaultLimits(), func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, big)
	})
	tr := New()
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	resp, err := cl.Get("http://" + s.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s.waitClosed(t, 1)
	for range 2 {
		got, err := get(cl, "http://"+s.addr+"/")
		if err != nil || got != big {
			t.Fatalf("got %d bytes, %v", len(got), err)
		}
	}
	if o, _ := s.counts(); o != 2 {
		t.Errorf("opened %d connections, want 2", o)
	}
}

// Idle connections are closed after the idle timeout, and at once by
// CloseIdleConnections.
func TestTransportClosesIdleConnections(t *testing.T) {
	s := startConnServer(t, netio.DefaultLimits(), echo)
	tr := New()
	tr.idleTimeout = 30 * time.Millisecond
	cl := &http.Client{Transport: tr}
	url := "http://" + s.addr + "/"
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := post(context.Background(), cl, url, "x"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	o, _ := s.counts()
	s.waitClosed(t, o)
	tr.mu.Lock()
	if len(tr.idle) != 0 || tr.sweep != nil {
		t.Errorf("after the sweep: %d hosts pooled, sweep armed %v", len(tr.idle), tr.sweep != nil)
	}
	tr.mu.Unlock()

	tr = New() // the default timeout: only CloseIdleConnections closes
	if _, err := post(context.Background(), &http.Client{Transport: tr}, url, "x"); err != nil {
		t.Fatal(err)
	}
	tr.CloseIdleConnections()
	s.waitClosed(t, o+1)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.idle) != 0 || tr.sweep != nil {
		t.Errorf("after CloseIdleConnections: %d hosts pooled, sweep armed %v", len(tr.idle), tr.sweep != nil)
	}
}

// testPKI writes a CA and a node certificate for 127.0.0.1 into a temp dir
// and returns the node's server config and a client config trusting the CA.
func testPKI(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, "c1"); err != nil {
		t.Fatal(err)
	}
	id := tlsconf.Identity{Cluster: "c1", Kind: tlsconf.KindNode, Name: "n1"}
	if _, _, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{ID: id, Hosts: []string{"127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(dir)
	cert, key := tlsconf.CertFiles(dir, "n1")
	src, err := tlsconf.NewSource(tlsconf.Files{CA: ca, Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	server = src.ServerConfig(tlsconf.ClientAuthNone, nil)
	server.NextProtos = []string{"h2", "http/1.1"}
	return server, &tls.Config{RootCAs: src.Pool(), MinVersion: tls.VersionTLS13}
}

// Over TLS the transport carries calls on its own loop: one handshake,
// then calls in a row share the connection; a server that closes it is
// noticed before the next call, which goes on a new one.
func TestTransportTLS(t *testing.T) {
	serverCfg, clientCfg := testPKI(t)
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &connServer{addr: ln.Addr().String()}
	var proto sync.Map
	srv := netio.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto, true)
		echo(w, r)
	}), netio.DefaultLimits())
	srv.ConnState = s.track
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(tls.NewListener(ln, serverCfg)) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	tr := NewTLS(clientCfg)
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	url := "https://" + s.addr + "/"
	for i := range 20 {
		got, err := post(context.Background(), cl, url, fmt.Sprint("task-", i))
		if want := fmt.Sprint("POST task-", i); err != nil || got != want {
			t.Fatalf("call %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if o, _ := s.counts(); o != 1 {
		t.Fatalf("20 calls in a row over TLS opened %d connections, want 1", o)
	}
	if _, ok := proto.Load("HTTP/1.1"); !ok {
		t.Fatal("the calls did not go over HTTP/1.1")
	}
	// A request body too large for the loop goes through net/http's
	// transport, over TLS too.
	big := strings.Repeat("b", maxOneWriteBody+1)
	if got, err := post(context.Background(), cl, url, big); err != nil || got != "POST "+big {
		t.Fatalf("large body: %d bytes, %v", len(got), err)
	}
	// The server closes the idle connections: the next call notices.
	srv.SetKeepAlivesEnabled(false)
	s.waitClosed(t, 1)
	srv.SetKeepAlivesEnabled(true)
	if got, err := post(context.Background(), cl, url, "after"); err != nil || got != "POST after" {
		t.Fatalf("after the server closed the connection: %q, %v", got, err)
	}

	// A client that does not trust the server's CA fails at the handshake.
	_, other := testPKI(t)
	tr2 := NewTLS(other)
	defer tr2.CloseIdleConnections()
	_, err = post(context.Background(), &http.Client{Transport: tr2}, url, "x")
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		t.Fatalf("untrusted server: %v, want a certificate verification error", err)
	}
}

// BenchmarkTransport is one small call over a reused connection,
// plaintext and over TLS.
func BenchmarkTransport(b *testing.B) {
	serverCfg, clientCfg := testPKI(b)
	for _, tc := range []struct {
		name   string
		scheme string
		tr     *Transport
		wrap   func(net.Listener) net.Listener
	}{
		{"plaintext", "http", New(), func(l net.Listener) net.Listener { return l }},
		{"tls", "https", NewTLS(clientCfg), func(l net.Listener) net.Listener { return tls.NewListener(l, serverCfg) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := netio.Listen("127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := netio.NewServer(http.HandlerFunc(echo), netio.DefaultLimits())
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(tc.wrap(ln)) }()
			defer func() { _ = srv.Close(); <-done }()
			defer tc.tr.CloseIdleConnections()
			cl := &http.Client{Transport: tc.tr}
			url := tc.scheme + "://" + ln.Addr().String() + "/"
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := post(context.Background(), cl, url, "task-1"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// Callers that all need a new TLS connection to one address at once make
// at most clientHandshakesPerHost handshakes together; the others wait
// their turn (or until their context ends) and are then served.
func TestTransportHandshakesInTurns(t *testing.T) {
	gs := startGatedTLS(t, http.HandlerFunc(echo))
	gate, mu := gs.gate, &gs.mu
	blocked, most := &gs.blocked, &gs.most
	clientCfg := gs.clientCfg
	ln := gs.ln
	tr := NewTLS(clientCfg)
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	url := "https://" + ln.Addr().String() + "/"
	const callers = 20
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got, err := post(ctx, cl, url, fmt.Sprint("task-", i))
			if want := fmt.Sprint("POST task-", i); err == nil && got != want {
				err = fmt.Errorf("got %q, want %q", got, want)
			}
			errs <- err
		}()
	}
	stateIs := func(wantBlocked int, wantWaits int64) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d handshakes at the server and %d callers waiting", wantBlocked, wantWaits), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return *blocked == wantBlocked && tr.slotWaits.Load() == wantWaits
		})
	}
	stateIs(clientHandshakesPerHost, callers-clientHandshakesPerHost)

	// One more whose context ends while it waits: an error naming the wait.
	ctx, cancel := context.WithCancel(context.Background())
	late := make(chan error, 1)
	go func() { _, err := post(ctx, cl, url, "late"); late <- err }()
	stateIs(clientHandshakesPerHost, callers-clientHandshakesPerHost+1)
	cancel()
	if err := <-late; err == nil || !strings.Contains(err.Error(), "waiting to connect") {
		t.Errorf("cancelled while waiting: %v, want an error naming the wait", err)
	}

	close(gate)
	for range callers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if *most > clientHandshakesPerHost {
		t.Errorf("%d handshakes at once, want at most %d", *most, clientHandshakesPerHost)
	}
}

// gatedTLS is a TLS server whose handshakes wait at gate until it is
// closed, counting those that wait (gate is read under mu).
type gatedTLS struct {
	ln        net.Listener
	clientCfg *tls.Config
	gate      chan struct{}

	mu            sync.Mutex
	blocked, most int
}

func startGatedTLS(t *testing.T, h http.Handler) *gatedTLS {
	t.Helper()
	serverCfg, clientCfg := testPKI(t)
	gs := &gatedTLS{clientCfg: clientCfg, gate: make(chan struct{})}
	cfg := serverCfg.Clone()
	next := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		gs.mu.Lock()
		gs.blocked++
		gs.most = max(gs.most, gs.blocked)
		gate := gs.gate
		gs.mu.Unlock()
		<-gate
		gs.mu.Lock()
		gs.blocked--
		gs.mu.Unlock()
		if next == nil {
			return nil, nil
		}
		return next(hello)
	}
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs.ln = ln
	srv := netio.NewServer(h, netio.DefaultLimits())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return gs
}

// A caller waiting its turn to dial takes a connection that another call
// gives back, without a handshake of its own.
func TestTransportWaiterTakesConnectionGivenBack(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	gs := startGatedTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-release
		}
		echo(w, r)
	}))
	tr := NewTLS(gs.clientCfg)
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	base := "https://" + gs.ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// One connection, made while the gate is open, held by a slow call.
	opened := make(chan struct{})
	close(opened)
	gs.mu.Lock()
	gate := gs.gate
	gs.gate = opened
	gs.mu.Unlock()
	slow := make(chan error, 1)
	go func() { _, err := post(ctx, cl, base+"/slow", "slow"); slow <- err }()
	<-arrived
	gs.mu.Lock()
	gs.gate = gate
	gs.mu.Unlock()

	// Every slot taken by a handshake that cannot finish, and one caller
	// more waiting.
	const callers = clientHandshakesPerHost + 1
	errs := make(chan error, callers)
	for i := range callers {
		go func() {
			got, err := post(ctx, cl, base+"/", fmt.Sprint("call-", i))
			if want := fmt.Sprint("POST call-", i); err == nil && got != want {
				err = fmt.Errorf("got %q, want %q", got, want)
			}
			errs <- err
		}()
	}
	testutil.Eventually(t, 10*time.Second, "two handshakes held and one caller waiting", func() bool {
		gs.mu.Lock()
		defer gs.mu.Unlock()
		return gs.blocked == clientHandshakesPerHost && tr.slotWaits.Load() == 1
	})

	// The slow call ends: its connection goes to the waiting caller, which
	// is answered while the gate is still shut.
	close(release)
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting caller did not take the connection given back")
	}
	close(gate)
	for range callers - 1 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
