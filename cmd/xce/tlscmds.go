package main

import (
	"fmt"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/xce/xce/tlsconf"
)

// tlsCmd is `xce tls`: a small CA and the certificates it signs, so that a
// cluster needs no other tool (docs/operations.md, "TLS and permissions
// on the client port").
func tlsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tls", Short: "Create a cluster's CA and the certificates of its nodes, clients and workers"}
	ca := &cobra.Command{Use: "ca", Short: "The cluster's certificate authority"}
	var caDir, caCluster string
	caCreate := &cobra.Command{
		Use:   "create --dir D",
		Short: "Write a new CA (ECDSA P-256, valid 10 years) to D/ca.pem and D/ca-key.pem (the key 0600)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if caDir == "" {
				return usageErr("--dir is required")
			}
			if err := tlsconf.CreateCA(caDir, caCluster); err != nil {
				return err
			}
			cert, key := tlsconf.CAFiles(caDir)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", cert, key)
			return nil
		},
	}
	caCreate.Flags().StringVar(&caDir, "dir", "", "directory to write the CA to (created 0700 if missing); required")
	caCreate.Flags().StringVar(&caCluster, "cluster", "", "cluster id, named in the CA's subject (informational)")
	ca.AddCommand(caCreate)

	cert := &cobra.Command{Use: "cert", Short: "Certificates signed by the cluster's CA"}
	var r certFlags
	certCreate := &cobra.Command{
		Use:   "create --dir D --cluster C (--node ID | --client NAME | --worker ID)",
		Short: "Write a certificate signed by D/ca.pem to D/<ID or NAME>.pem and D/<ID or NAME>-key.pem (the key 0600)",
		Long: `Write a certificate (ECDSA P-256) signed by the CA in D to D/<ID or NAME>.pem and
its key to D/<ID or NAME>-key.pem (0600). It names its identity as the URI
xce://<cluster>/<node|client|worker>/<ID or NAME>: a node's serves both its
client and peer ports and also names 127.0.0.1, localhost and every --host;
a client's or worker's identifies the caller to the nodes (a worker may
heartbeat only as the worker id it names).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := r.request()
			if err != nil {
				return err
			}
			certPath, keyPath, err := tlsconf.CreateCert(r.dir, req)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s for %s, valid until %s\n", certPath, keyPath, req.ID,
				time.Now().Add(req.Lifetime).UTC().Format(time.DateOnly))
			return nil
		},
	}
	fl := certCreate.Flags()
	fl.StringVar(&r.dir, "dir", "", "directory holding ca.pem and ca-key.pem, where the certificate is written; required")
	fl.StringVar(&r.cluster, "cluster", "", "cluster id the certificate names (the nodes' cluster_id); required")
	fl.StringVar(&r.node, "node", "", "a node's certificate, for node id ID")
	fl.StringVar(&r.client, "client", "", "a client's certificate, for principal NAME")
	fl.StringVar(&r.worker, "worker", "", "a worker's certificate, for worker id ID")
	fl.StringSliceVar(&r.hosts, "host", nil, "another DNS name or IP address the certificate names (repeatable)")
	fl.DurationVar(&r.lifetime, "lifetime", tlsconf.CertLifetime, "how long the certificate is valid")
	cert.AddCommand(certCreate)
	cmd.AddCommand(ca, cert)
	return cmd
}

// certFlags are the flags of `xce tls cert create`.
type certFlags struct {
	dir, cluster, node, client, worker string
	hosts                              []string
	lifetime                           time.Duration
}

// request checks the flags and turns them into what CreateCert signs.
func (f *certFlags) request() (tlsconf.CertRequest, error) {
	var req tlsconf.CertRequest
	switch {
	case f.dir == "":
		return req, usageErr("--dir is required")
	case f.cluster == "":
		return req, usageErr("--cluster is required")
	case f.lifetime <= 0:
		return req, usageErr("--lifetime: %s is not positive", f.lifetime)
	}
	n := 0
	for kind, name := range map[string]string{tlsconf.KindNode: f.node, tlsconf.KindClient: f.client, tlsconf.KindWorker: f.worker} {
		if name != "" {
			n++
			req.ID = tlsconf.Identity{Cluster: f.cluster, Kind: kind, Name: name}
		}
	}
	if n != 1 {
		return req, usageErr("give exactly one of --node, --client and --worker")
	}
	if !idRe.MatchString(req.ID.Name) {
		return req, usageErr("--%s %q: must be 1-128 characters of [A-Za-z0-9._-], not starting with a dot", req.ID.Kind, req.ID.Name)
	}
	if req.ID.Kind == tlsconf.KindNode {
		req.Hosts = append(req.Hosts, "127.0.0.1", "localhost")
	}
	req.Hosts = append(req.Hosts, f.hosts...)
	req.Lifetime = f.lifetime
	return req, nil
}

// idRe is what a certificate's ID or NAME may be: it is a file name and a
// path segment of the identity URI.
var idRe = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$`)
