package dispatch_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/xce/xce/auth"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
)

func TestHealthDecision(t *testing.T) {
	const lag = ha.MaxStandbyLag
	standby := ha.View{Role: ha.RoleStandby, Term: 3, LeaderID: "n1"}
	for _, c := range []struct {
		name            string
		v               ha.View
		commit, applied uint64
		want            bool
	}{
		{"primary with quorum", primary, 10, 10, true},
		{"primary without quorum", ha.View{Role: ha.RolePrimary, Term: 5, LeaderID: "n1"}, 10, 10, false},
		{"primary stopping", ha.View{Role: ha.RolePrimary, WriteQuorum: true, Stopping: true}, 10, 10, false},
		{"standby caught up", standby, 100, 100, true},
		{"standby within the bound", standby, 100 + lag, 100, true},
		{"standby past the bound", standby, 101 + lag, 100, false},
		{"standby applied past what it knows committed", standby, 5, 9, true},
		{"standby without a leader", ha.View{Role: ha.RoleStandby, Term: 3}, 10, 10, false},
		{"standby with failing storage", ha.View{Role: ha.RoleStandby, Term: 3, LeaderID: "n1", Storage: "no space left on device"}, 10, 10, false},
		{"electing", ha.View{Role: ha.RoleElecting, Term: 4}, 10, 10, false},
		{"init", ha.View{Role: ha.RoleInit}, 0, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, reason := ha.Serving(&c.v, c.commit, c.applied)
			if got != c.want {
				t.Fatalf("Health = %v (%s), want %v", got, reason, c.want)
			}
			if !got && reason == "" {
				t.Error("NOT_SERVING without a reason")
			}
		})
	}
}

// lagNode is a fakeNode whose commit index runs ahead of its FSM.
type lagNode struct {
	*fakeNode
	ahead atomic.Uint64
}

func (n *lagNode) Indexes() (commit, applied uint64) {
	_, a := n.fakeNode.Indexes()
	return a + n.ahead.Load(), a
}

// h2c is an HTTP client that speaks HTTP/2 without TLS, as gRPC tools do.
func h2c(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// serve serves h on the real netio server and returns its base URL.
func serve(t *testing.T, h http.Handler, opts ...netio.Option) string {
	t.Helper()
	srv := netio.NewServer(h, netio.DefaultLimits(), opts...)
	ln, err := netio.Listen("127.0.0.1:0")
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
	return ln.Addr().String()
}

// The gRPC health service answers for the node and each xce service, by
// role, over gRPC on the client port; reflection lists the services.
func TestHealthAndReflectionOverTheWire(t *testing.T) {
	node := &lagNode{fakeNode: newFakeNode("n2", primary)}
	path, h := dispatch.New(node, prometheus.NewRegistry(), nil)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	url := "http://" + serve(t, mux)
	hc := h2c(t)
	health := grpchealth.NewClient(hc, url, connect.WithGRPC())
	ctx := ctxT(t)

	check := func(service string) grpchealth.Status {
		t.Helper()
		r, err := health.Check(ctx, &grpchealth.CheckRequest{Service: service})
		if err != nil {
			t.Fatalf("check %q: %v", service, err)
		}
		return r.Status
	}
	services := append([]string{""}, dispatch.HealthServices...)
	for _, c := range []struct {
		name  string
		v     ha.View
		ahead uint64
		want  grpchealth.Status
	}{
		{"primary", primary, 0, grpchealth.StatusServing},
		{"primary without quorum", ha.View{Role: ha.RolePrimary, Term: 5, LeaderID: "n2"}, 0, grpchealth.StatusNotServing},
		{"standby caught up", ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n1"}, 3, grpchealth.StatusServing},
		{"standby catching up", ha.View{Role: ha.RoleStandby, Term: 5, LeaderID: "n1"}, ha.MaxStandbyLag + 1, grpchealth.StatusNotServing},
		{"electing", ha.View{Role: ha.RoleElecting, Term: 6}, 0, grpchealth.StatusNotServing},
		{"stopping", ha.View{Role: ha.RolePrimary, WriteQuorum: true, Stopping: true}, 0, grpchealth.StatusNotServing},
	} {
		node.setView(c.v)
		node.ahead.Store(c.ahead)
		for _, s := range services {
			if got := check(s); got != c.want {
				t.Errorf("%s: service %q is %v, want %v", c.name, s, got, c.want)
			}
		}
	}
	_, err := health.Check(ctx, &grpchealth.CheckRequest{Service: "acme.Nope"})
	wantCode(t, "unknown service", err, connect.CodeNotFound)

	// Over the Connect protocol and HTTP/1.1 too.
	r, err := grpchealth.NewClient(http.DefaultClient, url).Check(ctx, &grpchealth.CheckRequest{})
	if err != nil || r.Status != grpchealth.StatusNotServing {
		t.Fatalf("connect check while stopping: %v %v", r, err)
	}

	names := listServices(t, hc, url, "")
	for _, want := range []string{xcev1connect.ControllerServiceName, xcev1connect.ClusterServiceName, grpchealth.HealthV1ServiceName} {
		if !slices.Contains(names, protoreflect.FullName(want)) {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
}

// listServices lists the services by reflection, as token.
func listServices(t *testing.T, hc *http.Client, url, token string) []protoreflect.FullName {
	t.Helper()
	rc := grpcreflect.NewClient(hc, url, connect.WithGRPC())
	var opts []grpcreflect.ClientStreamOption
	if token != "" {
		opts = append(opts, grpcreflect.WithRequestHeaders(http.Header{"Authorization": {"Bearer " + token}}))
	}
	st := rc.NewStream(ctxT(t), opts...)
	defer st.Close()
	names, err := st.ListServices()
	if err != nil {
		t.Fatalf("list services: %v", err)
	}
	return names
}

// With permissions on, health still answers without credentials;
// reflection needs the status permission.
func TestHealthWithoutCredentials(t *testing.T) {
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, "c1"); err != nil {
		t.Fatal(err)
	}
	cert, key, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "c1", Kind: tlsconf.KindNode, Name: "n1"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(dir)
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(sum("rd")+" viewer reader\n"+sum("wt")+" w2 worker\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := auth.LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	authn := auth.New(auth.Config{Cluster: "c1", Tokens: tk, ClientAuth: tlsconf.ClientAuthOptional})
	node := newFakeNode("n1", ha.View{Role: ha.RoleStandby, LeaderID: "n2", Term: 1})
	reg := prometheus.NewRegistry()
	path, h := dispatch.New(node, reg, nil, dispatch.WithAuth(authn))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	src, err := tlsconf.NewSource(tlsconf.Files{CA: ca, Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + serve(t, mux, netio.WithTLS(src.ServerConfig(tlsconf.ClientAuthOptional, nil)))
	cs, err := tlsconf.NewSource(tlsconf.Files{CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: cs.ClientConfig("127.0.0.1", nil), ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ctx := ctxT(t)

	r, err := grpchealth.NewClient(hc, url, connect.WithGRPC()).Check(ctx, &grpchealth.CheckRequest{Service: xcev1connect.ControllerServiceName})
	if err != nil || r.Status != grpchealth.StatusServing {
		t.Fatalf("health without credentials: %v %v", r, err)
	}
	if got := counter(t, reg, "xce_auth_refused_total", nil); got != 0 {
		t.Errorf("%v refusals counted for a health check", got)
	}

	rc := grpcreflect.NewClient(hc, url, connect.WithGRPC())
	for _, c := range []struct {
		token string
		code  connect.Code
	}{{"", connect.CodeUnauthenticated}, {"wt", connect.CodePermissionDenied}} {
		var opts []grpcreflect.ClientStreamOption
		if c.token != "" {
			opts = append(opts, grpcreflect.WithRequestHeaders(http.Header{"Authorization": {"Bearer " + c.token}}))
		}
		st := rc.NewStream(ctx, opts...)
		_, err := st.ListServices()
		_, _ = st.Close()
		wantCode(t, "reflection as "+c.token, err, c.code)
	}
	for _, code := range []string{"unauthenticated", "permission_denied"} {
		if got := counter(t, reg, "xce_auth_refused_total", map[string]string{"code": code}); got != 1 {
			t.Errorf("%v reflection calls refused as %s, want 1", got, code)
		}
	}
	if names := listServices(t, hc, url, "rd"); !slices.Contains(names, protoreflect.FullName(xcev1connect.ControllerServiceName)) {
		t.Fatalf("a reader's reflection lists %v", names)
	}
}
