package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// warmNode is a TLS server that counts the connections opened to it and
// the /healthz calls it answers; a POST to /hold waits for release.
type warmNode struct {
	srv            *httptest.Server
	addr           string
	conns, healthz atomic.Int64
	held           sync.WaitGroup

	mu      sync.Mutex
	release chan struct{} // for the calls of a hold
	// closing makes it close each connection after a /healthz answer, as
	// a node at its connection cap does on its health reserve.
	closing atomic.Bool
}

func startWarmNode(t *testing.T, serverCfg *tls.Config) *warmNode {
	t.Helper()
	n := &warmNode{}
	n.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			n.healthz.Add(1)
			if n.closing.Load() {
				w.Header().Set("Connection", "close")
			}
			_, _ = w.Write([]byte("ok\n"))
		case "/hold":
			n.mu.Lock()
			release := n.release
			n.mu.Unlock()
			n.held.Done()
			<-release
			echo(w, r)
		default:
			echo(w, r)
		}
	}))
	n.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.conns.Add(1)
		}
	}
	n.srv.TLS = serverCfg.Clone()
	n.srv.StartTLS()
	t.Cleanup(n.srv.Close)
	n.addr = n.srv.Listener.Addr().String()
	return n
}

// Warm opens as many connections to every address as the most calls made
// at once to one, renews idle ones, lets the pools shrink when fewer calls
// are made, and does nothing when called again soon after.
func TestTransportWarm(t *testing.T) {
	serverCfg, clientCfg := testPKI(t)
	a, b := startWarmNode(t, serverCfg), startWarmNode(t, serverCfg)
	tr := NewTLS(clientCfg)
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Three calls in flight to a at once: three connections.
	const depth = 3
	a.hold(ctx, t, cl, depth)

	if err := tr.Warm(ctx, []string{a.addr, b.addr}, true); err != nil {
		t.Fatal(err)
	}
	if n := b.conns.Load(); n != depth {
		t.Errorf("b: %d connections after Warm, want %d", n, depth)
	}
	if n := b.healthz.Load(); n != depth {
		t.Errorf("b: %d /healthz calls, want one per new connection, %d", n, depth)
	}
	if n, h := a.conns.Load(), a.healthz.Load(); n != depth || h != 0 {
		t.Errorf("a: %d connections and %d /healthz calls, want the %d it had and none", n, h, depth)
	}

	// Soon after, Warm does nothing.
	if err := tr.Warm(ctx, []string{a.addr, b.addr}, true); err != nil {
		t.Fatal(err)
	}
	if n := b.healthz.Load(); n != depth {
		t.Errorf("b: %d /healthz calls after a second Warm at once, want %d", n, depth)
	}

	// Idle ones past renewAfter are renewed on the connections they are,
	// while as many calls at once are made.
	a.hold(ctx, t, cl, depth)
	tr.mu.Lock()
	tr.warmEvery, tr.renewAfter = 0, time.Nanosecond
	tr.mu.Unlock()
	if err := tr.Warm(ctx, []string{a.addr, b.addr}, true); err != nil {
		t.Fatal(err)
	}
	if n, h := b.conns.Load(), b.healthz.Load(); n != depth || h != 2*depth {
		t.Errorf("b: %d connections and %d /healthz calls after a renewal, want %d and %d", n, h, depth, 2*depth)
	}
	if n, h := a.conns.Load(), a.healthz.Load(); n != depth || h != depth {
		t.Errorf("a: %d connections and %d /healthz calls after a renewal, want %d and %d", n, h, depth, depth)
	}

	// Calls that move to b all at once find the connections made.
	b.hold(ctx, t, cl, depth)
	if n := b.conns.Load(); n != depth {
		t.Errorf("b: %d connections after %d calls at once, want the %d warm ones", n, depth, depth)
	}

	// With no calls since the last Warm, the next lets the pools shrink to
	// one connection each.
	if err := tr.Warm(ctx, []string{a.addr, b.addr}, true); err != nil {
		t.Fatal(err)
	}
	if err := tr.Warm(ctx, []string{a.addr, b.addr}, true); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	openA, openB := tr.open[poolKey{a.addr, true}], tr.open[poolKey{b.addr, true}]
	tr.mu.Unlock()
	if openA != 1 || openB != 1 {
		t.Errorf("%d and %d connections open after a Warm with no calls, want 1 each", openA, openB)
	}

	// An address nobody listens on: an error naming it, the others warmed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close()
	tr.mu.Lock()
	tr.warmed = time.Time{}
	tr.mu.Unlock()
	if err := tr.Warm(ctx, []string{dead, b.addr}, true); err == nil {
		t.Error("Warm of an address nobody listens on: no error")
	}
}

// hold makes n calls to the node at once, held until all have arrived.
func (n *warmNode) hold(ctx context.Context, t *testing.T, cl *http.Client, calls int) {
	t.Helper()
	release := make(chan struct{})
	n.mu.Lock()
	n.release = release
	n.mu.Unlock()
	n.held.Add(calls)
	errs := make(chan error, calls)
	for i := range calls {
		go func() { _, err := post(ctx, cl, "https://"+n.addr+"/hold", fmt.Sprint(i)); errs <- err }()
	}
	n.held.Wait()
	close(release)
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A node that closes the connection after answering (its health reserve)
// gets one connection from a Warm, not a stream of them.
func TestTransportWarmStopsWhenNotKept(t *testing.T) {
	serverCfg, clientCfg := testPKI(t)
	a, full := startWarmNode(t, serverCfg), startWarmNode(t, serverCfg)
	full.closing.Store(true)
	tr := NewTLS(clientCfg)
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a.hold(ctx, t, cl, 3)
	if err := tr.Warm(ctx, []string{full.addr, a.addr}, true); err == nil || !strings.Contains(err.Error(), full.addr) {
		t.Errorf("Warm: %v, want an error naming %s", err, full.addr)
	}
	if n := full.conns.Load(); n != 1 {
		t.Errorf("%d connections to a node that does not keep them, want 1", n)
	}
}
