package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/xce/xce/netio"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/tlsconf"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := pem.Decode(b)
	if p == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(p.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// xce tls writes the files the contract names, with the identities and
// hosts asked for, and refuses what it cannot do clearly.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	if _, code := runCmd(t, tlsCmd(), "ca", "create", "--dir", dir, "--cluster", "c1"); code != exitOK {
		t.Fatalf("ca create: exit %d", code)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if _, code := runCmd(t, tlsCmd(), "ca", "create", "--dir", dir); code != exitOther {
		t.Fatalf("ca create over an existing CA: exit %d, want %d", code, exitOther)
	}
	for _, tc := range []struct {
		flag, name, kind string
	}{{"--node", "n1", tlsconf.KindNode}, {"--client", "alice", tlsconf.KindClient}, {"--worker", "w1", tlsconf.KindWorker}} {
		if _, code := runCmd(t, tlsCmd(), "cert", "create", "--dir", dir, "--cluster", "c1", tc.flag, tc.name, "--host", "n1.example"); code != exitOK {
			t.Fatalf("cert create %s: exit %d", tc.flag, code)
		}
		st, err := os.Stat(filepath.Join(dir, tc.name+"-key.pem"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s key: %v, mode %v; want 0600", tc.name, err, st.Mode())
		}
		c := readCert(t, filepath.Join(dir, tc.name+".pem"))
		id, ok := tlsconf.IdentityOf(c)
		if !ok || id != (tlsconf.Identity{Cluster: "c1", Kind: tc.kind, Name: tc.name}) {
			t.Fatalf("%s names %v, %v", tc.name, id, ok)
		}
		if tc.kind == tlsconf.KindNode {
			if !slices.Contains(c.DNSNames, "localhost") || !slices.Contains(c.DNSNames, "n1.example") ||
				len(c.IPAddresses) != 1 || c.IPAddresses[0].String() != "127.0.0.1" {
				t.Fatalf("node certificate names %v %v", c.DNSNames, c.IPAddresses)
			}
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"exists", []string{"--dir", dir, "--cluster", "c1", "--node", "n1"}, exitOther},
		{"no CA", []string{"--dir", t.TempDir(), "--cluster", "c1", "--node", "n1"}, exitOther},
		{"two kinds", []string{"--dir", dir, "--cluster", "c1", "--node", "n2", "--client", "bob"}, exitUsage},
		{"no kind", []string{"--dir", dir, "--cluster", "c1"}, exitUsage},
		{"no cluster", []string{"--dir", dir, "--node", "n2"}, exitUsage},
		{"no dir", []string{"--cluster", "c1", "--node", "n2"}, exitUsage},
		{"bad name", []string{"--dir", dir, "--cluster", "c1", "--node", "../n2"}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, code := runCmd(t, tlsCmd(), append([]string{"cert", "create"}, tc.args...)...); code != tc.want {
				t.Errorf("exit %d, want %d", code, tc.want)
			}
		})
	}
	err := func() error {
		cmd := tlsCmd()
		cmd.SetArgs([]string{"cert", "create", "--dir", t.TempDir(), "--cluster", "c1", "--node", "n1"})
		cmd.SilenceErrors, cmd.SilenceUsage = true, true
		return cmd.Execute()
	}()
	if err == nil || !strings.Contains(err.Error(), "xce tls ca create") {
		t.Fatalf("without a CA: %v, want a hint to create one", err)
	}
}

// The flags win over the environment, which fills in what they leave out.
func TestCredentialsFromEnvironment(t *testing.T) {
	t.Setenv("XCE_CA_FILE", "env-ca.pem")
	t.Setenv("XCE_CERT_FILE", "env-cert.pem")
	t.Setenv("XCE_KEY_FILE", "env-key.pem")
	t.Setenv("XCE_TOKEN", "env-token")
	f := credFlags{caFile: "flag-ca.pem", token: "flag-token"}
	c := f.credentials()
	if c.CAFile != "flag-ca.pem" || c.Token != "flag-token" || c.CertFile != "env-cert.pem" || c.KeyFile != "env-key.pem" {
		t.Fatalf("credentials %+v", c)
	}
	if s := c.String(); strings.Contains(s, "flag-token") {
		t.Fatalf("credentials print their token: %s", s)
	}
}

// startSecureAPI serves fakeAPI over TLS (a node certificate of a new CA)
// behind a token check: "admin" may do anything, "reader" nothing but
// ListWorkers. It returns the address and the CA file.
func startSecureAPI(t *testing.T) (addr, caFile string) {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, "c1"); err != nil {
		t.Fatal(err)
	}
	cert, key, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{ID: tlsconf.Identity{Cluster: "c1", Kind: tlsconf.KindNode, Name: "n1"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ = tlsconf.CAFiles(dir)
	src, err := tlsconf.NewSource(tlsconf.Files{CA: caFile, Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{}
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(f))
	mux.Handle(xcev1connect.NewWorkerServiceHandler(f))
	ew := connect.NewErrorWriter()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "); {
		case tok == "admin":
		case tok == "reader-token" && strings.HasSuffix(r.URL.Path, "/ListWorkers"):
		case tok == "reader-token":
			_ = ew.Write(w, r, connect.NewError(connect.CodePermissionDenied, errors.New("reader: missing permission read_assignment")))
			return
		default:
			_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New("no credentials")))
			return
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ln, err := netio.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tls.NewListener(ln, src.ServerConfig(tlsconf.ClientAuthNone, nil))) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String(), caFile
}

// A refused call exits 5 (Unauthenticated) or 6 (PermissionDenied) and
// says which, with the reason; the token is in no message.
func TestRefusedCalls(t *testing.T) {
	addr, ca := startSecureAPI(t)
	t.Setenv("XCE_CA_FILE", ca)
	for _, tc := range []struct {
		name, token string
		cmd         func() *cobra.Command
		want        int
		says        string
	}{
		{"workers as admin", "admin", workersCmd, exitOK, ""},
		{"workers without token", "", workersCmd, exitUnauthenticated, "Unauthenticated: no credentials"},
		{"workers with a wrong token", "s3cret-wrong", workersCmd, exitUnauthenticated, "Unauthenticated: no credentials"},
		{"workers as reader", "reader-token", workersCmd, exitOK, ""},
		{"assignment as reader", "reader-token", assignmentCmd, exitPermissionDenied, "PermissionDenied: reader: missing permission read_assignment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd()
			args := []string{"--addr", addr, "--timeout", "5s"}
			if tc.token != "" {
				args = append(args, "--token", tc.token)
			}
			cmd.SetArgs(args)
			cmd.SetOut(new(strings.Builder))
			cmd.SilenceErrors, cmd.SilenceUsage = true, true
			err := cmd.Execute()
			if code := exitCodeQuiet(err); code != tc.want {
				t.Fatalf("exit %d (%v), want %d", code, err, tc.want)
			}
			if err != nil && (!strings.Contains(err.Error(), tc.says) || tc.token != "" && strings.Contains(err.Error(), tc.token)) {
				t.Fatalf("error %q, want it to say %q and not the token", err, tc.says)
			}
		})
	}
	// The token from the environment.
	t.Setenv("XCE_TOKEN", "admin")
	if _, code := runCmd(t, assignmentCmd(), "--addr", addr); code != exitOK {
		t.Fatalf("XCE_TOKEN: exit %d", code)
	}
}
