package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// cluster is the membership the fake members report in their Status.
type cluster struct {
	mu      sync.Mutex
	members []*xcev1.Member
}

func (c *cluster) set(addrs ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members = nil
	for i, a := range addrs {
		c.members = append(c.members, &xcev1.Member{Id: "n" + string(rune('1'+i)), ClientAddr: a, Voter: true, Primary: i == 0})
	}
}

func (c *cluster) get() []*xcev1.Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.members)
}

// member is a node of cluster on an httptest server: it serves
// ListWorkers and answers Status with the cluster's members.
type member struct {
	xcev1connect.UnimplementedControllerServiceHandler
	c      *cluster
	srv    *httptest.Server
	addr   string
	served atomic.Int64
	status atomic.Int64
	// healthz counts GET /healthz; conns the connections opened to it.
	healthz, conns atomic.Int64
	// hang makes Status wait for the caller to give up.
	hang atomic.Bool
}

func (m *member) Status(ctx context.Context, _ *connect.Request[xcev1.StatusRequest]) (*connect.Response[xcev1.StatusResponse], error) {
	m.status.Add(1)
	if m.hang.Load() {
		<-ctx.Done()
		return nil, connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewResponse(&xcev1.StatusResponse{Members: m.c.get()}), nil
}

func (m *member) ListWorkers(context.Context, *connect.Request[xcev1.ListWorkersRequest]) (*connect.Response[xcev1.ListWorkersResponse], error) {
	m.served.Add(1)
	return connect.NewResponse(&xcev1.ListWorkersResponse{}), nil
}

func startMember(t *testing.T, c *cluster) *member {
	t.Helper()
	m := &member{c: c}
	m.srv = httptest.NewUnstartedServer(newMux(m))
	m.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			m.conns.Add(1)
		}
	}
	m.srv.Start()
	t.Cleanup(m.srv.Close)
	m.addr = m.srv.Listener.Addr().String()
	return m
}

// A client given three addresses keeps working while all three are
// replaced one by one: each Status it reads, in the background of its
// calls, names the members it should call.
func TestClientFollowsTheMembers(t *testing.T) {
	cl := &cluster{}
	orig := []*member{startMember(t, cl), startMember(t, cl), startMember(t, cl)}
	cl.set(orig[0].addr, orig[1].addr, orig[2].addr)
	c := newClient(t, []string{orig[0].addr, orig[1].addr, orig[2].addr},
		client.Options{RefreshInterval: time.Millisecond, AttemptTimeout: time.Second})
	t.Cleanup(c.Close)

	var added []*member
	live := []string{orig[0].addr, orig[1].addr, orig[2].addr}
	for i := range orig {
		m := startMember(t, cl)
		added = append(added, m)
		// The new member joins, then the old one leaves the configuration
		// and stops.
		live = append(live, m.addr)
		cl.set(live...)
		testutil.Eventually(t, 5*time.Second, "the client learns "+m.addr, func() bool {
			if _, err := c.ListWorkers(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			return slices.Contains(c.Endpoints(), m.addr)
		})
		live = slices.DeleteFunc(live, func(a string) bool { return a == orig[i].addr })
		cl.set(live...)
		orig[i].srv.Close()
		testutil.Eventually(t, 5*time.Second, "the client drops "+orig[i].addr, func() bool {
			if _, err := c.ListWorkers(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			return !slices.Contains(c.Endpoints(), orig[i].addr)
		})
	}
	want := []string{added[0].addr, added[1].addr, added[2].addr}
	if got := c.Endpoints(); !slices.Equal(got, want) {
		t.Fatalf("endpoints %v, want %v", got, want)
	}
	before := added[0].served.Load() + added[1].served.Load() + added[2].served.Load()
	if _, err := c.ListWorkers(ctxT(t)); err != nil {
		t.Fatalf("with every original node gone: %v", err)
	}
	if after := added[0].served.Load() + added[1].served.Load() + added[2].served.Load(); after != before+1 {
		t.Fatalf("served %d calls, want one by a member learned from Status", after-before)
	}
}

// Status teaches the members' client addresses; a list that names none
// teaches nothing, so the client never drops to no endpoint.
func TestStatusTeachesTheMembers(t *testing.T) {
	cl := &cluster{}
	a, b := startMember(t, cl), startMember(t, cl)
	c := newClient(t, []string{a.addr}, client.Options{RefreshInterval: -1})
	t.Cleanup(c.Close)

	if _, err := c.Status(ctxT(t), a.addr); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{a.addr}) {
		t.Fatalf("no members known: endpoints %v, want the given one", got)
	}
	cl.mu.Lock()
	cl.members = []*xcev1.Member{{Id: "n1", PeerAddr: "127.0.0.1:1"}}
	cl.mu.Unlock()
	if _, err := c.Status(ctxT(t), a.addr); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{a.addr}) {
		t.Fatalf("members without client addresses: endpoints %v, want the given one", got)
	}
	cl.set(b.addr, a.addr, b.addr)
	if _, err := c.Status(ctxT(t), a.addr); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{a.addr, b.addr}) {
		t.Fatalf("endpoints %v, want the known one first, then the new one, once", got)
	}
	cl.set(b.addr)
	if _, err := c.Status(ctxT(t), a.addr); err != nil {
		t.Fatal(err)
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{b.addr}) {
		t.Fatalf("endpoints %v, want the one member", got)
	}
	// The next call goes to the member, not the node that left.
	if _, err := c.ListWorkers(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if a.served.Load() != 0 || b.served.Load() != 1 {
		t.Fatalf("served by a %d, b %d; want b", a.served.Load(), b.served.Load())
	}
	// RefreshInterval < 0: the calls themselves asked for no Status.
	if n := a.status.Load() + b.status.Load(); n != 4 {
		t.Fatalf("%d Status calls, want the 4 made here", n)
	}
}

// Calls refresh the members at most once per interval, and Close stops a
// refresh in flight.
func TestRefreshIsSpacedAndStoppedByClose(t *testing.T) {
	cl := &cluster{}
	a := startMember(t, cl)
	cl.set(a.addr)
	c := newClient(t, []string{a.addr}, client.Options{RefreshInterval: time.Hour, AttemptTimeout: time.Minute})
	for range 5 {
		if _, err := c.ListWorkers(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "one refresh", func() bool { return a.status.Load() == 1 })

	a.hang.Store(true)
	c2 := newClient(t, []string{a.addr}, client.Options{AttemptTimeout: time.Minute})
	if _, err := c2.ListWorkers(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "a hanging refresh", func() bool { return a.status.Load() == 2 })
	done := make(chan struct{})
	go func() {
		c2.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not stop the refresh")
	}
	c.Close()
}

func newMux(m *member) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(m))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		m.healthz.Add(1)
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// A pinned client calls only the endpoints it was given: Status teaches it
// no members.
func TestPinnedClientLearnsNoMembers(t *testing.T) {
	cl := &cluster{}
	a, b := startMember(t, cl), startMember(t, cl)
	cl.set(b.addr, a.addr)
	c := newClient(t, []string{a.addr}, client.Options{Pinned: true, RefreshInterval: time.Millisecond})
	t.Cleanup(c.Close)
	if _, err := c.Status(ctxT(t), a.addr); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.ListWorkers(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Endpoints(); !slices.Equal(got, []string{a.addr}) {
		t.Fatalf("endpoints %v, want only %s", got, a.addr)
	}
	if n := b.served.Load(); n != 0 {
		t.Fatalf("a member it was not given served %d calls", n)
	}
}

// While calls are made, the client holds connections open to every member,
// so the first calls to one after a failover need no new connection.
func TestClientWarmsTheOtherMembers(t *testing.T) {
	cl := &cluster{}
	a, b, c := startMember(t, cl), startMember(t, cl), startMember(t, cl)
	cl.set(a.addr, b.addr, c.addr)
	cli := newClient(t, []string{a.addr}, client.Options{RefreshInterval: time.Hour})
	t.Cleanup(cli.Close)
	// The first warming comes a second after the first call, at a call.
	testutil.Eventually(t, 10*time.Second, "a /healthz call to each other member", func() bool {
		if _, err := cli.ListWorkers(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return b.healthz.Load() >= 1 && c.healthz.Load() >= 1
	})
	for _, m := range []*member{b, c} {
		before := m.conns.Load()
		if _, err := cli.Status(ctxT(t), m.addr); err != nil {
			t.Fatal(err)
		}
		if n := m.conns.Load(); n != before {
			t.Errorf("%s: %d connections opened by a call, want the warm one reused", m.addr, n-before)
		}
	}
}

// A client that makes its calls within a second and is done (the CLI)
// opens no connection to the members it did not call: one cut before its
// TLS handshake ends would look like a failed handshake to the node.
func TestShortLivedClientWarmsNothing(t *testing.T) {
	cl := &cluster{}
	a, b, c := startMember(t, cl), startMember(t, cl), startMember(t, cl)
	cl.set(a.addr, b.addr, c.addr)
	cli := newClient(t, []string{a.addr, b.addr, c.addr}, client.Options{RefreshInterval: time.Millisecond})
	start := time.Now()
	// A second member refresh starts only once the background work of the
	// first call (its refresh, and a warming after it if one were due) has
	// ended.
	testutil.Eventually(t, 5*time.Second, "a second member refresh", func() bool {
		if _, err := cli.ListWorkers(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		return a.status.Load() >= 2
	})
	took := time.Since(start)
	cli.Close()
	if took >= time.Second {
		t.Skipf("the calls took %v: past a second a warming is due", took)
	}
	if nb, nc := b.conns.Load(), c.conns.Load(); nb != 0 || nc != 0 {
		t.Errorf("%d and %d connections to the members not called, want none", nb, nc)
	}
}

// The member refresh a call starts goes once the call is done, on the
// connection the call leaves idle: a client of one call opens one
// connection.
func TestRefreshAfterTheCall(t *testing.T) {
	cl := &cluster{}
	a := startMember(t, cl)
	cl.set(a.addr)
	cli := newClient(t, []string{a.addr}, client.Options{})
	if _, err := cli.ListWorkers(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, "the member refresh", func() bool { return a.status.Load() >= 1 })
	cli.Close()
	if n := a.conns.Load(); n != 1 {
		t.Errorf("%d connections for a call and its refresh, want 1", n)
	}
}
