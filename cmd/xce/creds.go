package main

import (
	"errors"
	"os"

	"github.com/spf13/pflag"

	"github.com/xce/xce/client"
)

// credFlags are the credentials of every command that talks to a node:
// --ca-file, --cert-file, --key-file and --token, each also read from the
// environment (XCE_CA_FILE, XCE_CERT_FILE, XCE_KEY_FILE, XCE_TOKEN) when
// the flag is not given. The token is never printed.
type credFlags struct {
	caFile, certFile, keyFile, token string
}

func (f *credFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.caFile, "ca-file", "", "CA that signs the nodes' certificates: talk TLS, verifying each node's identity (env XCE_CA_FILE)")
	fl.StringVar(&f.certFile, "cert-file", "", "client certificate to present, PEM (env XCE_CERT_FILE)")
	fl.StringVar(&f.keyFile, "key-file", "", "its key, PEM (env XCE_KEY_FILE)")
	fl.StringVar(&f.token, "token", "", "bearer token sent with every call (env XCE_TOKEN)")
}

// credentials are the flags, each falling back to its environment
// variable.
func (f *credFlags) credentials() client.Credentials {
	or := func(v, env string) string {
		if v != "" {
			return v
		}
		return os.Getenv(env)
	}
	return client.Credentials{
		CAFile:   or(f.caFile, "XCE_CA_FILE"),
		CertFile: or(f.certFile, "XCE_CERT_FILE"),
		KeyFile:  or(f.keyFile, "XCE_KEY_FILE"),
		Token:    or(f.token, "XCE_TOKEN"),
	}
}

// newClient is client.New with the credentials; a bad address list or
// unreadable credential files are usage errors.
func (f *credFlags) newClient(endpoints []string, opts client.Options) (*client.Client, error) {
	opts.Credentials = f.credentials()
	c, err := client.New(endpoints, opts)
	switch {
	case errors.Is(err, client.ErrNoEndpoints):
		return nil, usageErr("--addr: %v", err)
	case err != nil:
		return nil, usageErr("credentials: %v", err)
	}
	return c, nil
}
