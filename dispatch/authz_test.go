package dispatch_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/auth"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/placement"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
)

// acceptAll is a worker registry that accepts every call.
type acceptAll struct{}

func (acceptAll) RegisterWith(placement.Registration) (placement.RegisterInfo, error) {
	return placement.RegisterInfo{Generation: 1}, nil
}
func (acceptAll) Beat(context.Context, placement.Beat) (placement.Answer, error) {
	return placement.Answer{}, nil
}
func (acceptAll) Workers() ([]placement.WorkerInfo, bool, error) { return nil, false, nil }
func (acceptAll) Away() []placement.AwayInfo                     { return nil }
func (acceptAll) Addrs() map[string]string                       { return nil }
func (acceptAll) Soft() (map[string]placement.TaskSoft, bool, bool, bool) {
	return nil, false, false, false
}

func sum(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(h[:])
}

// TestPermissionsOverTLS serves the API over TLS (client certificates
// optional) with a tokens file, and calls it as each kind of caller.
func TestPermissionsOverTLS(t *testing.T) {
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, "c1"); err != nil {
		t.Fatal(err)
	}
	mk := func(kind, name string, hosts ...string) tlsconf.Files {
		cert, key, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "c1", Kind: kind, Name: name}, Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		ca, _ := tlsconf.CAFiles(dir)
		return tlsconf.Files{CA: ca, Cert: cert, Key: key}
	}
	srvFiles := mk(tlsconf.KindNode, "n1", "127.0.0.1")
	w1 := mk(tlsconf.KindWorker, "w1")
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte(sum("adm")+" root admin\n"+sum("rd")+" viewer reader\n"+sum("wt")+" w2 worker\n"), 0o600)
	tk, err := auth.LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	authn := auth.New(auth.Config{Cluster: "c1", Tokens: tk, ClientAuth: tlsconf.ClientAuthOptional})

	node := newFakeNode("n1", ha.View{Role: ha.RolePrimary, WriteQuorum: true, Term: 1})
	node.seed(t, "t1")
	reg := prometheus.NewRegistry()
	path, h := dispatch.New(node, reg, acceptAll{}, dispatch.WithAuth(authn))
	mux := http.NewServeMux()
	mux.Handle(path, h)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	src, err := tlsconf.NewSource(srvFiles)
	if err != nil {
		t.Fatal(err)
	}
	lim := netio.Limits{MaxConnections: 8, HealthReserve: 2}
	srv := netio.NewServer(mux, lim, netio.WithTLS(src.ServerConfig(tlsconf.ClientAuthOptional, nil)), netio.WithMetrics(netio.NewConnMetrics(reg)))
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
	url := "https://" + ln.Addr().String()

	client := func(files tlsconf.Files, token string) (*http.Client, xcev1connect.ControllerServiceClient, xcev1connect.WorkerServiceClient) {
		cs, err := tlsconf.NewSource(files)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: cs.ClientConfig("127.0.0.1", nil), ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		hc := &http.Client{Transport: testutil.Bearer{RT: tr, Token: token}}
		return hc, xcev1connect.NewControllerServiceClient(hc, url, connect.WithGRPC()), xcev1connect.NewWorkerServiceClient(hc, url)
	}
	ca, _ := tlsconf.CAFiles(dir)
	anonHTTP, anon, _ := client(tlsconf.Files{CA: ca}, "")
	_, reader, _ := client(tlsconf.Files{CA: ca}, "rd")
	_, admin, _ := client(tlsconf.Files{CA: ca}, "adm")
	_, bad, _ := client(tlsconf.Files{CA: ca}, "nope")
	_, _, worker1 := client(w1, "")
	_, _, worker2 := client(tlsconf.Files{CA: ca}, "wt")
	ctx := ctxT(t)

	// Health needs no credentials, over HTTP/2.
	resp, err := anonHTTP.Get(url + "/healthz")
	if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()

	applies := node.applies.Load()
	_, err = anon.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "x"}))
	wantCode(t, "no credentials submit", err, connect.CodeUnauthenticated)
	_, err = bad.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "t1"}))
	wantCode(t, "unknown token", err, connect.CodeUnauthenticated)
	_, err = reader.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "x"}))
	wantCode(t, "reader submit", err, connect.CodePermissionDenied)
	if !strings.Contains(err.Error(), `"write"`) {
		t.Errorf("the refusal does not name the permission: %v", err)
	}
	_, err = reader.DeleteTask(ctx, connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "t1"}))
	wantCode(t, "reader delete", err, connect.CodePermissionDenied)
	_, err = worker1.Heartbeat(ctx, connect.NewRequest(&xcev1.HeartbeatRequest{WorkerId: "w2"}))
	wantCode(t, "w1 heartbeats as w2", err, connect.CodePermissionDenied)
	_, err = worker2.Register(ctx, connect.NewRequest(&xcev1.RegisterRequest{WorkerId: "w1", Capacity: 1}))
	wantCode(t, "w2 registers as w1", err, connect.CodePermissionDenied)
	_, err = reader.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: "w1"}))
	wantCode(t, "reader drains", err, connect.CodePermissionDenied)
	if !strings.Contains(err.Error(), `"drain"`) {
		t.Errorf("the refusal does not name the permission: %v", err)
	}
	if got := node.applies.Load(); got != applies {
		t.Fatalf("a refused call reached Apply: %d applies, want %d", got, applies)
	}
	if _, ok := node.fsm.Task("t1"); !ok {
		t.Fatal("t1 deleted")
	}

	if _, err := reader.GetTask(ctx, connect.NewRequest(&xcev1.GetTaskRequest{TaskId: "t1"})); err != nil {
		t.Fatalf("reader get: %v", err)
	}
	st, err := reader.Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
	if err != nil || st.Msg.Auth != "on" {
		t.Fatalf("status: %v %v", st, err)
	}
	if _, err := worker1.Heartbeat(ctx, connect.NewRequest(&xcev1.HeartbeatRequest{WorkerId: "w1"})); err != nil {
		t.Fatalf("w1 heartbeats as itself: %v", err)
	}
	if _, err := worker2.Register(ctx, connect.NewRequest(&xcev1.RegisterRequest{WorkerId: "w2", Capacity: 1})); err != nil {
		t.Fatalf("w2 registers as itself: %v", err)
	}
	if _, err := admin.DeleteTask(ctx, connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "t1"})); err != nil {
		t.Fatalf("admin delete: %v", err)
	}
	if _, err := admin.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: "w1"})); err != nil {
		t.Fatalf("admin drain: %v", err)
	}
	for _, c := range []struct {
		method, code string
		want         float64
	}{
		{xcev1connect.ControllerServiceSubmitTaskProcedure, "unauthenticated", 1},
		{xcev1connect.ControllerServiceSubmitTaskProcedure, "permission_denied", 1},
		{xcev1connect.WorkerServiceHeartbeatProcedure, "permission_denied", 1},
	} {
		if got := counter(t, reg, "xce_auth_refused_total", map[string]string{"method": c.method, "code": c.code}); got != c.want {
			t.Errorf("xce_auth_refused_total{%s,%s} = %v, want %v", c.method, c.code, got, c.want)
		}
	}

	// Cleartext to the TLS port: a clear answer, counted.
	plain, err := (&http.Client{Transport: &http.Transport{}}).Get("http://" + ln.Addr().String() + "/healthz")
	if err == nil {
		b, _ := io.ReadAll(plain.Body)
		plain.Body.Close()
		if plain.StatusCode != 400 || !strings.Contains(string(b), "HTTPS") {
			t.Fatalf("cleartext: %d %s", plain.StatusCode, b)
		}
	}
	if got := counter(t, reg, "xce_client_conn_refused_total", map[string]string{"reason": "plaintext"}); got != 1 {
		t.Errorf("plaintext refusals: %v, want 1", got)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
