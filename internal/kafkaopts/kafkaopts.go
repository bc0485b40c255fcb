// Package kafkaopts builds the connection options shared by every Kafka
// client xce makes (the outbox publisher, the Kafka-coordinated backend,
// `xce events tail`): TLS to the brokers and SASL authentication (see
// docs/operations.md, "Kafka: TLS and SASL").
package kafkaopts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/xce/xce/internal/fielderr"
	"github.com/xce/xce/tlsconf"
)

// Security is how a client reaches the brokers. The zero value is
// plaintext without authentication.
type Security struct {
	TLS  TLS
	SASL SASL
}

// TLS to the brokers: on when Enabled, or when a CA or a client
// certificate is named. Without a CA the system's roots verify the
// brokers.
type TLS struct {
	Enabled bool
	Files   tlsconf.Files
}

// On reports whether the connections use TLS.
func (t TLS) On() bool { return t.Enabled || t.Files.CA != "" || t.Files.Cert != "" }

// SASL authentication: off when Mechanism is empty. The password is read
// from PasswordFile (its trailing line break dropped) at every
// authentication, so a changed file applies to new connections.
type SASL struct {
	Mechanism    string
	Username     string
	PasswordFile string
}

// The SASL mechanisms.
const (
	Plain       = "PLAIN"
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Mechanisms are the SASL mechanisms xce speaks.
var Mechanisms = []string{Plain, ScramSHA256, ScramSHA512}

// Validate reports every invalid setting as a fielderr.List, each named
// by its field (TLS.Files.Cert, SASL.Username, …). Files are read by Opts,
// not here.
func (s Security) Validate() error {
	var l fielderr.List
	if (s.TLS.Files.Cert == "") != (s.TLS.Files.Key == "") {
		l.Add("TLS.Files.Cert", "{.TLS.Files.Cert} and {.TLS.Files.Key} are set together")
	}
	a := s.SASL
	switch a.Mechanism {
	case "":
		if a.Username != "" || a.PasswordFile != "" {
			l.Add("SASL.Mechanism", "required with a username or a password file (one of %s)", strings.Join(Mechanisms, ", "))
		}
	case Plain, ScramSHA256, ScramSHA512:
		if a.Username == "" {
			l.Add("SASL.Username", "required")
		}
		if a.PasswordFile == "" {
			l.Add("SASL.PasswordFile", "required")
		}
	default:
		l.Add("SASL.Mechanism", "must be one of %s (got %q)", strings.Join(Mechanisms, ", "), a.Mechanism)
	}
	return l.Err()
}

// Opts validates s, loads its files once (an error names the file, never
// the password) and returns the kgo options that apply it: DialTLSConfig
// and SASL. The TLS files are reloaded when they change (tlsconf.Source).
// A broker that closes the connection during authentication (kgo then
// reports only EOF) is logged to log, naming the user and mechanism.
func (s Security) Opts(log zerolog.Logger) ([]kgo.Opt, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS.On() {
		src, err := tlsconf.NewSource(s.TLS.Files)
		if err != nil {
			return nil, fmt.Errorf("kafka tls: %w", err)
		}
		opts = append(opts, kgo.DialTLSConfig(clientConfig(src, s.TLS.Files.CA != "")))
	}
	if s.SASL.Mechanism != "" {
		if _, err := ReadPassword(s.SASL.PasswordFile); err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(s.SASL.mechanism()), kgo.WithHooks(&saslFailures{sasl: s.SASL, log: log}))
	}
	return opts, nil
}

// clientConfig verifies the broker's certificate and name against src's
// CA (the system's roots when ownCA is false) and presents src's
// certificate when the broker asks for one. kgo sets ServerName to the
// host of each broker it dials. TLS 1.2 is the floor: brokers on older
// JVMs speak no more.
func clientConfig(src *tlsconf.Source, ownCA bool) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if cert := src.Certificate(); cert != nil {
			return cert, nil
		}
		return &tls.Certificate{}, nil
	}
	if ownCA {
		// Verified here, so that the pool is the current one.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("kafka tls: the broker sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: src.Pool(), Intermediates: inter, DNSName: cs.ServerName,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			return err
		}
	}
	return c
}

// saslFailures logs a failed read of an authentication response: the
// first, then at most one every saslLogEvery with the count of those in
// between (kgo redials at its retry pace).
type saslFailures struct {
	sasl SASL
	log  zerolog.Logger

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const saslLogEvery = time.Minute

func (h *saslFailures) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil || (key != int16(kmsg.SASLHandshake) && key != int16(kmsg.SASLAuthenticate)) {
		return
	}
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < saslLogEvery {
		h.suppressed++
		h.mu.Unlock()
		return
	}
	n := h.suppressed
	h.last, h.suppressed = now, 0
	h.mu.Unlock()
	h.log.Error().Err(err).Str("broker", net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))).
		Str("sasl_mechanism", h.sasl.Mechanism).Str("sasl_username", h.sasl.Username).Int("refusals_not_logged", n).
		Msg("kafka sasl: the broker refused the authentication (check the username, the password file and the mechanisms the broker enables)")
}

// mechanism is the SASL mechanism, reading the password at each
// authentication.
func (a SASL) mechanism() sasl.Mechanism {
	switch a.Mechanism {
	case Plain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pw, err := ReadPassword(a.PasswordFile)
			return plain.Auth{User: a.Username, Pass: pw}, err
		})
	case ScramSHA512:
		return scram.Sha512(func(context.Context) (scram.Auth, error) {
			pw, err := ReadPassword(a.PasswordFile)
			return scram.Auth{User: a.Username, Pass: pw}, err
		})
	default:
		return scram.Sha256(func(context.Context) (scram.Auth, error) {
			pw, err := ReadPassword(a.PasswordFile)
			return scram.Auth{User: a.Username, Pass: pw}, err
		})
	}
}

// ReadPassword reads a password file: its first line. Errors name the
// file, never its content.
func ReadPassword(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("kafka sasl password file: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", fmt.Errorf("kafka sasl password file %s: empty", path)
	}
	return pw, nil
}
