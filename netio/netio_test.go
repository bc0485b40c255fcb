package netio

import (
	"errors"
	"io"
	"net/http"
	"testing"
)

// The server answers HTTP/1.1 (what the client library's transport speaks)
// and cleartext HTTP/2 with prior knowledge (what gRPC-style clients speak)
// on one port.
func TestServerSpeaksHTTP1AndH2C(t *testing.T) {
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}), DefaultLimits())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	var h1, h2 http.Protocols
	h1.SetHTTP1(true)
	h2.SetUnencryptedHTTP2(true)
	for _, c := range []struct {
		tr interface {
			http.RoundTripper
			CloseIdleConnections()
		}
		want string
	}{
		{&http.Transport{Protocols: &h1}, "HTTP/1.1"},
		{&http.Transport{Protocols: &h2}, "HTTP/2.0"},
	} {
		resp, err := (&http.Client{Transport: c.tr}).Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.tr.CloseIdleConnections()
		if string(b) != c.want {
			t.Errorf("got %q, want %q", b, c.want)
		}
	}
}
