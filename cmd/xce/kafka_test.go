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
