// Package client is the Go client of the xce API: the ControllerService
// (tasks, the assignment, the worker list) and the WorkerService (Register,
// Heartbeat) that workers use. Every call follows the leader hint of a
// NOT_READY answer, otherwise backs off by the server's retry-after plus
// jitter and rotates endpoints, until the caller's deadline. Writes carry a
// client id and a request id, kept across retries, so a retry is never
// applied twice. Calls go over TLS and carry a bearer token as Options and
// Credentials say; Unauthenticated, PermissionDenied and a certificate
// refused at the handshake are final answers, never retried. The client
// follows the cluster's membership: every Status it reads names the
// members' client addresses, which replace the endpoints it was given.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// Errors of the client. Test them with errors.Is.
var (
	// ErrNotReady: no node could serve the call before the deadline. The
	// error is a *NotReadyError carrying the last NOT_READY detail.
	ErrNotReady = errors.New("not ready")
	// ErrNotFound: the task does not exist.
	ErrNotFound = errors.New("not found")
	// ErrAlreadyExists: a task with the id exists (created by another request).
	ErrAlreadyExists = errors.New("already exists")
	// ErrInvalid: the server refused the arguments.
	ErrInvalid = errors.New("invalid argument")
	// ErrNoEndpoints: New was given no address.
	ErrNoEndpoints = errors.New("no endpoints")
	// ErrUnknownWorker: the primary has no session for the worker (a
	// heartbeat after a controller failover, or after the session expired);
	// the worker must Register again.
	ErrUnknownWorker = errors.New("unknown worker: register again")
	// ErrUnauthenticated: the node could not tell who called (no
	// credentials, or none it accepts). Not retried.
	ErrUnauthenticated = errors.New("Unauthenticated")
	// ErrPermissionDenied: the caller's roles do not allow the call; the
	// message names the missing permission. Not retried.
	ErrPermissionDenied = errors.New("PermissionDenied")
	// ErrBadCertificate: a TLS handshake failed on a certificate (the
	// node's does not verify, or the node refused the client's). Not
	// retried.
	ErrBadCertificate = errors.New("bad certificate")
	// ErrPlaintextToTLS: a cleartext call reached a client port that speaks
	// TLS (the node answers such a call with 400 Bad Request); the client
	// needs a CA file to call it over TLS. Not retried.
	ErrPlaintextToTLS = errors.New("plaintext call to a TLS port")
)

// NotReadyError is returned when the deadline passed while nodes answered
// NOT_READY (or could not be reached).
type NotReadyError struct {
	// Last is the last NOT_READY detail seen; nil when no node answered.
	Last *xcev1.NotReady
	// Err is the last underlying error.
	Err error
	// lastErr is the last attempt's error when it was not a NOT_READY answer.
	lastErr error
}

func (e *NotReadyError) Error() string {
	if e.Last != nil {
		msg := fmt.Sprintf("not ready: %s (role %s, term %d)", e.Last.Reason, roleName(e.Last.Role), e.Last.Term)
		if e.lastErr != nil {
			// The last attempt failed otherwise (a timeout, a dead node):
			// say so, or the NOT_READY detail would hide it.
			msg += "; last attempt: " + e.lastErr.Error()
		}
		return msg
	}
	return fmt.Sprintf("not ready: no node answered: %v", e.Err)
}

func (e *NotReadyError) Is(target error) bool { return target == ErrNotReady }
func (e *NotReadyError) Unwrap() error        { return e.Err }

func roleName(r xcev1.Role) string { return strings.TrimPrefix(r.String(), "ROLE_") }

// Options tune a Client.
type Options struct {
	// HTTPClient carries the calls; nil uses NewHTTPClient(TLS). With TLS
	// set, a given HTTPClient must carry https (NewHTTPClient(TLS) does).
	HTTPClient *http.Client
	// TLS, when set, makes the calls over TLS with this configuration;
	// nil takes Credentials.TLSConfig() (plaintext when it names no file).
	TLS *tls.Config
	// Credentials are the client's files and bearer token; the token is
	// sent as "Authorization: Bearer …" on every call.
	Credentials Credentials
	// ClientID names this client in the servers' dedup table; nil picks a
	// random one.
	ClientID string
	// AttemptTimeout bounds one attempt, so a hung node costs at most this
	// before the client moves on. Default 2s.
	AttemptTimeout time.Duration
	// MaxBackoff caps the wait between attempts. Default 1s.
	MaxBackoff time.Duration
	// OnRetry, when set, is called before every retry with the NOT_READY
	// detail (nil for a transport error) and the error.
	OnRetry func(nr *xcev1.NotReady, err error)
	// RefreshInterval is how often, while calls are made, the client asks
	// a node for the cluster's members (a Status call, in the background)
	// to follow members added and removed; after a NOT_READY answer or an
	// unreachable node it asks again after at most a second. Default 30s;
	// negative: only the caller's Status calls teach it the members.
	RefreshInterval time.Duration
	// Pinned keeps the client on the endpoints it was given: it learns no
	// members and follows a leader hint only to one of them (it tries the
	// others in turn instead). For clients that reach the cluster through
	// proxies, port-forwards or a load balancer, whose addresses the
	// members' own do not name.
	Pinned bool
	// ConnectOptions are more options for the RPC library's clients (a
	// codec of the caller's, say).
	ConnectOptions []connect.ClientOption
}

// minRefresh spaces the member refreshes a failing call asks for.
const minRefresh = time.Second

// Client talks to a cluster. It is safe for concurrent use; Close stops
// its background member refresh.
type Client struct {
	opts    Options
	http    *http.Client
	scheme  string // "http://" or "https://"
	connect []connect.ClientOption
	seq     atomic.Uint64

	// stop ends a running member refresh; refreshes counts them.
	stop      context.Context
	cancel    context.CancelFunc
	refreshes sync.WaitGroup

	mu sync.Mutex
	// endpoints are the members' client addresses once a Status named
	// them, the given addresses until then.
	endpoints []string
	current   string
	// refreshing: a member refresh or warming runs; sched says when the
	// next are due.
	refreshing bool
	closed     bool
	sched      schedule
	svcs       map[string]xcev1connect.ControllerServiceClient
	wsvcs      map[string]xcev1connect.WorkerServiceClient
	// warmer is the HTTP client's transport when it can warm connections.
	warmer warmer
}

// New returns a client for the given HOST:PORT endpoints.
func New(endpoints []string, opts Options) (*Client, error) {
	var eps []string
	for _, e := range endpoints {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, ErrNoEndpoints
	}
	if opts.TLS == nil {
		cfg, err := opts.Credentials.TLSConfig()
		if err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
		opts.TLS = cfg
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = NewHTTPClient(opts.TLS)
	}
	scheme := "http://"
	if opts.TLS != nil {
		scheme = "https://"
	}
	copts := slices.Clone(opts.ConnectOptions)
	if opts.Credentials.Token != "" {
		copts = append(copts, connect.WithInterceptors(bearer{header: "Bearer " + opts.Credentials.Token}))
	}
	if opts.ClientID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.ClientID = "c-" + hex.EncodeToString(b[:])
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 2 * time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = time.Second
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = 30 * time.Second
	}
	stop, cancel := context.WithCancel(context.Background())
	w, _ := opts.HTTPClient.Transport.(warmer)
	return &Client{
		warmer:    w,
		endpoints: eps, opts: opts, http: opts.HTTPClient, current: eps[0], scheme: scheme, connect: copts,
		stop: stop, cancel: cancel,
		svcs:  make(map[string]xcev1connect.ControllerServiceClient),
		wsvcs: make(map[string]xcev1connect.WorkerServiceClient),
	}, nil
}

// Close stops the background member refresh, waits for it, and closes the
// idle connections. Calls made after Close still work, without refresh.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.refreshes.Wait()
	c.http.CloseIdleConnections()
}

// learn replaces the endpoints with the client addresses of members, keeping
// the order of those already known and appending new ones. A list that
// names no client address teaches nothing: the client never drops to no
// endpoint.
func (c *Client) learn(members []*xcev1.Member) {
	if c.opts.Pinned {
		return
	}
	var addrs []string
	seen := map[string]bool{}
	for _, m := range members {
		if a := strings.TrimSpace(m.GetClientAddr()); a != "" && !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	eps := make([]string, 0, len(addrs))
	kept := map[string]bool{}
	for _, e := range c.endpoints {
		if seen[e] {
			eps = append(eps, e)
			kept[e] = true
		}
	}
	for _, a := range addrs {
		if !kept[a] {
			eps = append(eps, a)
		}
	}
	for _, e := range c.endpoints {
		if !seen[e] {
			// A member that is gone: its stubs go too.
			delete(c.svcs, e)
			delete(c.wsvcs, e)
		}
	}
	c.endpoints = eps
	if !seen[c.current] {
		c.current = eps[0]
	}
}

// maybeRefresh starts a background member refresh when one is due: every
// RefreshInterval while calls are made, or after minRefresh when a call
// failed (urgent), since a failing node may be one that left. Every
// warmEvery while calls are made, from warmEvery after the first call, the
// same goroutine warms the connections to the members (warm).
func (c *Client) maybeRefresh(urgent bool) {
	if c.opts.RefreshInterval < 0 {
		return
	}
	every := c.opts.RefreshInterval
	if urgent {
		every = min(every, minRefresh)
	}
	c.mu.Lock()
	if c.closed || c.refreshing {
		c.mu.Unlock()
		return
	}
	refresh, warm := c.sched.due(time.Now(), every, c.warmer != nil)
	if !refresh && !warm {
		c.mu.Unlock()
		return
	}
	c.refreshing = true
	first := c.current
	c.mu.Unlock()
	c.refreshes.Go(func() {
		defer func() {
			c.mu.Lock()
			c.refreshing = false
			c.mu.Unlock()
		}()
		if refresh && !c.refresh(first) {
			return
		}
		if warm {
			c.warm()
		}
	})
}

// warmEvery spaces the client's warmings (warm).
const warmEvery = time.Second

// schedule is when the background work of a client's calls last began.
type schedule struct {
	lastRefresh time.Time // zero: none yet
	lastWarm    time.Time // the first call until the first warming
}

// due says what a call at now starts in the background, and records it: a
// member refresh at the first call and every after the last, a warming
// (when the transport can warm) warmEvery after the last, the first one
// warmEvery after the first call. A client that makes its calls and exits
// within that (the CLI) thus opens no connection it never uses, which its
// exit would cut in the middle of the TLS handshake.
func (s *schedule) due(now time.Time, every time.Duration, warmer bool) (refresh, warm bool) {
	if s.lastWarm.IsZero() {
		s.lastWarm = now
	}
	refresh = s.lastRefresh.IsZero() || now.Sub(s.lastRefresh) >= every
	warm = warmer && now.Sub(s.lastWarm) >= warmEvery
	if refresh {
		s.lastRefresh = now
	}
	if warm {
		s.lastWarm = now
	}
	return refresh, warm
}

// refresh asks one endpoint after another, from first, for its Status
// until one answers (Status learns the members it names), and reports
// whether one did.
func (c *Client) refresh(first string) bool {
	ep := first
	for range c.Endpoints() {
		ctx, cancel := context.WithTimeout(c.stop, c.opts.AttemptTimeout)
		_, err := c.Status(ctx, ep)
		cancel()
		if err == nil {
			return true
		}
		if c.stop.Err() != nil {
			return false
		}
		ep = c.next(ep)
	}
	return false
}

// warmer is a transport that can hold connections open to nodes no call
// uses yet (transport.Transport).
type warmer interface {
	Warm(ctx context.Context, addrs []string, useTLS bool) error
}

// warm has the transport hold as many connections open to every member as
// the client's calls had in flight at once to one node, so that a
// failover finds them made (docs/design.md, "Identities, TLS and
// permissions").
func (c *Client) warm() {
	ctx, cancel := context.WithTimeout(c.stop, 4*c.opts.AttemptTimeout)
	defer cancel()
	_ = c.warmer.Warm(ctx, c.Endpoints(), c.scheme == "https://")
}

// ClientID is the id the client writes under.
func (c *Client) ClientID() string { return c.opts.ClientID }

// NewRequestID returns a fresh request id for a write.
func (c *Client) NewRequestID() string {
	return strconv.FormatUint(c.seq.Add(1), 36) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

func (c *Client) svc(ep string) xcev1connect.ControllerServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.svcs[ep]
	if !ok {
		s = xcev1connect.NewControllerServiceClient(c.http, c.scheme+ep, c.connect...)
		c.svcs[ep] = s
	}
	return s
}

func (c *Client) workerSvc(ep string) xcev1connect.WorkerServiceClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.wsvcs[ep]
	if !ok {
		s = xcev1connect.NewWorkerServiceClient(c.http, c.scheme+ep, c.connect...)
		c.wsvcs[ep] = s
	}
	return s
}

func (c *Client) cur() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current
}

func (c *Client) setCur(ep string) {
	c.mu.Lock()
	c.current = ep
	c.mu.Unlock()
}

// next returns the endpoint after ep in the list (the first if ep is not in it).
func (c *Client) next(ep string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.endpoints {
		if e == ep {
			return c.endpoints[(i+1)%len(c.endpoints)]
		}
	}
	return c.endpoints[0]
}

// NotReadyOf returns the NOT_READY detail of err, if it carries one.
func NotReadyOf(err error) (*xcev1.NotReady, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		return nil, false
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if nr, ok := v.(*xcev1.NotReady); ok {
				return nr, true
			}
		}
	}
	return nil, false
}

// do runs call on the ControllerService until it succeeds, fails for good,
// or ctx ends.
func (c *Client) do(ctx context.Context, call func(ctx context.Context, s xcev1connect.ControllerServiceClient) error) error {
	return retry(ctx, c, c.svc, call)
}

// doWorker is do for the WorkerService: the same endpoints, leader
// following and retry.
func (c *Client) doWorker(ctx context.Context, call func(ctx context.Context, s xcev1connect.WorkerServiceClient) error) error {
	return retry(ctx, c, c.workerSvc, call)
}

// holdKey carries, in a call's context, how long the server may hold each
// attempt beyond the attempt timeout.
type holdKey struct{}

// retry runs call on the stub of one endpoint after another until it
// succeeds, fails for good, or ctx ends: it follows a NOT_READY answer's
// leader hint at once (at most three hops in a row), otherwise waits the
// server's retry-after (with jitter) and moves to the next endpoint; a
// node that does not answer costs at most one attempt timeout. Every
// service of the API shares it, and the endpoint that last served. The
// background work a call is due (maybeRefresh) starts once it returns, on
// the connection it leaves idle, rather than beside it on one more: a
// client that exits after its call would cut that one in its handshake. A
// failing attempt starts it at once.
func retry[S any](ctx context.Context, c *Client, stub func(ep string) S, call func(ctx context.Context, s S) error) error {
	defer c.maybeRefresh(false)
	ep := c.cur()
	var last *xcev1.NotReady
	var lastErr error
	hops := 0
	// A node that does not answer: the next one is tried soon, backing off
	// exponentially only while none answers.
	unanswered := backoff.Backoff{Min: 20 * time.Millisecond, Max: 640 * time.Millisecond}
	extra, _ := ctx.Value(holdKey{}).(time.Duration)
	for {
		actx, cancel := context.WithTimeout(ctx, c.opts.AttemptTimeout+extra)
		err := call(actx, stub(ep))
		cancel()
		if err == nil {
			c.setCur(ep)
			return nil
		}
		lastErr = err
		nr, isNotReady := NotReadyOf(err)
		if isNotReady {
			last = nr
		}
		if ctx.Err() != nil {
			// The caller gave up: no retry follows, so none is reported.
			return giveUp(ctx, last, lastErr)
		}
		var wait time.Duration
		if isNotReady || retryable(ctx, err) && !badCertificate(err) {
			c.maybeRefresh(true)
		}
		if isNotReady {
			unanswered.Reset()
			if nr.LeaderAddr != "" && nr.LeaderAddr != ep && hops < 3 && c.mayDial(nr.LeaderAddr) {
				// Follow the hint at once; a few hops at most before
				// backing off, in case hints disagree mid-election.
				hops++
				ep = nr.LeaderAddr
				if c.opts.OnRetry != nil {
					c.opts.OnRetry(nr, err)
				}
				continue
			}
			hops = 0
			// The server's own estimate (about one election): trusted
			// as is, so a client notices the new primary within one hint of
			// its election rather than after a growing backoff.
			wait = max(time.Duration(nr.RetryAfterMs)*time.Millisecond, 10*time.Millisecond)
			ep = c.next(ep)
		} else if retryable(ctx, err) && !badCertificate(err) {
			hops = 0
			wait = unanswered.Next()
			ep = c.next(ep)
		} else {
			// An answer (not found, refused, …) from a node that served
			// the call: the next call starts there too.
			c.setCur(ep)
			return mapErr(err)
		}
		wait = min(wait, c.opts.MaxBackoff)
		wait += time.Duration(mrand.Int64N(int64(wait)/2 + int64(5*time.Millisecond)))
		if !backoff.Sleep(ctx, wait) {
			return giveUp(ctx, last, lastErr)
		}
		// Reported once the retry is sure to happen: a caller whose
		// context ends during the wait (or whose deadline the server
		// enforced first) sees no retry that never came.
		if c.opts.OnRetry != nil {
			c.opts.OnRetry(last, err)
		}
	}
}

// retryable reports whether err is a transport failure (or an attempt
// timeout) worth another endpoint, as opposed to an answer.
// giveUp is retry's error once the caller's context is done: NOT_READY with
// the last NOT_READY detail seen, the context's error and the last error.
func giveUp(ctx context.Context, last *xcev1.NotReady, lastErr error) error {
	e := &NotReadyError{Last: last, Err: errors.Join(ctx.Err(), lastErr)}
	if _, ok := NotReadyOf(lastErr); !ok && last != nil {
		e.lastErr = lastErr
	}
	return e
}

func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return true // the loop returns NotReadyError at its select
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled, connect.CodeUnknown, connect.CodeAborted:
		return true
	}
	return false
}

func mapErr(err error) error {
	if r := refusal(err); r != nil {
		return r
	}
	if badCertificate(err) {
		return fmt.Errorf("%w: %v", ErrBadCertificate, err)
	}
	if plaintextToTLS(err) {
		return plaintextErr(err)
	}
	switch connect.CodeOf(err) {
	case connect.CodeNotFound:
		return fmt.Errorf("%w: %v", ErrNotFound, connectMsg(err))
	case connect.CodeAlreadyExists:
		return fmt.Errorf("%w: %v", ErrAlreadyExists, connectMsg(err))
	case connect.CodeInvalidArgument:
		return fmt.Errorf("%w: %v", ErrInvalid, connectMsg(err))
	}
	return err
}

// plaintextToTLS reports whether err is a node's TLS client port refusing
// a cleartext call: a bare HTTP 400 that carries no RPC error of its own
// (docs/operations.md, "TLS and permissions on the client port").
func plaintextToTLS(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && !connect.IsWireError(ce) &&
		ce.Code() == connect.CodeInternal && ce.Message() == "400 Bad Request"
}

func plaintextErr(err error) error {
	return fmt.Errorf("%w: the node's client port requires TLS (HTTP request to an HTTPS server, answered %q): "+
		"call it over TLS with the cluster's CA file (--ca-file or XCE_CA_FILE)", ErrPlaintextToTLS, connectMsg(err))
}

func connectMsg(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return err.Error()
}

// Task is what Submit creates.
type Task struct {
	ID              string
	Stateful        bool
	StandbyReplicas uint32
	// Weight is what the task costs relative to others, 1 to 65536 (0:
	// 1). A weight above 1 is refused as ErrFailedPrecondition until every
	// voter runs a binary that stores weights.
	Weight uint32
}

// Submit creates a task. Retries reuse one request id.
func (c *Client) Submit(ctx context.Context, t Task) (*xcev1.SubmitTaskResponse, error) {
	return c.SubmitWithID(ctx, t, c.NewRequestID())
}

// SubmitWithID is Submit with a caller-chosen request id.
func (c *Client) SubmitWithID(ctx context.Context, t Task, requestID string) (*xcev1.SubmitTaskResponse, error) {
	req := &xcev1.SubmitTaskRequest{TaskId: t.ID, Stateful: t.Stateful, StandbyReplicas: t.StandbyReplicas,
		Weight: t.Weight, ClientId: c.opts.ClientID, RequestId: requestID}
	var out *xcev1.SubmitTaskResponse
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		r, err := s.SubmitTask(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, preconditionErr(err)
}

// Delete removes a task.
func (c *Client) Delete(ctx context.Context, id string) (*xcev1.DeleteTaskResponse, error) {
	req := &xcev1.DeleteTaskRequest{TaskId: id, ClientId: c.opts.ClientID, RequestId: c.NewRequestID()}
	var out *xcev1.DeleteTaskResponse
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		r, err := s.DeleteTask(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, err
}

func consistency(stale bool) xcev1.Consistency {
	if stale {
		return xcev1.Consistency_CONSISTENCY_STALE
	}
	return xcev1.Consistency_CONSISTENCY_LINEARIZABLE
}

// Get reads a task; stale reads may be served by a STANDBY.
func (c *Client) Get(ctx context.Context, id string, stale bool) (*xcev1.GetTaskResponse, error) {
	req := &xcev1.GetTaskRequest{TaskId: id, Consistency: consistency(stale)}
	var out *xcev1.GetTaskResponse
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		r, err := s.GetTask(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, err
}

// List returns every task, page by page.
func (c *Client) List(ctx context.Context, stale bool) ([]*xcev1.Task, error) {
	var all []*xcev1.Task
	token := ""
	for {
		req := &xcev1.ListTasksRequest{Consistency: consistency(stale), PageSize: 1000, PageToken: token}
		var page *xcev1.ListTasksResponse
		err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
			r, err := s.ListTasks(ctx, connect.NewRequest(req))
			if err == nil {
				page = r.Msg
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, page.Tasks...)
		if page.NextPageToken == "" {
			return all, nil
		}
		token = page.NextPageToken
	}
}

// GetAssignment reads the committed assignment. The primary adds what it
// knows beyond the log (lags, pending reasons, updates, settling); a stale
// read may be served by a STANDBY, without them.
func (c *Client) GetAssignment(ctx context.Context, stale bool) (*xcev1.GetAssignmentResponse, error) {
	req := &xcev1.GetAssignmentRequest{Consistency: consistency(stale)}
	var out *xcev1.GetAssignmentResponse
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		r, err := s.GetAssignment(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, err
}

// ListWorkers lists the primary's worker sessions (only the primary has
// them: the call follows the leader).
func (c *Client) ListWorkers(ctx context.Context) (*xcev1.ListWorkersResponse, error) {
	var out *xcev1.ListWorkersResponse
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		r, err := s.ListWorkers(ctx, connect.NewRequest(&xcev1.ListWorkersRequest{}))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, err
}

// Register opens (or renews) the session of worker id with the primary.
// capacity is its relative weight (0 drains it); addr is where it serves
// its own clients (informational).
func (c *Client) Register(ctx context.Context, id string, capacity uint32, addr string) (*xcev1.RegisterResponse, error) {
	return c.RegisterWith(ctx, &xcev1.RegisterRequest{WorkerId: id, Capacity: capacity, ClientAddr: addr})
}

// RegisterWith is Register with every field of the request (the worker's
// labels too).
func (c *Client) RegisterWith(ctx context.Context, req *xcev1.RegisterRequest) (*xcev1.RegisterResponse, error) {
	var out *xcev1.RegisterResponse
	err := c.doWorker(ctx, func(ctx context.Context, s xcev1connect.WorkerServiceClient) error {
		r, err := s.Register(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, err
}

// Heartbeat renews the worker's session with its lags and facts and
// returns its copies in the committed assignment. ErrUnknownWorker means
// the primary has no session for it: Register, then heartbeat again.
//
// A heartbeat that asks the primary to hold it (wait_ms) gets that much
// more than the attempt timeout for each attempt.
func (c *Client) Heartbeat(ctx context.Context, req *xcev1.HeartbeatRequest) (*xcev1.HeartbeatResponse, error) {
	if req.WaitMs > 0 {
		ctx = context.WithValue(ctx, holdKey{}, time.Duration(req.WaitMs)*time.Millisecond)
	}
	var out *xcev1.HeartbeatResponse
	err := c.doWorker(ctx, func(ctx context.Context, s xcev1connect.WorkerServiceClient) error {
		r, err := s.Heartbeat(ctx, connect.NewRequest(req))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return nil, fmt.Errorf("%w: %v", ErrUnknownWorker, connectMsg(err))
	}
	return out, err
}

// Status asks one endpoint for its status, without retry: status answers in
// every role, so a failure means the node is unreachable. The members it
// names become the client's endpoints.
func (c *Client) Status(ctx context.Context, endpoint string) (*xcev1.StatusResponse, error) {
	r, err := c.svc(endpoint).Status(ctx, connect.NewRequest(&xcev1.StatusRequest{}))
	if err != nil {
		if r := refusal(err); r != nil {
			return nil, r
		}
		if badCertificate(err) {
			return nil, fmt.Errorf("%w: %v", ErrBadCertificate, err)
		}
		if plaintextToTLS(err) {
			return nil, plaintextErr(err)
		}
		return nil, err
	}
	c.learn(r.Msg.GetMembers())
	return r.Msg, nil
}

// mayDial reports whether the client may call addr: any address unless
// Pinned, then only the ones it was given.
func (c *Client) mayDial(addr string) bool {
	if !c.opts.Pinned {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Contains(c.endpoints, addr)
}

// Endpoints are the addresses the client calls: the members' client
// addresses once a Status named them, the given ones until then.
func (c *Client) Endpoints() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.endpoints...)
}

// CloseIdleConnections closes the idle connections of the client's HTTP
// client (and the goroutines that keep them), for a caller that is done.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// DrainWorker drains worker id: the primary moves its actives to other
// workers, each once a copy there has caught up, and gives it no new copy;
// the drain is replicated and lasts until UndrainWorker. The answer names
// the tasks of which the worker holds the only copy. A drain is idempotent,
// so a retry is safe. A primary that cannot write drains yet (a voter on an
// older binary) answers ErrFailedPrecondition.
func (c *Client) DrainWorker(ctx context.Context, id string) (*xcev1.DrainWorkerResponse, error) {
	var out *xcev1.DrainWorkerResponse
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		r, err := s.DrainWorker(ctx, connect.NewRequest(&xcev1.DrainWorkerRequest{WorkerId: id}))
		if err == nil {
			out = r.Msg
		}
		return err
	})
	return out, preconditionErr(err)
}

// UndrainWorker ends worker id's drain; idempotent like DrainWorker.
func (c *Client) UndrainWorker(ctx context.Context, id string) error {
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		_, err := s.UndrainWorker(ctx, connect.NewRequest(&xcev1.UndrainWorkerRequest{WorkerId: id}))
		return err
	})
	return preconditionErr(err)
}

// FreezePlacement freezes the placement (frozen) or ends its freeze, and
// returns the index at which the change was applied; idempotent. Until
// every voter runs a binary that applies freezes it is
// ErrFailedPrecondition, naming the voters.
func (c *Client) FreezePlacement(ctx context.Context, frozen bool) (uint64, error) {
	var index uint64
	err := c.do(ctx, func(ctx context.Context, s xcev1connect.ControllerServiceClient) error {
		if frozen {
			r, err := s.FreezePlacement(ctx, connect.NewRequest(&xcev1.FreezePlacementRequest{}))
			if err == nil {
				index = r.Msg.Index
			}
			return err
		}
		r, err := s.UnfreezePlacement(ctx, connect.NewRequest(&xcev1.UnfreezePlacementRequest{}))
		if err == nil {
			index = r.Msg.Index
		}
		return err
	})
	return index, preconditionErr(err)
}

// preconditionErr turns a FailedPrecondition answer into
// ErrFailedPrecondition with the server's reason.
func preconditionErr(err error) error {
	if err != nil && !errors.Is(err, ErrNotReady) && connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return fmt.Errorf("%w: %s", ErrFailedPrecondition, connectMsg(err))
	}
	return err
}
