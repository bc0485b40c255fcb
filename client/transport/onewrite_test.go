package transport

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/xce/xce/netio"
)

// countingConn counts the writes on a client connection.
type countingConn struct {
	net.Conn
	mu     *sync.Mutex
	writes *int
}

func (c countingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	*c.writes++
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// opaqueBody is a request body net/http cannot tell is in memory, like the
// RPC library's.
type opaqueBody struct{ io.Reader }

func (opaqueBody) Close() error { return nil }

// A request with a body of known length up to maxOneWriteBody goes out in
// one write, so the server reads headers and body at once; larger bodies
// are streamed. Every body arrives intact.
func TestTransportSendsARequestInOneWrite(t *testing.T) {
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := netio.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}), netio.DefaultLimits())
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	var mu sync.Mutex
	writes := 0
	d := &net.Dialer{}
	tr := newTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, mu: &mu, writes: &writes}, nil
	}, nil)
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	for i, body := range []string{"task-1", strings.Repeat("x", maxOneWriteBody), strings.Repeat("y", maxOneWriteBody+1)} {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/", opaqueBody{strings.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = int64(len(body))
		mu.Lock()
		before := writes
		mu.Unlock()
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		n := writes - before
		mu.Unlock()
		if string(got) != body {
			t.Errorf("request %d: the server got %d bytes, want %d", i, len(got), len(body))
		}
		if n != 1 && len(body) <= maxOneWriteBody {
			t.Errorf("request %d (%d bytes of body) went out in %d writes, want 1", i, len(body), n)
		}
	}
}
