// Package worker is a reference worker for xce: it registers with the
// controller's primary, heartbeats at the interval the controller gives,
// registers again when the primary has no session for it (after a
// controller failover), follows the leader through the client library, and
// simulates the state of the task copies it is given.
//
// The simulation (Sim) is pure: for every task the worker holds a copy of
// (active, standby or warm-up), the lag falls at RestoreRate records/s
// toward 0 and stays there (an active also processes its input); a copy
// the worker no longer holds falls behind at GrowthRate records/s and is
// dropped when its lag passes DropLag or after DropAfter unheld, whichever
// comes first. A task the worker has no state for has no lag entry; a copy
// newly assigned without state starts at InitialLag, so warm-ups are
// visible.
//
// Facts: a NOTIFY whenever the worker's set of actives changes ("actives:
// t1,t2" or "no actives"), and an UPDATE per active task ("running" when
// caught up, "restoring" while it restores). Facts are sent when they
// change and again after every registration, since a new primary knows
// none of them.
package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// Defaults of Config.
const (
	DefaultRestoreRate = 10_000
	DefaultInitialLag  = 50_000
	// DefaultDropLag is 100 times the default acceptable recovery lag
	// (10000): a copy that far behind is worth less than a fresh restore.
	DefaultDropLag   = 1_000_000
	DefaultDropAfter = 60 * time.Second
	// defaultInterval is the heartbeat interval until the controller says.
	defaultInterval = time.Second
	// registerTimeout bounds one registration (NOT_READY is retried until then).
	registerTimeout = 10 * time.Second
	// maxUpdates bounds the UPDATE facts of one heartbeat (the controller
	// takes at most 1000 facts); the rest go with the next.
	maxUpdates = 999
	// maxNotice bounds the NOTIFY text (the controller takes 1024 bytes).
	maxNotice = 1024
)

// Config of a worker.
type Config struct {
	// ID names the worker: 1-128 characters of [A-Za-z0-9._-].
	ID string
	// Controllers are the controller nodes' client addresses (HOST:PORT).
	Controllers []string
	// Capacity is the worker's relative weight (0 drains it).
	Capacity uint32
	// ClientAddr is where the worker serves its own clients (informational).
	ClientAddr string
	// RestoreRate: records/s a held copy catches up (0: DefaultRestoreRate).
	RestoreRate float64
	// GrowthRate: records/s an unheld copy falls behind (0: RestoreRate).
	GrowthRate float64
	// InitialLag: lag of a copy assigned without state (0:
	// DefaultInitialLag; negative: start caught up).
	InitialLag int64
	// DropLag, DropAfter: an unheld copy is dropped past either (0: the
	// defaults, 1,000,000 records and 60s).
	DropLag   int64
	DropAfter time.Duration
	// Logger receives the worker's log lines.
	Logger zerolog.Logger
	// HTTPClient carries the calls (nil: the client library's default).
	HTTPClient *http.Client
	// Credentials are what the worker presents: a worker certificate
	// (xce tls cert create --worker ID) or a token, and the CA its
	// controllers' certificates chain to (TLS when a file is named).
	Credentials client.Credentials
	// AttemptTimeout bounds one call to one controller (0: the client
	// library's default).
	AttemptTimeout time.Duration
}

var idRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ErrConfig wraps every configuration error of Run.
var ErrConfig = errors.New("worker config")

func (cfg Config) withDefaults() (Config, error) {
	if !idRe.MatchString(cfg.ID) {
		return cfg, fmt.Errorf("%w: id %q: must be 1-128 characters of [A-Za-z0-9._-]", ErrConfig, cfg.ID)
	}
	var eps []string
	for _, e := range cfg.Controllers {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return cfg, fmt.Errorf("%w: no controller address", ErrConfig)
	}
	cfg.Controllers = eps
	if cfg.RestoreRate == 0 {
		cfg.RestoreRate = DefaultRestoreRate
	}
	if cfg.GrowthRate == 0 {
		cfg.GrowthRate = cfg.RestoreRate
	}
	switch {
	case cfg.InitialLag == 0:
		cfg.InitialLag = DefaultInitialLag
	case cfg.InitialLag < 0:
		cfg.InitialLag = 0
	}
	if cfg.DropLag == 0 {
		cfg.DropLag = DefaultDropLag
	}
	if cfg.DropAfter == 0 {
		cfg.DropAfter = DefaultDropAfter
	}
	switch {
	case cfg.RestoreRate < 0 || cfg.RestoreRate > 1e12:
		return cfg, fmt.Errorf("%w: restore rate %v: must be positive", ErrConfig, cfg.RestoreRate)
	case cfg.GrowthRate < 0 || cfg.GrowthRate > 1e12:
		return cfg, fmt.Errorf("%w: growth rate %v: must be positive", ErrConfig, cfg.GrowthRate)
	case cfg.DropLag < 0:
		return cfg, fmt.Errorf("%w: drop lag %d: must be positive", ErrConfig, cfg.DropLag)
	case cfg.DropAfter < 0:
		return cfg, fmt.Errorf("%w: drop after %s: must be positive", ErrConfig, cfg.DropAfter)
	}
	return cfg, nil
}

// Run runs the worker until ctx ends; it returns nil then. It returns an
// error only for a bad Config, or when the controller refuses the
// registration's arguments or the worker's credentials (Unauthenticated,
// PermissionDenied, a certificate refused at the handshake). Every goroutine it starts has stopped when it
// returns.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	c, err := client.New(cfg.Controllers, client.Options{HTTPClient: cfg.HTTPClient, AttemptTimeout: cfg.AttemptTimeout,
		Credentials: cfg.Credentials})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	defer c.Close()
	w := &worker{
		cfg: cfg,
		c:   c,
		log: cfg.Logger.With().Str("worker_id", cfg.ID).Logger(),
		sim: NewSim(SimConfig{
			RestoreRate: cfg.RestoreRate, GrowthRate: cfg.GrowthRate, InitialLag: cfg.InitialLag,
			DropLag: cfg.DropLag, DropAfter: cfg.DropAfter,
		}),
		interval:    defaultInterval,
		sentUpdates: map[string]string{},
	}
	return w.run(ctx)
}

type worker struct {
	cfg Config
	c   *client.Client
	log zerolog.Logger
	sim *Sim

	registered     bool
	interval       time.Duration
	sessionTimeout time.Duration
	lastAdvance    time.Time

	// The copies of the last heartbeat answer.
	known                      bool
	gen                        uint64
	actives, standbys, warmups []string

	// Facts the current session has acknowledged.
	sentNotice  *string
	sentUpdates map[string]string

	// failing is set after a failed heartbeat, so that an outage is
	// logged once at warn level, not once per interval.
	failing bool
}

func (w *worker) run(ctx context.Context) error {
	w.log.Info().Strs("controllers", w.cfg.Controllers).Uint32("capacity", w.cfg.Capacity).
		Float64("restore_rate", w.cfg.RestoreRate).Int64("initial_lag", w.cfg.InitialLag).Msg("worker starting")
	w.lastAdvance = time.Now()
	retry := backoff.Backoff{Min: time.Second, Max: 10 * time.Second}
	for {
		justRegistered := false
		if !w.registered {
			err := w.register(ctx)
			switch {
			case ctx.Err() != nil:
				return w.stopped()
			case errors.Is(err, client.ErrInvalid), refused(err):
				return fmt.Errorf("register: %w", err)
			case err != nil:
				wait := retry.Next()
				w.log.Warn().Err(err).Dur("retry_in", wait).Msg("register failed")
				if !backoff.Sleep(ctx, wait) {
					return w.stopped()
				}
				continue
			}
			retry.Reset()
			justRegistered = true
		}
		start := time.Now()
		w.heartbeat(ctx, justRegistered)
		if ctx.Err() != nil {
			return w.stopped()
		}
		if !w.registered && !justRegistered {
			continue // register again at once
		}
		if !backoff.Sleep(ctx, w.interval-time.Since(start)) {
			return w.stopped()
		}
	}
}

// refused reports a registration the controller turned down for who the
// worker is (its token or certificate): trying again would not change it.
func refused(err error) bool {
	return errors.Is(err, client.ErrUnauthenticated) || errors.Is(err, client.ErrPermissionDenied) ||
		errors.Is(err, client.ErrBadCertificate)
}

func (w *worker) stopped() error {
	w.log.Info().Msg("worker stopped")
	return nil
}

func (w *worker) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	r, err := w.c.Register(rctx, w.cfg.ID, w.cfg.Capacity, w.cfg.ClientAddr)
	if err != nil {
		return err
	}
	w.registered = true
	if r.HeartbeatIntervalMs > 0 {
		w.interval = time.Duration(r.HeartbeatIntervalMs) * time.Millisecond
	}
	w.sessionTimeout = time.Duration(r.SessionTimeoutMs) * time.Millisecond
	// A new session knows none of the worker's facts.
	w.sentNotice = nil
	clear(w.sentUpdates)
	w.log.Info().Uint64("generation", r.Generation).Dur("heartbeat_interval", w.interval).
		Dur("session_timeout", w.sessionTimeout).Msg("registered")
	return nil
}

// advance brings the simulation to now and logs what changed.
func (w *worker) advance() {
	now := time.Now()
	caughtUp, dropped := w.sim.Advance(now.Sub(w.lastAdvance))
	w.lastAdvance = now
	for _, t := range caughtUp {
		w.log.Info().Str("task", t).Str("role", w.sim.Role(t).String()).Msg("caught up")
	}
	for _, t := range dropped {
		w.log.Info().Str("task", t).Msg("dropped the state of a task no longer held")
	}
}

// noticeText is the NOTIFY text for a set of actives.
func noticeText(actives []string) string {
	if len(actives) == 0 {
		return "no actives"
	}
	s := "actives: " + strings.Join(actives, ",")
	if len(s) > maxNotice {
		s = s[:maxNotice-3] + "..."
	}
	return s
}

// updateText is the UPDATE text of an active task.
func (w *worker) updateText(task string) string {
	if lag, ok := w.sim.Lag(task); ok && lag == 0 {
		return "running"
	}
	return "restoring"
}

// request builds the heartbeat: every lag, and the facts the session has
// not acknowledged yet.
func (w *worker) request() *xcev1.HeartbeatRequest {
	req := &xcev1.HeartbeatRequest{WorkerId: w.cfg.ID, Lags: w.sim.Lags()}
	if n := noticeText(w.actives); w.sentNotice == nil || *w.sentNotice != n {
		req.Facts = append(req.Facts, &xcev1.Fact{Kind: xcev1.FactKind_FACT_KIND_NOTIFY, Text: n})
	}
	updates := 0
	for _, t := range w.actives {
		if u := w.updateText(t); w.sentUpdates[t] != u && updates < maxUpdates {
			req.Facts = append(req.Facts, &xcev1.Fact{Kind: xcev1.FactKind_FACT_KIND_UPDATE, TaskId: t, Text: u})
			updates++
		}
	}
	return req
}

// acked records the facts of a heartbeat the primary accepted.
func (w *worker) acked(req *xcev1.HeartbeatRequest) {
	for _, f := range req.Facts {
		switch f.Kind {
		case xcev1.FactKind_FACT_KIND_NOTIFY:
			n := f.Text
			w.sentNotice = &n
		case xcev1.FactKind_FACT_KIND_UPDATE:
			w.sentUpdates[f.TaskId] = f.Text
		}
	}
	// A task that is no longer active gets its update again if it returns.
	for t := range w.sentUpdates {
		if !slices.Contains(w.actives, t) {
			delete(w.sentUpdates, t)
		}
	}
}

func (w *worker) heartbeat(ctx context.Context, justRegistered bool) {
	w.advance()
	req := w.request()
	// Through an election the client retries for a while; past half a
	// session the next heartbeat starts over with fresher lags.
	timeout := max(w.interval, w.sessionTimeout/2)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	resp, err := w.c.Heartbeat(hctx, req)
	cancel()
	switch {
	case ctx.Err() != nil:
		return
	case errors.Is(err, client.ErrUnknownWorker):
		w.registered = false
		w.log.Info().Bool("just_registered", justRegistered).Msg("the primary has no session for this worker: registering again")
		return
	case err != nil:
		ev := w.log.Debug()
		if !w.failing {
			ev = w.log.Warn()
		}
		ev.Err(err).Msg("heartbeat failed")
		w.failing = true
		return
	}
	if w.failing {
		w.log.Info().Msg("heartbeats go through again")
		w.failing = false
	}
	w.apply(resp)
	w.acked(req)
}

// apply takes the copies of a heartbeat answer.
func (w *worker) apply(r *xcev1.HeartbeatResponse) {
	if r.HeartbeatIntervalMs > 0 {
		w.interval = time.Duration(r.HeartbeatIntervalMs) * time.Millisecond
	}
	same := w.known && r.Generation == w.gen && slices.Equal(r.Actives, w.actives) &&
		slices.Equal(r.Standbys, w.standbys) && slices.Equal(r.Warmups, w.warmups)
	if same {
		return
	}
	prev := w.gen
	w.known, w.gen = true, r.Generation
	w.actives, w.standbys, w.warmups = slices.Clone(r.Actives), slices.Clone(r.Standbys), slices.Clone(r.Warmups)
	w.sim.Assign(w.actives, w.standbys, w.warmups)
	w.log.Info().Uint64("generation", r.Generation).Uint64("previous_generation", prev).
		Strs("actives", nonNil(w.actives)).Strs("standbys", nonNil(w.standbys)).Strs("warmups", nonNil(w.warmups)).
		Interface("lags", w.sim.Lags()).Msg("assignment changed")
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
