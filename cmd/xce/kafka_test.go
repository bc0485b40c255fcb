package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/tlsconf"
)

// The Kafka flags `xce dev` gives its workers and prints ask for the
// security they were made from.
func TestKafkaSecurityArgs(t *testing.T) {
	for _, sec := range []kafkaopts.Security{
		{},
		{TLS: kafkaopts.TLS{Enabled: true}},
		{TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: "ca.pem"}}},
		{TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: "ca.pem", Cert: "c.pem", Key: "c-key.pem"}}},
		{TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: "ca.pem"}},
			SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA512, Username: "xce", PasswordFile: "pw"}},
	} {
		var f kafkaSecurityFlags
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		f.register(cmd)
		args := kafkaSecurityArgs(sec)
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		got, err := f.security()
		if err != nil || got != sec {
			t.Errorf("%q asks for %+v (%v), want %+v", args, got, err, sec)
		}
		if strings.Contains(strings.Join(args, " "), "password ") {
			t.Errorf("%q", args)
		}
	}
}

// A problem with the Kafka flags names the flags.
func TestKafkaSecurityProblemsNameTheFlags(t *testing.T) {
	for _, tc := range []struct {
		f    kafkaSecurityFlags
		want string
	}{
		{kafkaSecurityFlags{cert: "c.pem"}, "--tls-cert-file: --tls-cert-file and --tls-key-file are set together"},
		{kafkaSecurityFlags{user: "u", mechanism: kafkaopts.ScramSHA256}, "--sasl-password-file: required"},
		{kafkaSecurityFlags{user: "u", passwordFile: "pw", mechanism: "GSSAPI"}, `--sasl-mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (got "GSSAPI")`},
	} {
		if _, err := tc.f.security(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.f, err, tc.want)
		}
	}
}
