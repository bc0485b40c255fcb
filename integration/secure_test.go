package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/bench"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/tlsconf"
)

// startSecureLoad is startLoad on a secured cluster (WithSecure): the
// clients reach the nodes over TLS with the admin's token.
func startSecureLoad(t *testing.T, c *Cluster, clients int) *loadRun {
	t.Helper()
	creds := c.Credentials()
	tlsCfg, err := creds.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &loadRun{cancel: cancel, done: make(chan error, 1)}
	load := bench.Load{Endpoints: c.Addrs(), TLS: tlsCfg, Credentials: creds, Clients: clients, OpTimeout: 20 * time.Second}
	go func() {
		res, err := bench.Run(ctx, load, &l.hist)
		l.res = res
		l.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-l.done
	})
	return l
}

// A 3-node cluster with TLS on every port (client TLS with tokens, mutual
// TLS between peers) elects, serves, and survives a SIGKILL of the primary
// under a write load with the history linearizable and nothing lost.
func TestSecureClusterKillPrimaryUnderLoad(t *testing.T) {
	c := newCluster(t, 3, WithSecure(), WithLogLevel("info"))
	c.StartAll()
	p := c.WaitRoles(raceSlack(10 * time.Second))
	for i := range c.N() {
		s, err := c.Status(i)
		if err != nil {
			t.Fatal(err)
		}
		if s.Insecure || s.Auth != "on" || s.TlsCertExpiry == "" || s.PeerTlsCertExpiry == "" {
			t.Errorf("%s: insecure=%v auth=%q tls_cert_expiry=%q peer_tls_cert_expiry=%q, want a secured node",
				c.Node(i).ID, s.Insecure, s.Auth, s.TlsCertExpiry, s.PeerTlsCertExpiry)
		}
	}
	// The primary asks the other voters over their TLS client ports, with
	// its node certificate, before it batches writes.
	testutil.Eventually(t, raceSlack(10*time.Second), "the primary batches writes on a secured cluster", func() bool {
		return strings.Contains(c.RunLog(p), "every voter applies batch entries")
	})
	load := startSecureLoad(t, c, 16)
	load.waitProgress(t, 100, 30*time.Second)
	killPrimaryUnderLoad(t, c, p, load)
	for i := range c.N() {
		if v, err := c.Metric(i, peerTLSRefused); err != nil || v != 0 {
			t.Errorf("%s: %s = %v (%v), want no peer of the cluster refused", c.Node(i).ID, peerTLSRefused, v, err)
		}
	}
}

// Certificates rotated under a 16-client load: every node's certificate
// and key are renewed in place (new files renamed over the old) while the
// clients write; no call fails, and each node's status shows the new
// expiry once a new handshake has reloaded it.
func TestSecureCertRotationUnderLoad(t *testing.T) {
	c := newCluster(t, 3, WithSecure(), WithLogLevel("info"))
	c.StartAll()
	c.WaitRoles(raceSlack(10 * time.Second))
	load := startSecureLoad(t, c, 16)
	load.waitProgress(t, 100, 30*time.Second)

	// The renewed certificates live a different time than the first ones,
	// so the status tells them apart.
	renewed := t.TempDir()
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		b, err := os.ReadFile(filepath.Join(c.TLSDir(), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(renewed, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want := make([]string, c.N())
	rotated := time.Now()
	for i := range c.N() {
		n := c.Node(i)
		cert, key, err := tlsconf.CreateCert(renewed, tlsconf.CertRequest{
			ID:       tlsconf.Identity{Cluster: "it", Kind: tlsconf.KindNode, Name: n.ID},
			Hosts:    []string{"127.0.0.1", "localhost"},
			Lifetime: 30 * 24 * time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		src, err := tlsconf.NewSource(tlsconf.Files{Cert: cert, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = src.Expiry().UTC().Format(time.RFC3339)
		oldCert, oldKey := tlsconf.CertFiles(c.TLSDir(), n.ID)
		for _, mv := range [][2]string{{key, oldKey}, {cert, oldCert}} {
			if err := os.Rename(mv[0], mv[1]); err != nil {
				t.Fatal(err)
			}
		}
		load.waitProgress(t, 50, 30*time.Second)
	}

	// A fresh client for every check: only a new handshake reloads.
	for i := range c.N() {
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%s's status to show the renewed certificate's expiry %s", c.Node(i).ID, want[i]), func() bool {
			cl := c.Client()
			defer cl.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := cl.Status(ctx, c.Node(i).ClientAddr)
			return err == nil && s.TlsCertExpiry == want[i]
		})
	}
	creds := c.Credentials()
	r := runXCE(t, 10*time.Second, "status", "--addr", c.Node(0).ClientAddr, "--ca-file", creds.CAFile, "--token", creds.Token)
	if r.Code != 0 || !strings.Contains(r.Stdout, want[0]) {
		t.Errorf("xce status: exit %d, want the renewed expiry %s in\n%s%s", r.Code, want[0], r.Stdout, r.Stderr)
	}

	// The clients keep writing for a few seconds on the renewed certificates.
	acked := load.acked()
	testutil.Eventually(t, 30*time.Second, "3 s of load since the rotation began, with progress", func() bool {
		return time.Since(rotated) >= 3*time.Second && load.acked() >= acked+200
	})
	load.stopAndCheck(t, c.Client())
	t.Logf("%d calls, %d failed, %d NOT_READY retries", load.res.Ops, load.res.Errors, load.res.Retries)
	if load.res.Errors != 0 {
		t.Errorf("%d calls failed while the certificates were rotated, want none", load.res.Errors)
	}
}
