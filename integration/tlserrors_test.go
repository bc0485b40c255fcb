package integration

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/testutil"
)

// xceOK runs the xce CLI and fails the test unless it exits 0.
func xceOK(t *testing.T, args ...string) cmdResult {
	t.Helper()
	r := runXCE(t, 30*time.Second, args...)
	if r.Code != 0 {
		t.Fatalf("xce %s: exit %d\n%s%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// cliPKI makes a CA in dir with the real `xce tls` commands, and a node
// certificate n1 signed by it; certificates for clients and workers are
// added with cert.
type cliPKI struct {
	t   *testing.T
	dir string
}

func newCLIPKI(t *testing.T) cliPKI {
	p := cliPKI{t: t, dir: filepath.Join(t.TempDir(), "pki")}
	xceOK(t, "tls", "ca", "create", "--dir", p.dir, "--cluster", "it")
	p.cert("--node", "n1")
	return p
}

func (p cliPKI) ca() string { return filepath.Join(p.dir, "ca.pem") }

// cert runs `xce tls cert create` with kind (--node, --client, --worker),
// name and more flags, and returns the certificate and key files.
func (p cliPKI) cert(kind, name string, more ...string) (cert, key string) {
	xceOK(p.t, append([]string{"tls", "cert", "create", "--dir", p.dir, "--cluster", "it", kind, name}, more...)...)
	return filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
}

// tlsNode starts one node whose client port speaks TLS with p's n1
// certificate, client certificates optional, and waits until an admin
// (or the anonymous reader, without tokens) reads its status over TLS.
func tlsNode(t *testing.T, p cliPKI, auth configs.Auth, statusArgs ...string) *Cluster {
	t.Helper()
	c := newCluster(t, 1, WithConfig(func(cfg *configs.Config) {
		cfg.TLS = configs.ClientTLS{CAFile: p.ca(), CertFile: filepath.Join(p.dir, "n1.pem"),
			KeyFile: filepath.Join(p.dir, "n1-key.pem"), ClientAuth: "optional"}
		cfg.Auth = auth
	}))
	c.Start(0)
	args := append([]string{"status", "--addr", c.Addrs()[0], "--ca-file", p.ca(), "--timeout", "1s"}, statusArgs...)
	testutil.Eventually(t, raceSlack(10*time.Second), "the node serves its status over TLS", func() bool {
		return runXCE(t, 10*time.Second, args...).Code == 0
	})
	return c
}

// Plaintext to a TLS client port, a node certificate from another CA, a
// client certificate from another CA and an expired client certificate:
// each a clear error on both sides, the CLI's message and the node's log.
// Each case has a node of its own, since a node logs a failed handshake
// once per remote host.
func TestTLSErrors(t *testing.T) {
	p := newCLIPKI(t)
	other := cliPKI{t: t, dir: filepath.Join(t.TempDir(), "other")}
	xceOK(t, "tls", "ca", "create", "--dir", other.dir, "--cluster", "it")
	strangerCert, strangerKey := other.cert("--client", "stranger")
	expCert, expKey := p.cert("--client", "old", "--lifetime", "1s")
	notAfter := certNotAfter(t, expCert)
	anonReader := configs.Auth{Anonymous: "reader"}

	cases := []struct {
		name      string
		args      func(addr string) []string
		wait      func() bool // true once the case can run
		cli       []string    // in the CLI's stderr
		nodeLog   []string    // in the node's log
		wantLines int
	}{
		{
			name:    "plaintext",
			args:    func(addr string) []string { return []string{"--addr", addr} },
			cli:     []string{"plaintext call to a TLS port", "HTTP request to an HTTPS server", "--ca-file"},
			nodeLog: []string{"cleartext connection to the TLS client port refused"},
		},
		{
			name:    "node certificate from another CA",
			args:    func(addr string) []string { return []string{"--addr", addr, "--ca-file", other.ca()} },
			cli:     []string{"bad certificate", "certificate signed by unknown authority"},
			nodeLog: []string{"tls handshake failed on the client port", "bad certificate"},
		},
		{
			name: "client certificate from another CA",
			args: func(addr string) []string {
				return []string{"--addr", addr, "--ca-file", p.ca(), "--cert-file", strangerCert, "--key-file", strangerKey}
			},
			cli:     []string{"bad certificate", "unknown certificate authority"},
			nodeLog: []string{"tls handshake failed on the client port", "certificate signed by unknown authority"},
		},
		{
			name: "expired client certificate",
			args: func(addr string) []string {
				return []string{"--addr", addr, "--ca-file", p.ca(), "--cert-file", expCert, "--key-file", expKey}
			},
			wait:    func() bool { return time.Now().After(notAfter.Add(100 * time.Millisecond)) },
			cli:     []string{"bad certificate", "expired certificate"},
			nodeLog: []string{"tls handshake failed on the client port", "certificate has expired"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tlsNode(t, p, anonReader)
			if tc.wait != nil {
				testutil.Eventually(t, 10*time.Second, "the certificate has expired", tc.wait)
			}
			args := append([]string{"status"}, tc.args(c.Addrs()[0])...)
			r := runXCE(t, 20*time.Second, args...)
			if r.Code == 0 {
				t.Fatalf("xce %s: exit 0, want a refusal\n%s", strings.Join(args, " "), r.Stdout)
			}
			for _, s := range tc.cli {
				if !strings.Contains(r.Stderr, s) {
					t.Errorf("the CLI's message lacks %q:\n%s", s, r.Stderr)
				}
			}
			if n := len(nonEmptyLines(r.Stderr)); n != 1 {
				t.Errorf("the CLI printed %d lines, want one:\n%s", n, r.Stderr)
			}
			testutil.Eventually(t, 5*time.Second, "the node logs the refusal", func() bool {
				for _, line := range strings.Split(c.RunLog(0), "\n") {
					if containsAll(line, tc.nodeLog) {
						return true
					}
				}
				return false
			})
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func certNotAfter(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.NotAfter
}

// Permissions through the CLI: a reader cannot submit or delete (exit 6,
// PermissionDenied naming the permission), a worker cannot heartbeat as
// another worker, no credentials exits 5 (Unauthenticated); the state is
// the same after each refusal.
func TestCLIPermissions(t *testing.T) {
	p := newCLIPKI(t)
	w1Cert, w1Key := p.cert("--worker", "w1")
	hash := func(tok string) string { h := sha256.Sum256([]byte(tok)); return hex.EncodeToString(h[:]) }
	tokens := filepath.Join(p.dir, "tokens")
	if err := os.WriteFile(tokens, []byte(hash("admin-tok")+" root admin\n"+hash("reader-tok")+" viewer reader\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := tlsNode(t, p, configs.Auth{TokensFile: tokens, Anonymous: "none"}, "--token", "admin-tok")
	addr := c.Addrs()[0]
	as := func(token string, args ...string) []string {
		args = append(args, "--addr", addr, "--ca-file", p.ca())
		if token != "" {
			args = append(args, "--token", token)
		}
		return args
	}
	xceOK(t, as("admin-tok", "submit", "keep")...)
	tasks := func() string { return xceOK(t, as("reader-tok", "tasks", "--json")...).Stdout }
	before := tasks()
	if !strings.Contains(before, `"keep"`) {
		t.Fatalf("tasks: %s", before)
	}

	refused := []struct {
		what string
		args []string
		code int
		want []string
	}{
		{"reader submits", as("reader-tok", "submit", "x"), 6, []string{"PermissionDenied", `lacks permission "write"`}},
		{"reader deletes", as("reader-tok", "task", "delete", "keep"), 6, []string{"PermissionDenied", `lacks permission "delete"`}},
		{"no credentials", as("", "tasks"), 5, []string{"Unauthenticated", "no credentials"}},
		{"worker w1 as w2", []string{"worker", "--id", "w2", "--controllers", addr, "--ca-file", p.ca(),
			"--cert-file", w1Cert, "--key-file", w1Key, "--log-format", "json"}, 6, []string{"PermissionDenied", `as worker "w2"`}},
	}
	for _, r := range refused {
		res := runXCE(t, 30*time.Second, r.args...)
		if res.Code != r.code {
			t.Errorf("%s: exit %d, want %d\n%s", r.what, res.Code, r.code, res.Stderr)
		}
		for _, s := range r.want {
			if !strings.Contains(res.Stderr, s) {
				t.Errorf("%s: stderr lacks %q:\n%s", r.what, s, res.Stderr)
			}
		}
		if after := tasks(); after != before {
			t.Errorf("%s changed the tasks:\nbefore %s\nafter %s", r.what, before, after)
		}
	}
	if ws := xceOK(t, as("admin-tok", "workers", "--json")...).Stdout; strings.Contains(ws, "w2") {
		t.Errorf("worker w2 appeared: %s", ws)
	}
}

// nonLoopbackIPv4 is an IPv4 address of this machine that is not loopback,
// or "" when it has none.
func nonLoopbackIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// A node whose client and peer addresses are reachable beyond this machine
// refuses to start without TLS, in one line saying why; with insecure: true
// it starts, warns loudly and says so in `xce status`.
func TestInsecure(t *testing.T) {
	ip := nonLoopbackIPv4()
	if ip == "" {
		t.Skip("this machine has no non-loopback IPv4 address to bind")
	}
	ports := freePorts(t, 2)
	clientAddr, peerAddr := fmt.Sprintf("%s:%d", ip, ports[0]), fmt.Sprintf("%s:%d", ip, ports[1])
	exposed := func(insecure bool) Option {
		return WithConfig(func(cfg *configs.Config) {
			cfg.ClientAddr, cfg.PeerAddr, cfg.Insecure = clientAddr, peerAddr, insecure
			cfg.Peers = []configs.Peer{{ID: cfg.NodeID, PeerAddr: peerAddr, ClientAddr: clientAddr}}
		})
	}

	c := newCluster(t, 1, exposed(false))
	c.Start(0)
	if code := c.Wait(0); code == 0 {
		t.Fatal("the node started on a non-loopback address without TLS")
	}
	lines := nonEmptyLines(c.RunLog(0))
	if len(lines) != 1 {
		t.Fatalf("want one line saying why, got %d:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, s := range []string{clientAddr + " is reachable beyond this machine", "no TLS", "insecure: true"} {
		if !strings.Contains(lines[0], s) {
			t.Errorf("the refusal lacks %q: %s", s, lines[0])
		}
	}

	c = newCluster(t, 1, exposed(true))
	c.Start(0)
	var out string
	testutil.Eventually(t, raceSlack(10*time.Second), "the insecure node answers its status", func() bool {
		r := runXCE(t, 10*time.Second, "status", "--json", "--addr", clientAddr, "--timeout", "1s")
		out = r.Stdout
		return r.Code == 0
	})
	if !strings.Contains(out, `"insecure": true`) {
		t.Errorf("status does not say insecure: %s", out)
	}
	if !strings.Contains(c.RunLog(0), "INSECURE: insecure: true and a port reachable beyond this machine") {
		t.Error("no loud warning in the log")
	}
}
