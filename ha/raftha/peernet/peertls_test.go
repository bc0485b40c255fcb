package peernet

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/tlsconf"
)

// syncBuf is a log sink safe for the server's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// pki is a CA in a temp dir that signs certificates on demand.
type pki struct {
	t   *testing.T
	dir string
}

func newPKI(t *testing.T, cluster string) *pki {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, cluster); err != nil {
		t.Fatal(err)
	}
	return &pki{t: t, dir: dir}
}

// files signs a certificate for id (once per name) and names it with the
// CA.
func (p *pki) files(id tlsconf.Identity, life time.Duration) tlsconf.Files {
	p.t.Helper()
	cert, key := tlsconf.CertFiles(p.dir, id.Name)
	if _, _, err := tlsconf.CreateCert(p.dir, tlsconf.CertRequest{ID: id, Hosts: []string{"127.0.0.1"}, Lifetime: life}); err != nil {
		p.t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(p.dir)
	return tlsconf.Files{CA: ca, Cert: cert, Key: key}
}

func node(cluster, name string) tlsconf.Identity {
	return tlsconf.Identity{Cluster: cluster, Kind: tlsconf.KindNode, Name: name}
}

// echoServer is a TLS stream layer that echoes what each connection sends.
type echoServer struct {
	s       *StreamLayer
	log     *syncBuf
	metrics *PeerTLSMetrics
	wg      sync.WaitGroup
}

func startEcho(t *testing.T, files tlsconf.Files, peers map[string]string, ln net.Listener) *echoServer {
	t.Helper()
	return startEchoTLS(t, PeerTLS{Files: files, Cluster: "c1", Peers: peers}, ln)
}

// startEchoTLS is startEcho with p's TLS (its metrics and logger set here).
func startEchoTLS(t *testing.T, p PeerTLS, ln net.Listener) *echoServer {
	t.Helper()
	e := &echoServer{log: &syncBuf{}, metrics: NewPeerTLSMetrics(prometheus.NewRegistry())}
	p.Metrics, p.Logger = e.metrics, zerolog.New(e.log)
	s, err := NewStreamLayer(ln, ln.Addr().String(), "", WithPeerTLS(p))
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	e.wg.Go(func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			e.wg.Go(func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		s.Close()
		e.wg.Wait()
	})
	return e
}

func (e *echoServer) refused(reason string) float64 { return count(e.metrics, reason) }

// count is m's refusals for reason.
func count(m *PeerTLSMetrics, reason string) float64 {
	var d dto.Metric
	if err := m.refused.WithLabelValues(reason).Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue()
}

// dialer is node id's stream layer, for dialling only.
func dialer(t *testing.T, files tlsconf.Files, peers map[string]string) (*StreamLayer, *PeerTLSMetrics) {
	t.Helper()
	return dialerTLS(t, PeerTLS{Files: files, Cluster: "c1", Peers: peers})
}

// dialerTLS is dialer with p's TLS (its metrics set here).
func dialerTLS(t *testing.T, p PeerTLS) (*StreamLayer, *PeerTLSMetrics) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	m := NewPeerTLSMetrics(nil)
	p.Metrics, p.Logger = m, zerolog.Nop()
	s, err := NewStreamLayer(ln, ln.Addr().String(), "", WithPeerTLS(p))
	if err != nil {
		t.Fatal(err)
	}
	return s, m
}

// roundTrip sends a line over a new connection and reads it back.
func roundTrip(s *StreamLayer, addr string) error {
	c, err := s.Dial(raft.ServerAddress(addr), 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != "ping" {
		return errors.New("echo: " + string(b))
	}
	return nil
}

// Peers with certificates of the cluster's CA naming their nodes talk;
// every other certificate is refused at the handshake, counted by reason
// and logged once per peer and reason.
func TestPeerTLSRefusals(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	peers := map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2"}
	srv := startEcho(t, ca.files(node("c1", "n1"), 0), peers, ln)

	n2, _ := dialer(t, ca.files(node("c1", "n2"), 0), peers)
	if err := roundTrip(n2, srvAddr); err != nil {
		t.Fatalf("n2 to n1: %v", err)
	}

	other := newPKI(t, "c1")
	caFile, _ := tlsconf.CAFiles(ca.dir)
	withCA := func(f tlsconf.Files) tlsconf.Files { f.CA = caFile; return f }
	for _, c := range []struct {
		name   string
		files  tlsconf.Files
		reason string
	}{
		{"another CA", withCA(other.files(node("c1", "n2"), 0)), PeerRefusedBadCertificate},
		{"a node not among peers", ca.files(node("c1", "n9"), 0), PeerRefusedWrongNode},
		{"another cluster", ca.files(node("c2", "n3"), 0), PeerRefusedOtherCluster},
		{"a client", ca.files(tlsconf.Identity{Cluster: "c1", Kind: tlsconf.KindClient, Name: "admin"}, 0), PeerRefusedNotANode},
		{"expired", ca.files(node("c1", "old"), time.Nanosecond), PeerRefusedExpired},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, _ := dialer(t, c.files, peers)
			for range 3 {
				if err := roundTrip(d, srvAddr); err == nil {
					t.Fatal("talked to n1")
				}
			}
			testutil.Eventually(t, 5*time.Second, "3 refusals counted as "+c.reason, func() bool { return srv.refused(c.reason) == 3 })
			if n := strings.Count(srv.log.String(), `"reason":"`+c.reason+`"`); n != 1 {
				t.Errorf("%d log lines for reason %s, want 1:\n%s", n, c.reason, srv.log)
			}
		})
	}

	// Plaintext: the raft bytes of a peer with no peer_tls.
	for range 2 {
		c, err := net.Dial("tcp", srvAddr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("\x00\x81\xa4Term\x05 plaintext raft rpc"))
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Errorf("plaintext: %v, want the connection closed", err)
		}
		c.Close()
	}
	testutil.Eventually(t, 5*time.Second, "plaintext refusals counted", func() bool { return srv.refused(PeerRefusedPlaintext) == 2 })
	if !strings.Contains(srv.log.String(), "spoke plaintext to this TLS peer port") {
		t.Errorf("no plaintext line in the log:\n%s", srv.log)
	}
	if got := srv.refused(PeerRefusedHandshake); got != 0 {
		t.Errorf("%v refusals counted as handshake, want each under its reason", got)
	}
	if err := roundTrip(n2, srvAddr); err != nil {
		t.Fatalf("n2 to n1 after the refusals: %v", err)
	}
}

// The dialling side checks that the certificate names the node of the
// address it dialled.
func TestPeerTLSDialChecksTheNode(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	// The server holds n3's certificate but listens at n1's address.
	startEcho(t, ca.files(node("c1", "n3"), 0), map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2", "127.0.0.1:2": "n3"}, ln)
	d, m := dialer(t, ca.files(node("c1", "n2"), 0), map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2", "127.0.0.1:2": "n3"})
	err = roundTrip(d, srvAddr)
	if err == nil || !strings.Contains(err.Error(), `want node "n1"`) {
		t.Fatalf("dial: %v, want the wrong node refused", err)
	}
	if got := count(m, PeerRefusedWrongNode); got != 1 {
		t.Errorf("dial side counted %v wrong_node, want 1", got)
	}
}

// A silent connection does not hold up the accept loop, and a closed port
// fails the dial with the connect's own error.
func TestPeerTLSAcceptDoesNotBlock(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	peers := map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2"}
	startEcho(t, ca.files(node("c1", "n1"), 0), peers, ln)
	silent, err := net.Dial("tcp", srvAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	d, _ := dialer(t, ca.files(node("c1", "n2"), 0), peers)
	if err := roundTrip(d, srvAddr); err != nil {
		t.Fatalf("dial past a silent connection: %v", err)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close()
	if _, err := d.Dial(raft.ServerAddress(addr), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a closed port: %v, want ECONNREFUSED", err)
	}
}

// copyFiles copies f into dir, as a node's own copy of its files.
func copyFiles(t *testing.T, f tlsconf.Files, dir string) tlsconf.Files {
	t.Helper()
	out := tlsconf.Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "node.pem"), Key: filepath.Join(dir, "node-key.pem")}
	for _, p := range [][2]string{{f.CA, out.CA}, {f.Cert, out.Cert}, {f.Key, out.Key}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Renewed files (here: a new CA and a certificate it signed) are used by
// the next handshakes without restarting the stream layer.
func TestPeerTLSPicksUpRenewedFiles(t *testing.T) {
	oldCA := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	peers := map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2"}
	own := t.TempDir()
	srv := startEcho(t, copyFiles(t, oldCA.files(node("c1", "n1"), 0), own), peers, ln)
	oldN2, oldM := dialer(t, oldCA.files(node("c1", "n2"), 0), peers)
	if err := roundTrip(oldN2, srvAddr); err != nil {
		t.Fatal(err)
	}

	newCA := newPKI(t, "c1")
	copyFiles(t, newCA.files(node("c1", "n1"), 0), own)
	newN2, _ := dialer(t, newCA.files(node("c1", "n2"), 0), peers)
	testutil.Eventually(t, 10*time.Second, "the renewed CA and certificate in use", func() bool {
		return roundTrip(newN2, srvAddr) == nil
	})
	// The node of the old CA no longer trusts n1's certificate, and n1
	// sees its handshake aborted.
	if err := roundTrip(oldN2, srvAddr); err == nil {
		t.Fatal("a node of the replaced CA still talks")
	}
	if got := count(oldM, PeerRefusedBadCertificate); got != 1 {
		t.Errorf("the old node counted %v bad_certificate, want 1", got)
	}
	testutil.Eventually(t, 5*time.Second, "n1 counts the aborted handshake", func() bool { return srv.refused(PeerRefusedByPeer) >= 1 })
}

// Dialling a plaintext peer port fails the handshake with a hint.
func TestPeerTLSDialPlaintextPort(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// A plaintext raft transport reads a byte it does not know
			// and hangs up.
			_, _ = c.Read(make([]byte, 1))
			c.Close()
		}
	})
	d, _ := dialer(t, ca.files(node("c1", "n2"), 0), map[string]string{ln.Addr().String(): "n1"})
	_, err = d.Dial(raft.ServerAddress(ln.Addr().String()), 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "is peer_tls set on that node?") {
		t.Fatalf("dial a plaintext port: %v, want the hint", err)
	}
}

// config is a configuration that changes while handshakes read it.
type config struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *config) set(m map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = m
}

func (c *config) members() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m
}

// A node added to the configuration at run time is accepted from then on
// and refused before; a removed one is refused once it is gone.
func TestPeerTLSAcceptFollowsTheConfiguration(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	// The config's peers name n1 to n3; the configuration is what counts.
	peers := map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2", "127.0.0.1:2": "n3"}
	cfg := &config{m: map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2"}}
	srv := startEchoTLS(t, PeerTLS{Files: ca.files(node("c1", "n1"), 0), Cluster: "c1", Peers: peers, Members: cfg.members}, ln)
	n2, _ := dialer(t, ca.files(node("c1", "n2"), 0), peers)
	n3, _ := dialer(t, ca.files(node("c1", "n3"), 0), peers)
	n4, _ := dialer(t, ca.files(node("c1", "n4"), 0), peers)

	if err := roundTrip(n2, srvAddr); err != nil {
		t.Fatalf("n2, a member: %v", err)
	}
	for _, d := range []*StreamLayer{n3, n4} {
		if err := roundTrip(d, srvAddr); err == nil {
			t.Fatal("a node in peers but not in the configuration talked")
		}
	}
	testutil.Eventually(t, 5*time.Second, "2 refusals", func() bool { return srv.refused(PeerRefusedWrongNode) == 2 })

	cfg.set(map[string]string{srvAddr: "n1", "127.0.0.1:1": "n2", "127.0.0.1:4": "n4"})
	if err := roundTrip(n4, srvAddr); err != nil {
		t.Fatalf("n4, added at run time: %v", err)
	}
	cfg.set(map[string]string{srvAddr: "n1", "127.0.0.1:4": "n4"})
	if err := roundTrip(n2, srvAddr); err == nil {
		t.Fatal("n2, removed, still talks")
	}
	testutil.Eventually(t, 5*time.Second, "the removed node refused", func() bool { return srv.refused(PeerRefusedWrongNode) == 3 })
	if err := roundTrip(n4, srvAddr); err != nil {
		t.Fatalf("n4 after n2's removal: %v", err)
	}

	// Members not known yet: the config's peers stand in.
	cfg.set(nil)
	if err := roundTrip(n3, srvAddr); err != nil {
		t.Fatalf("n3 of peers, no configuration known: %v", err)
	}
}

// A node that no configuration holds yet (one joining) accepts any node of
// its cluster, its new leader, and nothing else; once the configuration
// holds it, only members.
func TestPeerTLSJoiningNodeAcceptsItsLeader(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	cfg := &config{m: map[string]string{}}
	srv := startEchoTLS(t, PeerTLS{Files: ca.files(node("c1", "n4"), 0), Cluster: "c1",
		Peers: map[string]string{"127.0.0.1:1": "n1"}, Members: cfg.members}, ln)
	n1, _ := dialer(t, ca.files(node("c1", "n1"), 0), map[string]string{srvAddr: "n4"})
	if err := roundTrip(n1, srvAddr); err != nil {
		t.Fatalf("the leader to a joining node: %v", err)
	}
	other, _ := dialer(t, ca.files(node("c2", "m1"), 0), map[string]string{srvAddr: "n4"})
	if err := roundTrip(other, srvAddr); err == nil {
		t.Fatal("a node of another cluster talked to a joining node")
	}
	testutil.Eventually(t, 5*time.Second, "other cluster refused", func() bool { return srv.refused(PeerRefusedOtherCluster) == 1 })

	cfg.set(map[string]string{"127.0.0.1:2": "n2", srvAddr: "n4"})
	if err := roundTrip(n1, srvAddr); err == nil {
		t.Fatal("n1, not in the configuration that holds this node, talked")
	}
	testutil.Eventually(t, 5*time.Second, "n1 refused", func() bool { return srv.refused(PeerRefusedWrongNode) == 1 })
}

// Dialling an address the configuration gained at run time checks the
// certificate names the node the configuration gives that address; an
// address no configuration holds must be a member's.
func TestPeerTLSDialFollowsTheConfiguration(t *testing.T) {
	ca := newPKI(t, "c1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srvAddr := ln.Addr().String()
	startEcho(t, ca.files(node("c1", "n4"), 0), map[string]string{"127.0.0.1:1": "n1", srvAddr: "n4"}, ln)
	cfg := &config{m: map[string]string{"127.0.0.1:1": "n1", "127.0.0.1:2": "n2"}}
	d, m := dialerTLS(t, PeerTLS{Files: ca.files(node("c1", "n1"), 0), Cluster: "c1",
		Peers: map[string]string{"127.0.0.1:1": "n1"}, Members: cfg.members})
	if err := roundTrip(d, srvAddr); err == nil || !strings.Contains(err.Error(), "not a member") {
		t.Fatalf("dial n4 before it is a member: %v, want refused", err)
	}
	cfg.set(map[string]string{"127.0.0.1:1": "n1", srvAddr: "n4"})
	if err := roundTrip(d, srvAddr); err != nil {
		t.Fatalf("dial n4, added at run time: %v", err)
	}
	cfg.set(map[string]string{"127.0.0.1:1": "n1", srvAddr: "n5"})
	if err := roundTrip(d, srvAddr); err == nil || !strings.Contains(err.Error(), `want node "n5"`) {
		t.Fatalf("dial the address of n5 answered by n4: %v, want refused", err)
	}
	if got := count(m, PeerRefusedWrongNode); got != 2 {
		t.Errorf("dial side counted %v wrong_node, want 2", got)
	}
}
