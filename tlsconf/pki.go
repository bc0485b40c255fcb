package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// Lifetimes of what CreateCA and CreateCert make.
const (
	CALifetime   = 10 * 365 * 24 * time.Hour
	CertLifetime = 365 * 24 * time.Hour
)

// CAFiles are the paths of the CA in dir: ca.pem and ca-key.pem.
func CAFiles(dir string) (cert, key string) {
	return filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
}

// CertFiles are the paths of name's certificate in dir: <name>.pem and
// <name>-key.pem.
func CertFiles(dir, name string) (cert, key string) {
	return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
}

// CreateCA writes a new CA (ECDSA P-256, valid for CALifetime) to dir. It
// refuses to overwrite one.
func CreateCA(dir, cluster string) error {
	certPath, keyPath := CAFiles(dir)
	if err := refuseExisting(certPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "xce CA " + cluster, Organization: []string{"xce"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	return writePair(dir, certPath, keyPath, der, key)
}

// CertRequest is what CreateCert signs.
type CertRequest struct {
	ID Identity
	// Hosts are DNS names or IP addresses the certificate also names, for
	// clients that check the server's name.
	Hosts []string
	// Lifetime defaults to CertLifetime.
	Lifetime time.Duration
}

// CreateCert writes a certificate for r.ID, signed by the CA in dir, to
// dir as <name>.pem and <name>-key.pem (the key 0600). A node's certificate
// serves both ends of a connection; a client's or worker's only the
// client's.
func CreateCert(dir string, r CertRequest) (certPath, keyPath string, err error) {
	caCertPath, caKeyPath := CAFiles(dir)
	ca, caKey, err := loadCA(caCertPath, caKeyPath)
	if err != nil {
		return "", "", err
	}
	certPath, keyPath = CertFiles(dir, r.ID.Name)
	if err := refuseExisting(certPath, keyPath); err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	life := r.Lifetime
	if life <= 0 {
		life = CertLifetime
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.ID.Kind + " " + r.ID.Name, Organization: []string{"xce " + r.ID.Cluster}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(life),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{r.ID.URI()},
	}
	if r.ID.Kind == KindNode {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, h := range r.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	return certPath, keyPath, writePair(dir, certPath, keyPath, der, key)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func refuseExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists: not overwriting it", p)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func loadCA(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w (create one with xce tls ca create)", err)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	cp, _ := pem.Decode(cb)
	kp, _ := pem.Decode(kb)
	if cp == nil || kp == nil {
		return nil, nil, fmt.Errorf("CA files %s, %s: not PEM", certPath, keyPath)
	}
	ca, err := x509.ParseCertificate(cp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate %s: %w", certPath, err)
	}
	key, err := x509.ParseECPrivateKey(kp.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key %s: %w", keyPath, err)
	}
	return ca, key, nil
}

// writePair writes the certificate (0644) and its key (0600), the key
// first, each through a temporary file renamed into place.
func writePair(dir, certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
