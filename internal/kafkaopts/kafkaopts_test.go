package kafkaopts_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xce/xce/internal/kafkaopts"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/tlsconf"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  kafkaopts.Security
		want []string // substrings, one per problem; none: valid
	}{
		{name: "zero: plaintext"},
		{name: "tls with system roots", sec: kafkaopts.Security{TLS: kafkaopts.TLS{Enabled: true}}},
		{name: "full", sec: kafkaopts.Security{
			TLS:  kafkaopts.TLS{Files: tlsconf.Files{CA: "ca", Cert: "c", Key: "k"}},
			SASL: kafkaopts.SASL{Mechanism: "SCRAM-SHA-512", Username: "u", PasswordFile: "p"}}},
		{name: "cert without key", sec: kafkaopts.Security{TLS: kafkaopts.TLS{Files: tlsconf.Files{Cert: "c"}}},
			want: []string{"tls.files.cert: cert and key are set together"}},
		{name: "key without cert", sec: kafkaopts.Security{TLS: kafkaopts.TLS{Files: tlsconf.Files{Key: "k"}}},
			want: []string{"tls.files.cert: cert and key are set together"}},
		{name: "unknown mechanism", sec: kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: "GSSAPI", Username: "u", PasswordFile: "p"}},
			want: []string{`sasl.mechanism: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (got "GSSAPI")`}},
		{name: "user without mechanism", sec: kafkaopts.Security{SASL: kafkaopts.SASL{Username: "u"}},
			want: []string{"sasl.mechanism: required with a username or a password file"}},
		{name: "mechanism alone", sec: kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: "PLAIN"}},
			want: []string{"sasl.username: required", "sasl.password_file: required"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sec.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %q", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("Validate: %q, want %d problems %q", lines, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("problem %d: %q, want %q", i, lines[i], w)
				}
			}
		})
	}
}

func TestReadPassword(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		"s3cret":            "s3cret",
		"s3cret\n":          "s3cret",
		"s3cret\r\n":        "s3cret",
		"s3cret\nignored\n": "s3cret",
		" spaced pass \n":   " spaced pass ",
	} {
		p := filepath.Join(dir, "pw")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := kafkaopts.ReadPassword(p); err != nil || got != want {
			t.Errorf("ReadPassword of %q: %q, %v; want %q", content, got, err, want)
		}
	}
	p := filepath.Join(dir, "empty")
	if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := kafkaopts.ReadPassword(p); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: %v", err)
	}
}

func TestOptsNameTheMissingFile(t *testing.T) {
	dir := t.TempDir()
	pw := writePassword(t, dir, "hunter2")
	for name, sec := range map[string]kafkaopts.Security{
		"password file": {SASL: kafkaopts.SASL{Mechanism: "PLAIN", Username: "u", PasswordFile: filepath.Join(dir, "nope")}},
		"ca file": {TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: filepath.Join(dir, "nope")}},
			SASL: kafkaopts.SASL{Mechanism: "PLAIN", Username: "u", PasswordFile: pw}},
	} {
		_, err := sec.Opts(zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "nope")) {
			t.Errorf("%s missing: %v, want an error naming the file", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s missing: the error shows the password: %v", name, err)
		}
	}
	if opts, err := (kafkaopts.Security{}).Opts(zerolog.Nop()); err != nil || len(opts) != 0 {
		t.Errorf("zero Security: %d options, %v; want none", len(opts), err)
	}
}

func writePassword(t testing.TB, dir, pw string) string {
	t.Helper()
	p := filepath.Join(dir, "password")
	if err := os.WriteFile(p, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// pki writes a CA and a broker certificate for 127.0.0.1 to a new dir.
func pki(t testing.TB) (dir string, broker tlsconf.Files) {
	t.Helper()
	dir = t.TempDir()
	if err := tlsconf.CreateCA(dir, "kafka"); err != nil {
		t.Fatal(err)
	}
	cert, key, err := tlsconf.CreateCert(dir, tlsconf.CertRequest{
		ID: tlsconf.Identity{Cluster: "kafka", Kind: tlsconf.KindNode, Name: "broker"}, Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := tlsconf.CAFiles(dir)
	return dir, tlsconf.Files{CA: ca, Cert: cert, Key: key}
}

// broker starts kfake requiring SASL as user/pass (every mechanism), with
// TLS when files names a certificate.
func broker(t testing.TB, user, pass string, files tlsconf.Files) []string {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.EnableSASL()}
	for _, m := range kafkaopts.Mechanisms {
		opts = append(opts, kfake.Superuser(m, user, pass))
	}
	if files.Cert != "" {
		src, err := tlsconf.NewSource(tlsconf.Files{Cert: files.Cert, Key: files.Key})
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, kfake.TLS(src.ServerConfig(tlsconf.ClientAuthNone, nil)))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// ping connects with sec and asks the broker for its metadata.
func ping(t testing.TB, brokers []string, sec kafkaopts.Security) error {
	return pingLog(t, brokers, sec, zerolog.Nop())
}

func pingLog(t testing.TB, brokers []string, sec kafkaopts.Security, log zerolog.Logger) error {
	t.Helper()
	opts, err := sec.Opts(log)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTimeout(2 * time.Second),
		kgo.RequestRetries(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

func TestEveryMechanismOverTLS(t *testing.T) {
	dir, files := pki(t)
	brokers := broker(t, "xce", "s3cret", files)
	good, bad := writePassword(t, dir, "s3cret"), filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("wrong-pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsOn := kafkaopts.TLS{Files: tlsconf.Files{CA: files.CA}}
	for _, m := range kafkaopts.Mechanisms {
		t.Run(m, func(t *testing.T) {
			sec := kafkaopts.Security{TLS: tlsOn, SASL: kafkaopts.SASL{Mechanism: m, Username: "xce", PasswordFile: good}}
			if err := ping(t, brokers, sec); err != nil {
				t.Fatalf("right password: %v", err)
			}
			sec.SASL.PasswordFile = bad
			var logged testutil.SyncBuffer
			err := pingLog(t, brokers, sec, zerolog.New(&logged))
			if err == nil {
				t.Fatal("wrong password: connected")
			}
			if strings.Contains(err.Error(), "wrong-pass") || strings.Contains(logged.String(), "wrong-pass") {
				t.Errorf("the error or the log shows the password: %v\n%s", err, logged.String())
			}
			for _, w := range []string{"kafka sasl: the broker refused the authentication", `"sasl_username":"xce"`, `"sasl_mechanism":"` + m + `"`} {
				if !strings.Contains(logged.String(), w) {
					t.Errorf("log lacks %q:\n%s", w, logged.String())
				}
			}
		})
	}
	t.Run("no SASL", func(t *testing.T) {
		if err := ping(t, brokers, kafkaopts.Security{TLS: tlsOn}); err == nil {
			t.Fatal("connected without SASL to a broker that requires it")
		}
	})
	t.Run("plaintext to TLS", func(t *testing.T) {
		sec := kafkaopts.Security{SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA256, Username: "xce", PasswordFile: good}}
		if err := ping(t, brokers, sec); err == nil {
			t.Fatal("plaintext client connected to a TLS broker")
		}
	})
	t.Run("another CA", func(t *testing.T) {
		_, other := pki(t)
		sec := kafkaopts.Security{TLS: kafkaopts.TLS{Files: tlsconf.Files{CA: other.CA}},
			SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA256, Username: "xce", PasswordFile: good}}
		err := ping(t, brokers, sec)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("broker signed by another CA: %v, want a certificate error", err)
		}
	})
	t.Run("another name", func(t *testing.T) {
		// The certificate names 127.0.0.1, not localhost.
		port := brokers[0][strings.LastIndex(brokers[0], ":"):]
		sec := kafkaopts.Security{TLS: tlsOn,
			SASL: kafkaopts.SASL{Mechanism: kafkaopts.ScramSHA256, Username: "xce", PasswordFile: good}}
		err := ping(t, []string{"localhost" + port}, sec)
		if err == nil || !strings.Contains(err.Error(), "localhost") {
			t.Fatalf("broker reached by a name its certificate lacks: %v, want a name error", err)
		}
	})
}
