package bench

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
	"github.com/xce/xce/tlsconf"
)

// LocalSecurity is what a local cluster (xce dev --tls, xce bench --local
// --tls) runs secure with, all in one directory: a CA, a certificate per
// node (client and peer ports) and per worker, and an admin token whose
// hash the nodes' tokens file holds. The token itself is only in
// admin.token (0600), never printed.
type LocalSecurity struct {
	Dir       string
	ClusterID string
	// TokenFile holds the admin token; TokensFile the nodes' auth.tokens_file.
	TokenFile, TokensFile string
	token                 string
}

// PrepareLocalSecurity creates in dir (once: what exists is kept, so a
// restarted dev cluster keeps its credentials) the CA, the certificates
// of the nodes and workers, and the admin token.
func PrepareLocalSecurity(dir, clusterID string, nodes, workers []string) (*LocalSecurity, error) {
	s := &LocalSecurity{Dir: dir, ClusterID: clusterID,
		TokenFile: filepath.Join(dir, "admin.token"), TokensFile: filepath.Join(dir, "tokens")}
	ca, _ := tlsconf.CAFiles(dir)
	if _, err := os.Stat(ca); errors.Is(err, os.ErrNotExist) {
		if err := tlsconf.CreateCA(dir, clusterID); err != nil {
			return nil, err
		}
	}
	ids := func(kind string, names []string) []tlsconf.Identity {
		out := make([]tlsconf.Identity, len(names))
		for i, n := range names {
			out[i] = tlsconf.Identity{Cluster: clusterID, Kind: kind, Name: n}
		}
		return out
	}
	for _, id := range append(ids(tlsconf.KindNode, nodes), ids(tlsconf.KindWorker, workers)...) {
		cert, _ := tlsconf.CertFiles(dir, id.Name)
		if _, err := os.Stat(cert); err == nil {
			continue
		}
		req := tlsconf.CertRequest{ID: id}
		if id.Kind == tlsconf.KindNode {
			req.Hosts = []string{"127.0.0.1", "localhost"}
		}
		if _, _, err := tlsconf.CreateCert(dir, req); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(s.TokenFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		var r [32]byte
		_, _ = rand.Read(r[:])
		s.token = hex.EncodeToString(r[:])
		if err := os.WriteFile(s.TokenFile, []byte(s.token+"\n"), 0o600); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	default:
		s.token = strings.TrimSpace(string(b))
	}
	// The tokens file: <sha256 of the token, hex> <principal> <roles>.
	sum := sha256.Sum256([]byte(s.token))
	line := fmt.Sprintf("%s admin admin\n", hex.EncodeToString(sum[:]))
	if err := os.WriteFile(s.TokensFile, []byte(line), 0o600); err != nil {
		return nil, err
	}
	return s, nil
}

// Configure sets a node's tls (client certificates optional, for the
// workers' identities), peer_tls and auth sections; the node's id must be
// set.
func (s *LocalSecurity) Configure(c *configs.Config) {
	ca, _ := tlsconf.CAFiles(s.Dir)
	cert, key := tlsconf.CertFiles(s.Dir, c.NodeID)
	c.TLS = configs.ClientTLS{CAFile: ca, CertFile: cert, KeyFile: key, ClientAuth: string(tlsconf.ClientAuthOptional)}
	c.PeerTLS = configs.PeerTLS{CAFile: ca, CertFile: cert, KeyFile: key}
	c.Auth = configs.Auth{TokensFile: s.TokensFile, Anonymous: "none"}
}

// Admin are the admin's credentials: the CA and the token.
func (s *LocalSecurity) Admin() client.Credentials {
	ca, _ := tlsconf.CAFiles(s.Dir)
	return client.Credentials{CAFile: ca, Token: s.token}
}

// Worker are the credentials of worker id: the CA and its certificate.
func (s *LocalSecurity) Worker(id string) client.Credentials {
	ca, _ := tlsconf.CAFiles(s.Dir)
	cert, key := tlsconf.CertFiles(s.Dir, id)
	return client.Credentials{CAFile: ca, CertFile: cert, KeyFile: key}
}
