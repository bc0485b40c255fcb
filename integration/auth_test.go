package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
)

// A single node with TLS on the client port, client certificates optional
// and a tokens file: health answers without credentials, each caller gets
// what its roles grant and no more, nothing refused changes the state, and
// cleartext to the port gets a clear error on both sides.
func TestAuthClientPortTLSAndTokens(t *testing.T) {
	pki := t.TempDir()
	if err := tlsconf.CreateCA(pki, "it"); err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(pki)
	cert := func(kind, name string, hosts ...string) tlsconf.Files {
		c, k, err := tlsconf.CreateCert(pki, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "it", Kind: kind, Name: name}, Hosts: hosts})
		if err != nil {
			t.Fatal(err)
		}
		return tlsconf.Files{CA: ca, Cert: c, Key: k}
	}
	srv := cert(tlsconf.KindNode, "n1", "127.0.0.1")
	w1 := cert(tlsconf.KindWorker, "w1")
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(pki, "tokens")
	if err := os.WriteFile(tokens, []byte("# test tokens\n"+hash("admin-tok")+" root admin\n"+hash("reader-tok")+" viewer reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 1, WithConfig(func(cfg *configs.Config) {
		cfg.TLS = configs.ClientTLS{CAFile: ca, CertFile: srv.Cert, KeyFile: srv.Key, ClientAuth: "optional"}
		cfg.Auth = configs.Auth{TokensFile: tokens, Anonymous: "none"}
	}))
	c.Start(0)
	url := "https://" + c.Addrs()[0]

	client := func(files tlsconf.Files, token string) (*http.Client, xcev1connect.ControllerServiceClient, xcev1connect.WorkerServiceClient) {
		src, err := tlsconf.NewSource(files)
		if err != nil {
			t.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: src.ClientConfig("127.0.0.1", nil), ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		hc := &http.Client{Transport: testutil.Bearer{RT: tr, Token: token}, Timeout: 5 * time.Second}
		return hc, xcev1connect.NewControllerServiceClient(hc, url), xcev1connect.NewWorkerServiceClient(hc, url, connect.WithGRPC())
	}
	anonHTTP, anon, _ := client(tlsconf.Files{CA: ca}, "")
	adminHTTP, admin, _ := client(tlsconf.Files{CA: ca}, "admin-tok")
	_, reader, _ := client(tlsconf.Files{CA: ca}, "reader-tok")
	_, _, worker := client(w1, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Health needs no credentials.
	testutil.Eventually(t, raceSlack(5*time.Second), "the node is ready over TLS", func() bool {
		resp, err := anonHTTP.Get(url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if _, err := admin.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "keep"})); err != nil {
		t.Fatalf("admin submit: %v", err)
	}

	_, err := anon.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{}))
	wantConnectCode(t, "no credentials", err, connect.CodeUnauthenticated)
	_, err = reader.SubmitTask(ctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "x"}))
	wantConnectCode(t, "reader submit", err, connect.CodePermissionDenied)
	_, err = reader.DeleteTask(ctx, connect.NewRequest(&xcev1.DeleteTaskRequest{TaskId: "keep"}))
	wantConnectCode(t, "reader delete", err, connect.CodePermissionDenied)
	_, err = worker.Heartbeat(ctx, connect.NewRequest(&xcev1.HeartbeatRequest{WorkerId: "w2"}))
	wantConnectCode(t, "worker w1 heartbeats as w2", err, connect.CodePermissionDenied)

	list, err := reader.ListTasks(ctx, connect.NewRequest(&xcev1.ListTasksRequest{}))
	if err != nil {
		t.Fatalf("reader list: %v", err)
	}
	if len(list.Msg.Tasks) != 1 || list.Msg.Tasks[0].TaskId != "keep" {
		t.Fatalf("state changed: %v", list.Msg.Tasks)
	}
	st, err := reader.Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Msg.Auth != "on" || st.Msg.Insecure {
		t.Errorf("status auth %q insecure %v", st.Msg.Auth, st.Msg.Insecure)
	}
	if exp, err := time.Parse(time.RFC3339, st.Msg.TlsCertExpiry); err != nil || exp.Before(time.Now()) {
		t.Errorf("tls_cert_expiry %q: %v", st.Msg.TlsCertExpiry, err)
	}

	// /metrics needs the metrics permission, and counts the refusals.
	resp, err := anonHTTP.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without credentials: %d", resp.StatusCode)
	}
	resp, err = adminHTTP.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n, err := sumMetric(string(body), "xce_auth_refused_total"); err != nil || n < 5 {
		t.Errorf("xce_auth_refused_total = %v (%v), want at least 5", n, err)
	}

	// Cleartext to the TLS port: the client reads why, the node logs it.
	plain, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + c.Addrs()[0] + "/healthz")
	if err != nil {
		t.Fatalf("cleartext: %v", err)
	}
	b, _ := io.ReadAll(plain.Body)
	plain.Body.Close()
	if plain.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
		t.Errorf("cleartext answered %d %q", plain.StatusCode, b)
	}
	testutil.Eventually(t, 5*time.Second, "the node logs the cleartext connection", func() bool {
		return strings.Contains(c.RunLog(0), "cleartext connection to the TLS client port refused")
	})
}

func wantConnectCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}
