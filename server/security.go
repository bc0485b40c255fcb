package server

import (
	"crypto/tls"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/auth"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/dispatch"
	"github.com/xce/xce/netio"
	"github.com/xce/xce/tlsconf"
	"github.com/xce/xce/ui"
)

// clientSecurity is the client port's TLS and permissions, from the tls,
// auth and insecure keys (docs/operations.md, "TLS and permissions on the
// client port").
type clientSecurity struct {
	tls   *tls.Config // nil: cleartext
	authn *auth.Authenticator
	sec   dispatch.Security
	// refused counts the /metrics guard's refusals; set once the API is
	// built, before the node runs.
	refused *prometheus.CounterVec
}

func newClientSecurity(cfg *configs.Config, log zerolog.Logger) (*clientSecurity, error) {
	cs := &clientSecurity{sec: dispatch.Security{Insecure: cfg.Insecure}}
	mode := tlsconf.ClientAuth(cfg.TLS.ClientAuth)
	if mode == "" {
		mode = tlsconf.ClientAuthNone
	}
	if cfg.TLS.CertFile != "" {
		src, err := tlsconf.NewSource(tlsconf.Files{CA: cfg.TLS.CAFile, Cert: cfg.TLS.CertFile, Key: cfg.TLS.KeyFile})
		if err != nil {
			return nil, err
		}
		src.OnReload = reloadLogger(log, "tls")
		// required is checked per request, not at the handshake, so that
		// a load balancer without a certificate still reaches /healthz
		// and /readyz.
		hs := mode
		if hs == tlsconf.ClientAuthRequired {
			hs = tlsconf.ClientAuthOptional
		}
		cs.tls = src.ServerConfig(hs, nil)
		cs.sec.CertExpiry = src.Expiry
	} else {
		mode = tlsconf.ClientAuthNone
	}
	if cfg.PeerTLS.CertFile != "" {
		if src, err := tlsconf.NewSource(tlsconf.Files{Cert: cfg.PeerTLS.CertFile, Key: cfg.PeerTLS.KeyFile}); err == nil {
			cs.sec.PeerCertExpiry = src.Expiry
		}
	}
	ac := auth.Config{Cluster: cfg.ClusterID, ClientAuth: mode}
	if cfg.Auth.Anonymous == string(auth.Reader) {
		ac.Anonymous = auth.Reader
	}
	if cfg.Auth.TokensFile != "" {
		t, err := auth.LoadTokens(cfg.Auth.TokensFile)
		if err != nil {
			return nil, err
		}
		ac.Tokens = t
	}
	cs.authn = auth.New(ac)
	cs.logStart(cfg, log, ac)
	return cs, nil
}

func (cs *clientSecurity) logStart(cfg *configs.Config, log zerolog.Logger, ac auth.Config) {
	if cfg.Insecure && (!netio.IsLoopback(cfg.ClientAddr) || (cfg.PeerAddr != "" && !netio.IsLoopback(cfg.PeerAddr))) {
		log.Warn().Bool("insecure", true).Str("client_addr", cfg.ClientAddr).Str("peer_addr", cfg.PeerAddr).
			Msg("INSECURE: insecure: true and a port reachable beyond this machine; without TLS anyone on the network can read and forge its traffic")
	}
	if !cs.authn.Enforced() {
		log.Warn().Str("auth", "off").
			Msg("auth: off: the client port has no authentication; every caller may call every method, deletes included (set auth.tokens_file, or tls.client_auth optional or required)")
		return
	}
	e := log.Info().Str("auth", "on").Str("client_auth", string(ac.ClientAuth)).Str("anonymous", cfg.Auth.Anonymous)
	if ac.Tokens != nil {
		e = e.Int("tokens", ac.Tokens.Len())
	}
	e.Msg("auth: on: every call on the client port is checked against the caller's roles")
}

// console is the web console with the API's identities: the caller a
// request's token or client certificate names, with its roles' permissions.
func (cs *clientSecurity) console() http.Handler {
	o := ui.Options{}
	for _, p := range auth.Grants[auth.Admin] {
		o.All = append(o.All, string(p))
	}
	if cs.authn.Enforced() {
		o.Identify = func(r *http.Request) (ui.Identity, error) {
			tlsState := r.TLS
			if from := auth.TLSFrom(r.Context()); from != nil {
				tlsState = from
			}
			p, err := cs.authn.Identify(r.Header, tlsState)
			if err != nil {
				return ui.Identity{}, err
			}
			id := ui.Identity{Name: p.Name, Via: p.Via, Permissions: []string{}}
			for _, perm := range p.Permissions() {
				id.Permissions = append(id.Permissions, string(perm))
			}
			return id, nil
		}
	}
	return ui.Handler(o)
}

// guardMetrics makes /metrics need the metrics permission when permissions
// are enforced.
func (cs *clientSecurity) guardMetrics(h http.Handler) http.Handler {
	return cs.authn.Require(auth.PermMetrics, h, func(code int) {
		if cs.refused != nil {
			c := "permission_denied"
			if code == http.StatusUnauthorized {
				c = "unauthenticated"
			}
			cs.refused.WithLabelValues("/metrics", c).Inc()
		}
	})
}

func reloadLogger(log zerolog.Logger, key string) func(error) {
	return func(err error) {
		if err != nil {
			log.Warn().Err(err).Msg(key + ": renewed certificate files do not load; the previous certificate stays in use")
			return
		}
		log.Info().Msg(key + ": certificate files reloaded; new connections use them")
	}
}
