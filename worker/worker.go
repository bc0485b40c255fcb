// Package worker is the worker library of xce. A worker process builds a
// Worker from a Config and a Handler and calls Run; the library registers
// with the controller's primary, heartbeats at the interval the controller
// gives, registers again when the primary has no session for it (after a
// controller failover), follows the leader through the client library, and
// runs every copy of a task the controller gives the worker in its own
// goroutine, through the Handler (docs/design.md, "Tasks, workers,
// assignments").
//
// At most one active per task: an active copy runs only while the primary
// grants it (HeartbeatResponse.actives) and while the worker's lease holds,
// that is while less than active_lease_ms has passed since the send time of
// its last acknowledged heartbeat, on the monotonic clock. The lease is
// shorter than the session timeout, so a worker cut off from the primary
// stops its actives before the primary may give them to another worker. The
// worker lists in HeartbeatRequest.running every active whose Run has not
// returned; the primary grants a moved active to its new worker only once
// the old one no longer lists it. Handlers call Fence right before every
// externally visible action.
//
// The reference worker of `xce worker` is the Simulator, a Handler that
// simulates the state of its copies (see Sim).
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/client"
	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
)

const (
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
	// Labels say where the worker runs (zone, rack, host, ...): the
	// assignor spreads the copies of a task over the values of its
	// assignor.spread_by keys. At most assign.MaxLabels, each key and value
	// as assign.ValidLabelKey and assign.ValidLabelValue allow; the primary
	// refuses a registration with others.
	Labels map[string]string
	// Logger receives the worker's log lines (nil: they are dropped). A
	// program that logs with zerolog passes logging.NewSlog of its logger
	// to have them in its own format.
	Logger *slog.Logger
	// HTTPClient carries the calls (nil: the client library's default).
	HTTPClient *http.Client
	// Credentials are what the worker presents: a worker certificate
	// (xce tls cert create --worker ID) or a token, and the CA its
	// controllers' certificates chain to (TLS when a file is named).
	Credentials client.Credentials
	// PinControllers keeps the worker on the Controllers addresses (a
	// proxy or port-forward to each controller): it does not switch to the
	// client addresses the cluster's members advertise (client.Options.Pinned).
	PinControllers bool
	// AttemptTimeout bounds one call to one controller (0: the client
	// library's default).
	AttemptTimeout time.Duration
	// DrainTimeout bounds how long Run, once its context ends, keeps the
	// worker's actives running while the primary hands them to other
	// workers; past it the worker stops them anyway and leaves (0: 30s;
	// negative: it stops at once, as a worker that is killed).
	DrainTimeout time.Duration
}

// DefaultDrainTimeout is Config.DrainTimeout's default.
const DefaultDrainTimeout = 30 * time.Second

var idRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ErrConfig wraps every configuration error of New.
var ErrConfig = errors.New("worker config")

func (cfg Config) validate() (Config, error) {
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
	if err := assign.CheckLabels(cfg.Labels); err != nil {
		return cfg, fmt.Errorf("%w: labels: %v", ErrConfig, err)
	}
	cfg.Labels = maps.Clone(cfg.Labels)
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	return cfg, nil
}

// Worker is one worker process's session with the controllers and the
// copies it runs. Build it with New; Run it once.
type Worker struct {
	cfg Config
	h   Handler
	c   *client.Client
	log *slog.Logger
	ran atomic.Bool

	// wake tells the supervisor that something changed (a heartbeat was
	// acknowledged, a copy's Run returned).
	wake chan struct{}
	// urgent tells the protocol loop to send a heartbeat now, abandoning
	// the one in flight: an active stopped (the primary may grant it
	// elsewhere once it knows), or the worker began to leave.
	urgent chan struct{}
	// returned is poked whenever a copy's Run returns.
	returned chan struct{}
	// life is the copies' and the protocol's lifetime: it outlasts Run's
	// context while a leaving worker hands its actives over.
	life context.Context

	// Leaving (docs/design.md, "Draining and leaving"). leaving: Run's
	// context ended and the worker hands its actives over; leaveNow: the
	// drain deadline passed and it stopped every active; left is closed
	// once the primary ended its session. handsOver: the primary holds
	// heartbeats and hands a leaving worker's actives over.
	leaving   atomic.Bool
	leaveNow  atomic.Bool
	left      chan struct{}
	leftOnce  sync.Once
	handsOver atomic.Bool

	// The protocol loop's own state.
	registered bool
	// seq numbers the worker's heartbeats (under mu), across
	// registrations, so the primary never processes one after a later one.
	seq            uint64
	interval       time.Duration
	sessionTimeout time.Duration
	sentNotice     *string           // facts the current session has acknowledged
	sentUpdates    map[string]string // task → UPDATE text
	failing        bool              // a heartbeat failed: log the outage once
	// maxWait is how long the primary may hold a heartbeat (0: it does
	// not); ackSeq is the seq of the last answer acted on in this session.
	maxWait time.Duration
	ackSeq  uint64

	mu sync.Mutex
	st state
}

// New checks cfg and returns a worker that runs h's copies. It returns an
// error wrapping ErrConfig for a bad Config.
func New(cfg Config, h Handler) (*Worker, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: no handler", ErrConfig)
	}
	c, err := client.New(cfg.Controllers, client.Options{HTTPClient: cfg.HTTPClient, AttemptTimeout: cfg.AttemptTimeout,
		Credentials: cfg.Credentials, Pinned: cfg.PinControllers})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return &Worker{
		cfg: cfg, h: h, c: c,
		log:         orDiscard(cfg.Logger).With("worker_id", cfg.ID),
		wake:        make(chan struct{}, 1),
		urgent:      make(chan struct{}, 1),
		returned:    make(chan struct{}, 1),
		left:        make(chan struct{}),
		interval:    defaultInterval,
		sentUpdates: map[string]string{},
		st:          newState(),
	}, nil
}

// Run runs the worker until ctx ends; it returns nil then. When ctx ends
// the worker leaves: it tells the primary, keeps its actives running until
// the primary has handed each to another worker (stopping each when told
// and saying so at once), and returns once the primary has ended its
// session, or once Config.DrainTimeout has passed (it then stops its
// actives, tells the primary it leaves now, and returns). It returns an
// error only when the controller refuses the registration's arguments or
// the worker's credentials (Unauthenticated, PermissionDenied, a
// certificate refused at the handshake), or when called a second time.
// Every copy's Run has returned, and every goroutine Run started has
// stopped, when it returns.
func (w *Worker) Run(ctx context.Context) error {
	if w.ran.Swap(true) {
		return errors.New("worker: Run called twice")
	}
	defer w.c.Close()
	w.log.Info("worker starting", "controllers", w.cfg.Controllers, "capacity", w.cfg.Capacity)
	life, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	w.life = life
	perr := make(chan error, 1)
	go func() { perr <- w.protocol(life) }()
	err, protocolDone := w.supervise(ctx, perr)
	stop()
	if !protocolDone {
		<-perr
	}
	if err != nil {
		return err
	}
	w.log.Info("worker stopped")
	return nil
}

// poke wakes the supervisor.
func (w *Worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// urge asks the protocol loop for a heartbeat now.
func (w *Worker) urge() {
	select {
	case w.urgent <- struct{}{}:
	default:
	}
}

// protocol registers and heartbeats until ctx ends or the primary ended
// the session of the leaving worker (nil), or the controller refuses the
// worker (the error). With a primary that holds heartbeats, the next one
// goes as soon as the last is answered; otherwise every interval.
func (w *Worker) protocol(ctx context.Context) error {
	retry := backoff.Backoff{Min: time.Second, Max: 10 * time.Second}
	for {
		justRegistered := false
		if !w.registered {
			err := w.register(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, client.ErrInvalid), refused(err):
				return fmt.Errorf("register: %w", err)
			case err != nil:
				wait := retry.Next()
				w.log.Warn("register failed", errAttr(err), "retry_in", wait)
				if !backoff.Sleep(ctx, wait) {
					return nil
				}
				continue
			}
			retry.Reset()
			justRegistered = true
		}
		start := time.Now()
		answered, held, urgent := w.heartbeat(ctx, justRegistered)
		select {
		case <-ctx.Done():
			return nil
		case <-w.left:
			return nil
		default:
		}
		if answered {
			w.settle(ctx, w.interval)
		}
		switch {
		case !w.registered && !justRegistered:
			continue // register again at once
		case urgent, answered && held:
			continue
		}
		t := time.NewTimer(w.interval - time.Since(start))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-w.urgent:
		case <-t.C:
		}
		t.Stop()
	}
}

// refused reports a registration the controller turned down for who the
// worker is (its token or certificate): trying again would not change it.
func refused(err error) bool {
	return errors.Is(err, client.ErrUnauthenticated) || errors.Is(err, client.ErrPermissionDenied) ||
		errors.Is(err, client.ErrBadCertificate)
}

func (w *Worker) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	r, err := w.c.RegisterWith(rctx, &xcev1.RegisterRequest{WorkerId: w.cfg.ID, Capacity: w.cfg.Capacity,
		ClientAddr: w.cfg.ClientAddr, Labels: w.cfg.Labels})
	if err != nil {
		return err
	}
	w.registered = true
	if r.HeartbeatIntervalMs > 0 {
		w.interval = time.Duration(r.HeartbeatIntervalMs) * time.Millisecond
	}
	w.sessionTimeout = time.Duration(r.SessionTimeoutMs) * time.Millisecond
	w.maxWait = time.Duration(r.MaxWaitMs) * time.Millisecond
	w.handsOver.Store(w.maxWait > 0)
	// A new session knows none of the worker's facts, nor its answers.
	w.sentNotice = nil
	clear(w.sentUpdates)
	w.ackSeq = 0
	w.log.Info("registered", "generation", r.Generation, "heartbeat_interval", w.interval,
		"session_timeout", w.sessionTimeout, "max_wait", w.maxWait)
	return nil
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

// updateText is the UPDATE text of an active task: "running" once it has
// caught up (lag 0), "restoring" before.
func updateText(lags map[string]int64, task string) string {
	if lag, ok := lags[task]; ok && lag == 0 {
		return "running"
	}
	return "restoring"
}

// request builds the heartbeat: every lag, the actives whose Run has not
// returned, the facts the session has not acknowledged yet, whether the
// worker leaves, and how long the primary may hold it. From here until the
// answer, the worker starts no active it does not list as running
// (state.sent).
func (w *Worker) request() *xcev1.HeartbeatRequest {
	var lags, loads map[string]int64
	if l, ok := w.h.(Lagger); ok {
		lags = l.Lags()
	}
	if l, ok := w.h.(Loader); ok {
		loads = l.Loads()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if lags == nil {
		lags = w.st.reportedLags()
	}
	w.seq++
	req := &xcev1.HeartbeatRequest{WorkerId: w.cfg.ID, Lags: lags, Loads: loads, Running: w.st.sent(), Seq: w.seq,
		AcknowledgedSeq: w.ackSeq, Leaving: w.leaving.Load(), LeaveNow: w.leaveNow.Load()}
	if w.maxWait > 0 && !req.LeaveNow {
		req.WaitMs = uint32(min(w.maxWait, w.interval).Milliseconds())
	}
	actives := w.st.resp.actives
	if n := noticeText(actives); w.sentNotice == nil || *w.sentNotice != n {
		req.Facts = append(req.Facts, &xcev1.Fact{Kind: xcev1.FactKind_FACT_KIND_NOTIFY, Text: n})
	}
	updates := 0
	for _, t := range actives {
		if u := updateText(lags, t); w.sentUpdates[t] != u && updates < maxUpdates {
			req.Facts = append(req.Facts, &xcev1.Fact{Kind: xcev1.FactKind_FACT_KIND_UPDATE, TaskId: t, Text: u})
			updates++
		}
	}
	return req
}

// acked records the facts of a heartbeat the primary accepted.
func (w *Worker) acked(req *xcev1.HeartbeatRequest, actives []string) {
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
	if len(w.sentUpdates) == 0 {
		return
	}
	active := make(map[string]struct{}, len(actives))
	for _, t := range actives {
		active[t] = struct{}{}
	}
	for t := range w.sentUpdates {
		if _, ok := active[t]; !ok {
			delete(w.sentUpdates, t)
		}
	}
}

// heartbeat sends one heartbeat and takes its answer. It reports whether
// the primary answered, whether the heartbeat asked to be held (the next
// may then go at once: the primary paces them), and whether something
// urgent (urge) happened while it waited: it then abandoned the heartbeat,
// or took its answer, and the next one should go at once.
func (w *Worker) heartbeat(ctx context.Context, justRegistered bool) (answered, held, urgent bool) {
	// What was urgent before the request is built is in it.
	select {
	case <-w.urgent:
	default:
	}
	req := w.request()
	held = req.WaitMs > 0
	// The lease counts from before the call: the primary hears the
	// heartbeat no earlier, whichever attempt of the client's retries
	// reaches it.
	sent := time.Now()
	// Through an election the client retries for a while; past half a
	// session the next heartbeat starts over with fresher lags. A held
	// heartbeat may take its wait on top.
	timeout := max(w.interval, w.sessionTimeout/2) + time.Duration(req.WaitMs)*time.Millisecond
	hctx, cancel := context.WithTimeout(ctx, timeout)
	var abandoned atomic.Bool
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-w.urgent:
			abandoned.Store(true)
			cancel()
		case <-done:
		}
	}()
	resp, err := w.c.Heartbeat(hctx, req)
	close(done)
	<-watched
	cancel()
	urgent = abandoned.Load()
	switch {
	case ctx.Err() != nil:
		return false, held, urgent
	case err != nil && urgent:
		return false, held, true // abandoned for a newer heartbeat
	case errors.Is(err, client.ErrUnknownWorker):
		w.registered = false
		w.log.Info("the primary has no session for this worker: registering again", "just_registered", justRegistered)
		return false, held, urgent
	case err != nil:
		// The first failure of an outage is a warning; the rest, debug.
		level := slog.LevelDebug
		if !w.failing {
			level = slog.LevelWarn
		}
		w.log.LogAttrs(ctx, level, "heartbeat failed", errAttr(err))
		w.failing = true
		return false, held, urgent
	}
	if w.failing {
		w.log.Info("heartbeats go through again")
		w.failing = false
	}
	w.take(req, resp, sent)
	return true, held, urgent
}

// take acts on an answer: it records the copies and the lease and, before
// the next heartbeat is built, starts the granted actives (so that the
// next heartbeat lists them as running and keeps their grants).
func (w *Worker) take(req *xcev1.HeartbeatRequest, resp *xcev1.HeartbeatResponse, sent time.Time) {
	if resp.HeartbeatIntervalMs > 0 {
		w.interval = time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond
	}
	w.ackSeq = req.Seq
	if resp.Left {
		w.log.Info("the primary ended this worker's session: it has handed every active over")
		w.leftOnce.Do(func() { close(w.left) })
		w.poke()
		return
	}
	// Without a lease from the primary the session timeout bounds it.
	lease := time.Duration(resp.ActiveLeaseMs) * time.Millisecond
	if lease <= 0 {
		lease = w.sessionTimeout
	}
	w.mu.Lock()
	changed, prev := w.st.ack(resp, sent, lease)
	w.mu.Unlock()
	w.acked(req, resp.Actives)
	if changed {
		w.log.Info("assignment changed", "generation", resp.Generation, "previous_generation", prev,
			"actives", nonNil(resp.Actives), "pending_actives", nonNil(resp.PendingActives),
			"standbys", nonNil(resp.Standbys), "warmups", nonNil(resp.Warmups),
			slog.Any("epochs", resp.Epochs), "drained", resp.Drained)
	}
	w.reconcile(time.Now())
	w.poke()
}

// orDiscard is l, or a logger that drops every line when l is nil.
func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// errAttr is err under the key "error", or nothing when err is nil.
func errAttr(err error) slog.Attr {
	if err == nil {
		return slog.Attr{}
	}
	return slog.Any("error", err)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
