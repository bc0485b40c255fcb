package localcluster

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/tlsconf"
)

// The configs New writes load back as the values Config returns, with
// every node's identity, the layout and the caller's changes.
func TestNewWritesLoadableConfigs(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{Exe: "xce", Dir: dir, N: 3, ClusterID: "lc", BasePort: 7300, PidFiles: true,
		Configure: func(cfg *configs.Config) {
			cfg.Raft.ElectionTimeout = configs.Duration{Duration: 400 * time.Millisecond}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes {
		got, err := configs.Load(n.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		if want := c.Config(i); !reflect.DeepEqual(*got, want) {
			t.Errorf("%s: loaded %+v, want %+v", n.ID, *got, want)
		}
		if got.NodeID != n.ID || got.ClientAddr != "127.0.0.1:730"+string(rune('1'+i)) || got.PeerAddr != "127.0.0.1:740"+string(rune('1'+i)) ||
			len(got.Peers) != 3 || got.Raft.ElectionTimeout.D() != 400*time.Millisecond || got.Log.Format != "json" {
			t.Errorf("%s: %+v", n.ID, got)
		}
		if n.PidFile == "" || n.LogPath == "" || n.DataDir == "" {
			t.Errorf("%s: layout %+v", n.ID, n)
		}
	}
}

// A secured cluster's nodes get the generated files in peer_tls, tls and
// auth; the admin's credentials are the files and the token whose hash the
// tokens file holds; a second New on the same dir keeps them.
func TestSecureGeneratesCredentials(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{Exe: "xce", Dir: dir, N: 3, ClusterID: "lc", BasePort: 7500, Secure: true, Workers: []string{"w1"}})
	if err != nil {
		t.Fatal(err)
	}
	cr := c.Credentials()
	if st, err := os.Stat(c.TokenFile()); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("admin token file: %v %v, want mode 0600", st, err)
	} else if b, _ := os.ReadFile(c.TokenFile()); string(b) != cr.Token+"\n" {
		t.Errorf("admin token file holds %q, not the token", b)
	}
	w := c.WorkerCredentials("w1")
	ws, err := tlsconf.NewSource(tlsconf.Files{CA: w.CAFile, Cert: w.CertFile, Key: w.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := tlsconf.IdentityOf(ws.Leaf()); id != (tlsconf.Identity{Cluster: "lc", Kind: tlsconf.KindWorker, Name: "w1"}) {
		t.Errorf("worker certificate names %v", id)
	}
	if cr.CAFile == "" || cr.CertFile == "" || cr.KeyFile == "" || len(cr.Token) != 64 {
		t.Fatalf("credentials %+v", cr)
	}
	if st, err := os.Stat(cr.KeyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("admin key: %v %v, want mode 0600", st, err)
	}
	sum := sha256.Sum256([]byte(cr.Token))
	tokens, err := os.ReadFile(filepath.Join(c.TLSDir(), "tokens"))
	if err != nil || string(tokens) != hex.EncodeToString(sum[:])+" admin admin\n" {
		t.Errorf("tokens file %q (%v)", tokens, err)
	}
	src, err := tlsconf.NewSource(tlsconf.Files{CA: cr.CAFile, Cert: cr.CertFile, Key: cr.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := tlsconf.IdentityOf(src.Leaf()); id != (tlsconf.Identity{Cluster: "lc", Kind: tlsconf.KindClient, Name: "admin"}) {
		t.Errorf("admin certificate names %v", id)
	}
	for i, n := range c.Nodes {
		got, err := configs.Load(n.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		pt := got.PeerTLS
		if pt.CAFile != cr.CAFile || got.TLS.CertFile != pt.CertFile || got.TLS.ClientAuth != "optional" || got.Auth.TokensFile == "" {
			t.Errorf("%s: peer_tls %+v tls %+v auth %+v", n.ID, pt, got.TLS, got.Auth)
		}
		ns, err := tlsconf.NewSource(got.PeerTLSFiles())
		if err != nil {
			t.Fatal(err)
		}
		if err := tlsconf.NodeVerifier("lc", func() string { return c.Nodes[i].ID })(ns.Leaf()); err != nil {
			t.Errorf("%s: %v", n.ID, err)
		}
	}
	again, err := New(Options{Exe: "xce", Dir: dir, N: 3, ClusterID: "lc", BasePort: 7500, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	if again.Credentials() != cr {
		t.Errorf("second New: %+v, want the first's %+v", again.Credentials(), cr)
	}

	peerOnly, err := New(Options{Exe: "xce", Dir: t.TempDir(), N: 3, BasePort: 7600, PeerTLSOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := peerOnly.Config(0)
	if cfg.PeerTLS.CertFile == "" || cfg.TLS.CertFile != "" || cfg.Auth.TokensFile != "" {
		t.Errorf("peer TLS only: peer_tls %+v tls %+v auth %+v", cfg.PeerTLS, cfg.TLS, cfg.Auth)
	}
}

// With SecureKafka the broker gets a certificate from the cluster's CA for
// the loopback names, which is no principal of the cluster, and a 0600
// password; the nodes' kafka.tls and kafka.sasl name them, KafkaSecurity is
// what those keys say, and a second New keeps them.
func TestSecureKafka(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Exe: "xce", Dir: dir, N: 1, ClusterID: "lc", BasePort: 7800, Secure: true, SecureKafka: true,
		Configure: func(cfg *configs.Config) { cfg.Kafka.Brokers = []string{"127.0.0.1:9092"} }}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	b := c.KafkaBroker()
	if st, err := os.Stat(b.PasswordFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v %v, want mode 0600", st, err)
	}
	pw, err := os.ReadFile(b.PasswordFile)
	if err != nil || len(pw) != 65 {
		t.Errorf("password file holds %d bytes (%v), want 64 and a line break", len(pw), err)
	}
	src, err := tlsconf.NewSource(tlsconf.Files{CA: c.Credentials().CAFile, Cert: b.CertFile, Key: b.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	leaf := src.Leaf()
	for _, host := range loopbackHosts {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: src.Pool(), DNSName: host, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the broker certificate for %s: %v", host, err)
		}
	}
	if id, _ := tlsconf.IdentityOf(leaf); id.Cluster == "lc" {
		t.Errorf("the broker certificate names %v, a principal of the cluster", id)
	}
	got, err := configs.Load(c.Nodes[0].ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	want := kafkaopts.Security{
		TLS:  kafkaopts.TLS{Files: tlsconf.Files{CA: c.Credentials().CAFile}},
		SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA512, Username: b.User, PasswordFile: b.PasswordFile},
	}
	if sec := got.KafkaSecurity(); sec != want || c.KafkaSecurity() != want {
		t.Errorf("kafka security: config %+v, KafkaSecurity %+v, want %+v", sec, c.KafkaSecurity(), want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	again, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if pw2, _ := os.ReadFile(b.PasswordFile); again.KafkaBroker() != b || string(pw2) != string(pw) {
		t.Errorf("second New: %+v, want the first's %+v and the same password", again.KafkaBroker(), b)
	}

	plain, err := New(Options{Exe: "xce", Dir: t.TempDir(), N: 1, BasePort: 7810, Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	if plain.KafkaBroker() != (KafkaBroker{}) || plain.KafkaSecurity() != (kafkaopts.Security{}) || plain.Config(0).Kafka.SASL.Mechanism != "" {
		t.Errorf("without SecureKafka: broker %+v, security %+v", plain.KafkaBroker(), plain.KafkaSecurity())
	}
}

// Every size `xce dev --nodes` and `xce bench --local` take lays out
// distinct ports (from a base port or free ones) and configs that validate
// and name every node as a peer.
func TestLayoutOfEverySize(t *testing.T) {
	for _, n := range []int{1, 3, 5, 7} {
		for _, base := range []int{0, 7700} {
			c, err := New(Options{Exe: "xce", Dir: t.TempDir(), N: n, ClusterID: "lc", BasePort: base})
			if err != nil {
				t.Fatal(err)
			}
			if c.N() != n || len(c.ClientAddrs()) != n {
				t.Fatalf("n=%d: %d nodes", n, c.N())
			}
			seen := map[string]bool{}
			for i, nd := range c.Nodes {
				for _, a := range []string{nd.ClientAddr, nd.PeerAddr} {
					if seen[a] {
						t.Errorf("n=%d base=%d: %s used twice", n, base, a)
					}
					seen[a] = true
				}
				cfg := c.Config(i)
				if err := cfg.Validate(); err != nil {
					t.Errorf("n=%d base=%d %s: %v", n, base, nd.ID, err)
				}
				if len(cfg.Peers) != n {
					t.Errorf("n=%d %s: %d peers", n, nd.ID, len(cfg.Peers))
				}
			}
		}
	}
}
