package netio

import (
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Reasons a client connection or request is refused: the values of the
// reason label of xce_client_conn_refused_total.
const (
	// ReasonCap: the connection and the health reserve were full, and no
	// connection could make room; closed as soon as accepted.
	ReasonCap = "cap"
	// ReasonReserveNonHealth: a request other than /healthz or /readyz on
	// a connection of the health reserve; answered 503.
	ReasonReserveNonHealth = "reserve_non_health"
	// ReasonReadTimeout: a request's headers or body did not arrive in
	// time (a silent connection counts here too).
	ReasonReadTimeout = "read_timeout"
	// ReasonWriteTimeout: the client did not take a response in time.
	ReasonWriteTimeout = "write_timeout"
	// ReasonHeaderTooLarge: request headers over MaxHeaderBytes (431).
	ReasonHeaderTooLarge = "header_too_large"
	// ReasonBadRequest: a request the server could not parse (400).
	ReasonBadRequest = "bad_request"
	// ReasonPlaintext: cleartext to a TLS client port; closed (an HTTP/1
	// request is answered 400 first).
	ReasonPlaintext = "plaintext"
	// ReasonTLSHandshake: a TLS handshake failed on TLS's terms (an
	// unknown CA, no or a bad client certificate, an old TLS version, an
	// alert from the client).
	ReasonTLSHandshake = "tls_handshake"
	// ReasonClosedBeforeHandshake: the connection ended before its TLS
	// handshake did, with no TLS error: the client closed or reset it (a
	// TCP health check, a port scan, a client that exits while it
	// connects). Not a refusal; counted so that they show apart.
	ReasonClosedBeforeHandshake = "closed_before_handshake"
)

var reasons = []string{ReasonCap, ReasonReserveNonHealth, ReasonReadTimeout, ReasonWriteTimeout, ReasonHeaderTooLarge, ReasonBadRequest,
	ReasonPlaintext, ReasonTLSHandshake, ReasonClosedBeforeHandshake}

// Kinds of connections closed to make room for new ones: the values of the
// kind label of xce_client_conn_evicted_total.
const (
	// EvictedUnused: the connection had not sent a request.
	EvictedUnused = "unused"
	// EvictedIdle: the connection was idle between requests for longer
	// than ReadHeaderTimeout.
	EvictedIdle = "idle"
)

// Pools of client connections: the values of the pool label.
const (
	PoolGeneral = "general"
	PoolReserve = "reserve"
)

// ConnMetrics are the client port's connection metrics.
type ConnMetrics struct {
	refused map[string]prometheus.Counter
	evicted map[string]prometheus.Counter
	open    map[string]prometheus.Gauge
	limit   map[string]prometheus.Gauge
}

// NewConnMetrics creates the metrics and registers them with reg (none
// when reg is nil):
//
//	xce_client_conn_refused_total{reason}  connections and requests refused
//	xce_client_conn_evicted_total{kind}    connections closed to make room
//	xce_client_connections{pool}           connections open
//	xce_client_connection_limit{pool}      the caps in force
func NewConnMetrics(reg prometheus.Registerer) *ConnMetrics {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xce_client_conn_refused_total",
		Help: "Client connections and requests refused by the client port's limits and TLS, by reason: cap, reserve_non_health, " +
			"read_timeout, write_timeout, header_too_large, bad_request, plaintext (cleartext to a TLS port), tls_handshake (a handshake " +
			"that TLS refused: a certificate, the version, an alert from the client); closed_before_handshake counts the connections " +
			"the client closed before their TLS handshake ended (a TCP health check, a scan, a client that exits), which are not refusals.",
	}, []string{"reason"})
	evicted := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "xce_client_conn_evicted_total",
		Help: "Client connections closed to make room for new ones, by what they were doing (unused: no request yet; idle: between requests).",
	}, []string{"kind"})
	open := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "xce_client_connections", Help: "Client connections open, by pool (general, or the health reserve).",
	}, []string{"pool"})
	limit := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "xce_client_connection_limit", Help: "Caps on client connections in force, by pool, after fitting RLIMIT_NOFILE.",
	}, []string{"pool"})
	m := &ConnMetrics{
		refused: map[string]prometheus.Counter{}, evicted: map[string]prometheus.Counter{},
		open: map[string]prometheus.Gauge{}, limit: map[string]prometheus.Gauge{},
	}
	for _, r := range reasons {
		m.refused[r] = refused.WithLabelValues(r)
	}
	for _, k := range []string{EvictedUnused, EvictedIdle} {
		m.evicted[k] = evicted.WithLabelValues(k)
	}
	for _, p := range []string{PoolGeneral, PoolReserve} {
		m.open[p] = open.WithLabelValues(p)
		m.limit[p] = limit.WithLabelValues(p)
	}
	if reg != nil {
		reg.MustRegister(refused, evicted, open, limit)
	}
	return m
}

// refusalSummaryEvery is how often the refusal log sums up.
const refusalSummaryEvery = 10 * time.Second

// refusalLog logs refusals without flooding: within a spell of them, the
// first of each kind at once (a new kind is never hidden in a summary),
// the rest summed up in one line per period while they go on. A period
// without any ends the spell.
type refusalLog struct {
	log   zerolog.Logger
	every time.Duration

	mu      sync.Mutex
	logged  map[string]bool // the kinds logged at once in this spell
	counts  map[string]int  // the others, this period
	events  int             // every event of this period, logged or counted
	since   time.Time
	timer   *time.Timer // set while a spell goes on
	stopped bool
}

func newRefusalLog(log zerolog.Logger, every time.Duration) *refusalLog {
	return &refusalLog{log: log, every: every, logged: map[string]bool{}, counts: map[string]int{}}
}

// note records one event: a refusal reason, an eviction kind, or an
// accept error.
func (r *refusalLog) note(what, remote string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.timer == nil {
		r.since = time.Now()
		r.timer = time.AfterFunc(r.every, r.flush)
	}
	r.events++
	if !r.logged[what] {
		r.logged[what] = true
		r.log.Warn().Str("reason", what).Str("remote", remote).Dur("summary_every", r.every).
			Msg("client port: refusing or closing a connection under its limits; further ones are summed up periodically")
		return
	}
	r.counts[what]++
}

// flush logs the summary of the period, or ends the spell if it was quiet.
func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.events == 0 {
		r.timer = nil
		clear(r.logged)
		return
	}
	r.events = 0
	if len(r.counts) > 0 {
		r.summary()
	}
	r.timer.Reset(r.every)
}

// summary logs the counts and clears them; r.mu is held.
func (r *refusalLog) summary() {
	ev := r.log.Warn()
	total := 0
	keys := make([]string, 0, len(r.counts))
	for k := range r.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ev = ev.Int(k, r.counts[k])
		total += r.counts[k]
	}
	ev.Int("total", total).Dur("over", time.Since(r.since).Round(time.Millisecond)).
		Msg("client port: connections refused or closed under its limits")
	clear(r.counts)
	r.since = time.Now()
}

// stop logs what is left and stops the timer.
func (r *refusalLog) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if len(r.counts) > 0 {
		r.summary()
	}
}
