package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/testutil"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
	"github.com/xce/xce/worker"
)

// callLog records the status code of every call a worker's HTTP client
// makes, by path.
type callLog struct {
	mu    sync.Mutex
	codes map[string][]int
}

func (l *callLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			l.mu.Lock()
			l.codes[r.URL.Path] = append(l.codes[r.URL.Path], resp.StatusCode)
			l.mu.Unlock()
		}
		return resp, err
	})
}

// count is the calls to path answered with code.
func (l *callLog) count(path string, code int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.codes[path] {
		if c == code {
			n++
		}
	}
	return n
}

// refused lists the calls answered 401 or 403.
func (l *callLog) refused() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for p, cs := range l.codes {
		for _, c := range cs {
			if c == http.StatusUnauthorized || c == http.StatusForbidden {
				out = append(out, fmt.Sprintf("%s: %d", p, c))
			}
		}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// idleHandler holds every copy until it is taken away.
type idleHandler struct{}

func (idleHandler) Run(ctx context.Context, _ worker.Copy, report func(int64)) error {
	report(0)
	<-ctx.Done()
	return nil
}

// The worker library on a secured cluster (TLS on every port, tokens,
// client certificates optional), one worker by its certificate and one by
// a worker token, each given one node's address so that it must learn the
// others from Status: both register, heartbeat and follow the members, and
// no node counts a refusal. The same identities are refused everything
// else a worker does not call.
func TestWorkerLibraryUnderAuth(t *testing.T) {
	c := newCluster(t, 3, WithSecure(), WithLogLevel("info"), WithConfig(itAssignor))
	cert, key, err := tlsconf.CreateCert(c.TLSDir(), tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "it", Kind: tlsconf.KindWorker, Name: "w1"}})
	if err != nil {
		t.Fatal(err)
	}
	const token = "w2-secret-token"
	sum := sha256.Sum256([]byte(token))
	tokens := filepath.Join(c.TLSDir(), "tokens")
	f, err := os.OpenFile(tokens, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(hex.EncodeToString(sum[:]) + " w2 worker\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))

	ca := c.Credentials().CAFile
	creds := map[string]client.Credentials{
		"w1": {CAFile: ca, CertFile: cert, KeyFile: key},
		"w2": {CAFile: ca, Token: token},
	}
	logs := map[string]*callLog{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i, id := range []string{"w1", "w2"} {
		tlsCfg, err := creds[id].TLSConfig()
		if err != nil {
			t.Fatal(err)
		}
		hc := client.NewHTTPClient(tlsCfg)
		logs[id] = &callLog{codes: map[string][]int{}}
		hc.Transport = logs[id].wrap(hc.Transport)
		w, err := worker.New(worker.Config{ID: id, Controllers: []string{c.Node(i).ClientAddr}, Capacity: 1,
			Credentials: creds[id], HTTPClient: hc}, idleHandler{})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if err := w.Run(ctx); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		})
	}
	status := "/" + xcev1connect.ControllerServiceName + "/Status"
	heartbeat := "/" + xcev1connect.WorkerServiceName + "/Heartbeat"
	testutil.Eventually(t, raceSlack(20*time.Second), "both workers heartbeat and read Status", func() bool {
		for _, l := range logs {
			if l.count(heartbeat, http.StatusOK) < 2 || l.count(status, http.StatusOK) < 1 {
				return false
			}
		}
		return true
	})
	for id, l := range logs {
		if r := l.refused(); len(r) > 0 {
			t.Errorf("%s was refused: %s", id, strings.Join(r, ", "))
		}
	}
	for i := range c.N() {
		if v, err := c.Metric(i, "xce_auth_refused_total"); err != nil || v != 0 {
			t.Errorf("%s: xce_auth_refused_total = %v (%v), want 0", c.Node(i).ID, v, err)
		}
	}

	// Nothing else: the worker identities read no task, assignment,
	// worker, member or metric, and write nothing.
	tlsCfg, err := creds["w1"].TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + c.Addrs()[0]
	hc := client.NewHTTPClient(tlsCfg)
	asW1 := xcev1connect.NewControllerServiceClient(hc, url)
	asW2 := xcev1connect.NewControllerServiceClient(&http.Client{Transport: testutil.Bearer{RT: hc.Transport, Token: token}}, url)
	cl := xcev1connect.NewClusterServiceClient(hc, url)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	for name, svc := range map[string]xcev1connect.ControllerServiceClient{"w1 (certificate)": asW1, "w2 (token)": asW2} {
		_, err := svc.ListTasks(cctx, connect.NewRequest(&xcev1.ListTasksRequest{}))
		wantConnectCode(t, name+" ListTasks", err, connect.CodePermissionDenied)
		_, err = svc.GetAssignment(cctx, connect.NewRequest(&xcev1.GetAssignmentRequest{}))
		wantConnectCode(t, name+" GetAssignment", err, connect.CodePermissionDenied)
		_, err = svc.ListWorkers(cctx, connect.NewRequest(&xcev1.ListWorkersRequest{}))
		wantConnectCode(t, name+" ListWorkers", err, connect.CodePermissionDenied)
		_, err = svc.SubmitTask(cctx, connect.NewRequest(&xcev1.SubmitTaskRequest{TaskId: "x"}))
		wantConnectCode(t, name+" SubmitTask", err, connect.CodePermissionDenied)
	}
	_, err = cl.ListMembers(cctx, connect.NewRequest(&xcev1.ListMembersRequest{}))
	wantConnectCode(t, "w1 ListMembers", err, connect.CodePermissionDenied)
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("w1 /metrics: HTTP %d, want 403", resp.StatusCode)
	}
}
