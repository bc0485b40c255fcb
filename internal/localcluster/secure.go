package localcluster

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/xce/xce/client"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/tlsconf"
)

// Credentials are what a client of a secured local cluster needs: the CA
// that signs every node's certificate, the admin's client certificate and
// key, and the admin's bearer token (its hash alone is in the tokens file).
type Credentials = client.Credentials

// adminName is the admin's client certificate and token principal.
const adminName = "admin"

// TLSDir is where a secured cluster's CA, certificates and token live.
func (c *Cluster) TLSDir() string { return filepath.Join(c.opts.Dir, "tls") }

// Credentials are the admin's credentials; zero unless Options.Secure or
// Options.PeerTLSOnly is set.
func (c *Cluster) Credentials() Credentials { return c.creds }

// TokenFile holds the admin's bearer token (0600), for examples that read
// it from there rather than print it.
func (c *Cluster) TokenFile() string { return filepath.Join(c.TLSDir(), adminName+".token") }

// WorkerCredentials are the credentials of worker id (one of
// Options.Workers): the CA and the worker's certificate and key.
func (c *Cluster) WorkerCredentials(id string) Credentials {
	dir := c.TLSDir()
	ca, _ := tlsconf.CAFiles(dir)
	cert, key := tlsconf.CertFiles(dir, id)
	return Credentials{CAFile: ca, CertFile: cert, KeyFile: key}
}

// KafkaBroker is what a local Kafka broker (xce kafka-dev) serves for a
// cluster with Options.SecureKafka: TLS with CertFile and KeyFile, signed
// by the cluster's CA, and SASL as User with the password in PasswordFile
// (0600).
type KafkaBroker struct {
	CertFile, KeyFile  string
	User, PasswordFile string
}

// The secured broker's certificate files are named kafkaBrokerName; every
// client authenticates as kafkaUser with kafkaMechanism (the broker
// enables them all).
const (
	kafkaBrokerName = "kafka-broker"
	kafkaUser       = "xce"
	kafkaMechanism  = kafkaopts.ScramSHA512
)

// KafkaBroker is the broker's side of Options.SecureKafka; zero without it.
func (c *Cluster) KafkaBroker() KafkaBroker {
	if !c.opts.kafkaSecured() {
		return KafkaBroker{}
	}
	cert, key := tlsconf.CertFiles(c.TLSDir(), kafkaBrokerName)
	return KafkaBroker{CertFile: cert, KeyFile: key, User: kafkaUser, PasswordFile: c.kafkaPasswordFile()}
}

// KafkaSecurity is how a client reaches the broker of Options.SecureKafka:
// the nodes' kafka.tls and kafka.sasl, as every Kafka client takes them.
// Zero (plaintext) without it.
func (c *Cluster) KafkaSecurity() kafkaopts.Security {
	var cfg configs.Config
	c.secureKafkaConfig(&cfg)
	return cfg.KafkaSecurity()
}

func (c *Cluster) kafkaPasswordFile() string { return filepath.Join(c.TLSDir(), "kafka-password") }

func (o Options) secured() bool { return o.Secure || o.PeerTLSOnly }

func (o Options) kafkaSecured() bool { return o.Secure && o.SecureKafka }

// clusterID is the cluster id the nodes' configs carry.
func (o Options) clusterID() string {
	if o.ClusterID != "" {
		return o.ClusterID
	}
	return configs.Default().ClusterID
}

// secure creates, once, under the cluster's TLS dir, a CA, a certificate
// per node (naming the node, for 127.0.0.1 and localhost), per worker of
// Options.Workers, the admin's client certificate, the admin token and the
// tokens file, and with Options.SecureKafka the broker's certificate and
// the Kafka password. A second New on the same dir reuses them, so a
// restarted cluster keeps its credentials.
func (c *Cluster) secure() error {
	dir := c.TLSDir()
	cluster := c.opts.clusterID()
	if caCert, _ := tlsconf.CAFiles(dir); !exists(caCert) {
		if err := tlsconf.CreateCA(dir, cluster); err != nil {
			return err
		}
	}
	ids := []tlsconf.Identity{{Cluster: cluster, Kind: tlsconf.KindClient, Name: adminName}}
	for _, n := range c.Nodes {
		ids = append(ids, tlsconf.Identity{Cluster: cluster, Kind: tlsconf.KindNode, Name: n.ID})
	}
	for _, w := range c.opts.Workers {
		ids = append(ids, tlsconf.Identity{Cluster: cluster, Kind: tlsconf.KindWorker, Name: w})
	}
	for _, id := range ids {
		if cert, _ := tlsconf.CertFiles(dir, id.Name); exists(cert) {
			continue
		}
		req := tlsconf.CertRequest{ID: id}
		if id.Kind == tlsconf.KindNode {
			req.Hosts = loopbackHosts
		}
		if _, _, err := tlsconf.CreateCert(dir, req); err != nil {
			return err
		}
	}
	if c.opts.kafkaSecured() {
		if err := c.secureKafka(); err != nil {
			return err
		}
	}
	token, err := readOrCreateSecret(c.TokenFile())
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	sum := sha256.Sum256([]byte(token))
	line := hex.EncodeToString(sum[:]) + " " + adminName + " admin\n"
	if err := os.WriteFile(c.tokensFile(), []byte(line), 0o600); err != nil {
		return err
	}
	ca, _ := tlsconf.CAFiles(dir)
	cert, key := tlsconf.CertFiles(dir, adminName)
	c.creds = Credentials{CAFile: ca, CertFile: cert, KeyFile: key, Token: token}
	return nil
}

// loopbackHosts are the names a local server's certificate carries.
var loopbackHosts = []string{"127.0.0.1", "localhost"}

// secureKafka creates, once, the broker's certificate and the SASL
// password (Options.SecureKafka).
func (c *Cluster) secureKafka() error {
	dir := c.TLSDir()
	if cert, _ := tlsconf.CertFiles(dir, kafkaBrokerName); !exists(cert) {
		// The certificate names a cluster of its own, so that its key is
		// no principal of this one (a node certificate would be).
		id := tlsconf.Identity{Cluster: kafkaBrokerName, Kind: tlsconf.KindNode, Name: kafkaBrokerName}
		if _, _, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{ID: id, Hosts: loopbackHosts}); err != nil {
			return err
		}
	}
	if _, err := readOrCreateSecret(c.kafkaPasswordFile()); err != nil {
		return fmt.Errorf("kafka password: %w", err)
	}
	return nil
}

// secureKafkaConfig sets kafka.tls and kafka.sasl to the secured broker's
// (Options.SecureKafka).
func (c *Cluster) secureKafkaConfig(cfg *configs.Config) {
	if !c.opts.kafkaSecured() {
		return
	}
	ca, _ := tlsconf.CAFiles(c.TLSDir())
	cfg.Kafka.TLS.CAFile = ca
	cfg.Kafka.SASL = configs.KafkaSASL{Mechanism: kafkaMechanism, Username: kafkaUser, PasswordFile: c.kafkaPasswordFile()}
}

func (c *Cluster) tokensFile() string { return filepath.Join(c.TLSDir(), "tokens") }

// secureConfig sets node n's peer_tls, and its tls and auth unless
// PeerTLSOnly.
func (c *Cluster) secureConfig(n *Node, cfg *configs.Config) {
	if !c.opts.secured() {
		return
	}
	dir := c.TLSDir()
	ca, _ := tlsconf.CAFiles(dir)
	cert, key := tlsconf.CertFiles(dir, n.ID)
	cfg.PeerTLS = configs.PeerTLS{CAFile: ca, CertFile: cert, KeyFile: key}
	if !c.opts.PeerTLSOnly {
		cfg.TLS = configs.ClientTLS{CAFile: ca, CertFile: cert, KeyFile: key, ClientAuth: string(tlsconf.ClientAuthOptional)}
		cfg.Auth.TokensFile = c.tokensFile()
	}
	c.secureKafkaConfig(cfg)
}

// readOrCreateSecret returns the secret (a token, a password) in path,
// writing a new random one (32 bytes, hex, the file 0600) if there is
// none.
func readOrCreateSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	var r [32]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	t := hex.EncodeToString(r[:])
	if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
		return "", err
	}
	return t, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
