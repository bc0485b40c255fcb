package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/auth"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/ha"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
	"github.com/xce/xce/state"
)

// Node is what the handlers need from the controller.
type Node interface {
	View() *ha.View
	FSM() *state.FSM
	Indexes() (commit, applied uint64)
	Config() *configs.Config
	Started() time.Time
	Version() string
	// Apply replicates cmd and returns the FSM's result.
	Apply(ctx context.Context, cmd []byte) (state.Result, error)
	// ReadBarrier returns once a read of the FSM is linearizable.
	ReadBarrier(ctx context.Context) error
	// Outbox reports the producer epoch, the outbox lag and the
	// publisher's state.
	Outbox() (epoch, lag uint64, state string)
	// Backend names the election backend; info is set for kafka.
	Backend() (name string, info *ha.RoleInfo)
	// ElectingHint is how long a client is told to wait before it retries
	// while no primary is known: about one election of the backend.
	ElectingHint() time.Duration
	// StartupPhases are the phases of the node's start that have ended
	// (Status's startup).
	StartupPhases() []ha.StartupPhase
	// Membership is what the cluster methods need (cluster.go).
	Membership
	// Drains is what the drain methods need (drain.go).
	Drains
	// PlacementCmds is what the freeze methods and weighted submits need
	// (freeze.go).
	PlacementCmds
	// WorkerAddrGate is what the assignment watches need (watch.go).
	WorkerAddrGate
}

// Methods maps every procedure of the API to its class. Each method is
// declared here exactly once; the gate refuses a procedure missing from it.
var Methods = map[string]Class{
	xcev1connect.ControllerServiceStatusProcedure:      ClassHealth,
	xcev1connect.ControllerServiceWatchStatusProcedure: ClassHealth,
	xcev1connect.ControllerServiceGetTaskProcedure:     ClassRead,
	xcev1connect.ControllerServiceListTasksProcedure:   ClassRead,
	xcev1connect.ControllerServiceSubmitTaskProcedure:  ClassWrite,
	xcev1connect.ControllerServiceDeleteTaskProcedure:  ClassWrite,
	// The assignment is replicated: a read like the tasks.
	xcev1connect.ControllerServiceGetAssignmentProcedure: ClassRead,
	// So is its watch (STALE: STANDBYs serve it too).
	xcev1connect.ControllerServiceWatchAssignmentProcedure: ClassRead,
	xcev1connect.ControllerServiceWatchTasksProcedure:      ClassRead,
	// Worker sessions are the primary's soft state: facts.
	xcev1connect.ControllerServiceListWorkersProcedure: ClassFact,
	xcev1connect.WorkerServiceRegisterProcedure:        ClassFact,
	xcev1connect.WorkerServiceHeartbeatProcedure:       ClassFact,
	// A drain is replicated, so that it outlives failovers: a write.
	xcev1connect.ControllerServiceDrainWorkerProcedure:   ClassWrite,
	xcev1connect.ControllerServiceUndrainWorkerProcedure: ClassWrite,
	// So is a freeze of the placement.
	xcev1connect.ControllerServiceFreezePlacementProcedure:   ClassWrite,
	xcev1connect.ControllerServiceUnfreezePlacementProcedure: ClassWrite,
	// The configuration as this node knows it: a read.
	xcev1connect.ClusterServiceListMembersProcedure: ClassRead,
	// Changes of the configuration and of leadership go through the
	// PRIMARY's log: admin operations.
	xcev1connect.ClusterServiceAddMemberProcedure:      ClassAdmin,
	xcev1connect.ClusterServicePromoteMemberProcedure:  ClassAdmin,
	xcev1connect.ClusterServiceRemoveMemberProcedure:   ClassAdmin,
	xcev1connect.ClusterServiceTransferLeaderProcedure: ClassAdmin,
	xcev1connect.ClusterServiceJoinProcedure:           ClassAdmin,
	// A consistent snapshot is taken by the PRIMARY.
	xcev1connect.ClusterServiceSaveSnapshotProcedure: ClassAdmin,
	// So is a raft snapshot on demand.
	xcev1connect.ClusterServiceTakeSnapshotProcedure: ClassAdmin,
}

// Limits of the API.
const (
	// MaxRequestBytes caps a request message.
	MaxRequestBytes = 64 << 10
	defaultPageSize = 100
	maxPageSize     = 1000
	// maxStandbys is the assignor's limit: a task asking for more could
	// never get them.
	maxStandbys = assign.MaxStandbyReplicas
)

var taskIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidTaskID reports whether s is a valid task id: 1-128 characters of
// [A-Za-z0-9._-].
func ValidTaskID(s string) bool { return taskIDRe.MatchString(s) }

// Service implements xce.v1.ControllerService and xce.v1.WorkerService.
type Service struct {
	node    Node
	workers Workers
	timings RetryTimings
	m       *apiMetrics
	wm      *watchMetrics
	// wc is the messages of recent generations, built once for every
	// watcher (watchshare.go).
	wc    watchCache
	addrs addrCache
	authn *auth.Authenticator
	sec   Security
	// AuthRefused counts the calls the permissions refused; the node's
	// /metrics guard counts in it too.
	AuthRefused *prometheus.CounterVec
}

// New returns the API handler (Connect: gRPC, gRPC-Web and JSON) with the
// gate installed in front of every method, to be mounted at the returned
// path. workers may be nil: the worker methods then answer NOT_READY. With
// WithAuth, the caller's permissions are checked before the gate.
func New(node Node, reg prometheus.Registerer, workers Workers, options ...Option) (string, http.Handler) {
	_, p, h := NewService(node, reg, workers, options...)
	return p, h
}

// retryTimings are the gate's retry-after hints: while no primary is
// known, the backend's (Node.ElectingHint); while the primary has lost its
// write quorum, the leader lease timeout.
func retryTimings(node Node) RetryTimings {
	return RetryTimings{Electing: node.ElectingHint(), NoQuorum: node.Config().Raft.LeaderLeaseTimeout.Duration}
}

// NewService is New that returns the Service too.
func NewService(node Node, reg prometheus.Registerer, workers Workers, options ...Option) (*Service, string, http.Handler) {
	s := &Service{
		node:    node,
		workers: workers,
		timings: retryTimings(node),
		m:       newAPIMetrics(reg, node),
		wm:      newWatchMetrics(reg),
	}
	for _, o := range options {
		o(s)
	}
	s.AuthRefused = newAuthRefused(reg)
	interceptors := []connect.Interceptor{&gate{s: s}}
	if s.authn.Enforced() {
		// First: the outermost, so nothing it refuses reaches the gate.
		interceptors = append([]connect.Interceptor{&authz{s: s, refused: s.AuthRefused}}, interceptors...)
	}
	opts := append([]connect.HandlerOption{
		connect.WithInterceptors(interceptors...),
		connect.WithReadMaxBytes(MaxRequestBytes),
		// Answers are small; compressing them costs more CPU than it saves.
		connect.WithCompressMinBytes(16 << 10),
	}, jsonCodecs()...)
	mux := http.NewServeMux()
	for path, h := range s.handlers(opts) {
		mux.Handle(path, h)
	}
	// The streams have codecs of their own (watchshare.go) and no
	// compression: the same message goes to many watchers at once.
	mountStreams(mux, s.handlers(append(slices.Clip(opts), streamCodecs()...)))
	s.mountHealth(mux)
	if s.authn.Enforced() {
		return s, "/", withTLS(mux)
	}
	return s, "/", mux
}

// handlers are the API's services, by path, with opts.
func (s *Service) handlers(opts []connect.HandlerOption) map[string]http.Handler {
	ctrlPath, ctrl := xcev1connect.NewControllerServiceHandler(s, opts...)
	workPath, work := xcev1connect.NewWorkerServiceHandler(&workerService{s}, opts...)
	clusterPath, cluster := xcev1connect.NewClusterServiceHandler(&clusterService{s: s}, opts...)
	return map[string]http.Handler{ctrlPath: ctrl, workPath: work, clusterPath: cluster}
}

// notReady builds the NOT_READY error for a decision.
func (s *Service) notReady(v *ha.View, d Decision) error {
	err := connect.NewError(connect.CodeUnavailable, fmt.Errorf("not ready: %s", d.Reason))
	detail, derr := connect.NewErrorDetail(&xcev1.NotReady{
		Role:         xcev1.Role(v.Role),
		Term:         v.Term,
		LeaderId:     v.LeaderID,
		LeaderAddr:   v.LeaderAddr,
		Reason:       d.Reason,
		RetryAfterMs: uint32(d.RetryAfter / time.Millisecond),
	})
	if derr == nil {
		err.AddDetail(detail)
	}
	s.m.notReady.WithLabelValues(d.Kind).Inc()
	return err
}

// gate is the interceptor that applies the gate's table (docs/design.md, "The
// gate") before any handler runs.
type gate struct{ s *Service }

type consistent interface{ GetConsistency() xcev1.Consistency }

func (g *gate) check(ctx context.Context, procedure string, req any) error {
	class, ok := Methods[procedure]
	if !ok {
		return connect.NewError(connect.CodeUnimplemented, fmt.Errorf("%s is not declared in the gate", procedure))
	}
	stale := false
	if c, ok := req.(consistent); ok {
		stale = c.GetConsistency() == xcev1.Consistency_CONSISTENCY_STALE
	}
	v := g.s.node.View()
	d := Decide(v, class, stale, g.s.timings)
	if Holds(v, d) {
		v, d = g.hold(ctx, v, d, func(v *ha.View) Decision { return Decide(v, class, stale, g.s.timings) })
	}
	if !d.Serve {
		g.s.m.requests.WithLabelValues(procedure, class.String(), "not_ready").Inc()
		return g.s.notReady(v, d)
	}
	return nil
}

// hold waits, for at most d's retry-after (and half of what is left of
// ctx's deadline, so that the caller hears back within its attempt), for
// a view that serves the request or no longer holds it, and returns the
// last view and its decision. A request still refused after a whole hold
// is told to retry at once (docs/design.md, "The gate").
func (g *gate) hold(ctx context.Context, v *ha.View, d Decision, decide func(*ha.View) Decision) (*ha.View, Decision) {
	wait := d.RetryAfter
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	if wait <= 0 {
		return v, d
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	g.s.m.held.Inc()
	defer g.s.m.held.Dec()
	for {
		select {
		case <-ctx.Done():
			return v, d
		case <-t.C:
			d.RetryAfter = heldRetry
			return v, d
		case <-v.Changed():
			v = g.s.node.View()
			if d = decide(v); !Holds(v, d) {
				return v, d
			}
		}
	}
}

func (g *gate) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		proc := req.Spec().Procedure
		if err := g.check(ctx, proc, req.Any()); err != nil {
			return nil, err
		}
		resp, err := next(ctx, req)
		g.s.m.requests.WithLabelValues(proc, Methods[proc].String(), outcome(err)).Inc()
		return resp, err
	}
}

func (g *gate) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *gate) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		proc := conn.Spec().Procedure
		if Methods[proc] == ClassRead && conn.Spec().StreamType == connect.StreamTypeServer {
			// A read's consistency is in its request: check once it
			// has been received (the handler receives it first).
			conn = &gatedConn{StreamingHandlerConn: conn, g: g, ctx: ctx}
		} else if err := g.check(ctx, proc, nil); err != nil {
			return err
		}
		err := next(ctx, conn)
		g.s.m.requests.WithLabelValues(proc, Methods[proc].String(), outcome(err)).Inc()
		return err
	}
}

// gatedConn applies the gate to a server stream's request as it is
// received.
type gatedConn struct {
	connect.StreamingHandlerConn
	g       *gate
	ctx     context.Context
	checked bool
}

func (c *gatedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	if c.checked {
		return nil
	}
	c.checked = true
	return c.g.check(c.ctx, c.Spec().Procedure, m)
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// Status answers in every role.
func (s *Service) Status(ctx context.Context, _ *connect.Request[xcev1.StatusRequest]) (*connect.Response[xcev1.StatusResponse], error) {
	return connect.NewResponse(s.status(s.node.View())), nil
}

func (s *Service) status(v *ha.View) *xcev1.StatusResponse {
	commit, applied := s.node.Indexes()
	cfg := s.node.Config()
	epoch, lag, kstate := s.node.Outbox()
	st := &xcev1.StatusResponse{
		KafkaEpoch:   epoch,
		OutboxLag:    lag,
		KafkaState:   kstate,
		NodeId:       cfg.NodeID,
		ClusterId:    cfg.ClusterID,
		Role:         xcev1.Role(v.Role),
		Term:         v.Term,
		LeaderId:     v.LeaderID,
		LeaderAddr:   v.LeaderAddr,
		WriteQuorum:  v.Serving(),
		CommitIndex:  commit,
		AppliedIndex: applied,
		Pid:          int64(os.Getpid()),
		Version:      s.node.Version(),
		Reason:       v.Reason,
		UptimeMs:     time.Since(s.node.Started()).Milliseconds(),
		Tasks:        uint64(s.node.FSM().NumTasks()),
		LogFormat:    state.LogFormat,
		// Every node applies the freeze: any of them can say.
		PlacementFrozen: s.node.FSM().PlacementFrozen(),
	}
	st.AssignmentGeneration, _ = s.node.FSM().AssignmentGeneration()
	for _, p := range s.node.StartupPhases() {
		st.Startup = append(st.Startup, &xcev1.StartupPhase{Name: p.Name, AtSeconds: p.At.Seconds(), TookSeconds: p.Took.Seconds()})
	}
	st.Members = s.statusMembers(v.LeaderID)
	s.securityStatus(st)
	var info *ha.RoleInfo
	st.Backend, info = s.node.Backend()
	if info != nil {
		st.LeaseHolder = info.LeaseHolder
		if !info.LeaseDeadline.IsZero() {
			st.LeaseDeadlineUnixMs = info.LeaseDeadline.UnixMilli()
		}
		for _, m := range info.Roster {
			st.Roster = append(st.Roster, &xcev1.RosterMember{MemberId: m.Member, Rank: uint32(m.Rank), Offset: m.Offset})
		}
	}
	return st
}

// WatchStatus sends the current status and then one message per change,
// until the client goes away or the node stops.
func (s *Service) WatchStatus(ctx context.Context, _ *connect.Request[xcev1.WatchStatusRequest], stream *connect.ServerStream[xcev1.StatusResponse]) error {
	v := s.node.View()
	for {
		if err := stream.Send(s.status(v)); err != nil {
			return err
		}
		if v.Stopping {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-v.Changed():
			v = s.node.View()
		}
	}
}

// applyErr turns an Apply failure into the client's error: leadership lost
// mid-write is NOT_READY (the client retries with the same request id, and
// the dedup table answers if the first attempt did commit).
func (s *Service) applyErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	v := s.node.View()
	d := Decide(v, ClassWrite, false, s.timings)
	if d.Serve {
		d = Decision{Kind: "leadership_lost", Reason: "write not confirmed: " + err.Error(), RetryAfter: s.timings.Electing}
	}
	return s.notReady(v, d)
}

func (s *Service) apply(ctx context.Context, c *state.Command) (state.Result, error) {
	start := time.Now()
	r, err := s.node.Apply(ctx, c.Encode())
	s.m.applyLatency.Observe(time.Since(start).Seconds())
	if err != nil {
		return r, s.applyErr(err)
	}
	return r, nil
}

func validRequest(clientID, requestID string) error {
	if len(clientID) > 128 || len(requestID) > 128 {
		return invalid("client_id and request_id must be at most 128 bytes")
	}
	if requestID != "" && clientID == "" {
		return invalid("request_id needs a client_id")
	}
	return nil
}

// SubmitTask creates a task. A retry with the same client and request id
// returns the first answer and applies nothing.
func (s *Service) SubmitTask(ctx context.Context, req *connect.Request[xcev1.SubmitTaskRequest]) (*connect.Response[xcev1.SubmitTaskResponse], error) {
	m := req.Msg
	if !ValidTaskID(m.TaskId) {
		return nil, invalid("task_id %q: must be 1-128 characters of [A-Za-z0-9._-]", m.TaskId)
	}
	if m.StandbyReplicas > maxStandbys {
		return nil, invalid("standby_replicas: %d is more than %d", m.StandbyReplicas, maxStandbys)
	}
	if m.Weight > assign.MaxWeight {
		return nil, invalid("weight: %d is more than %d", m.Weight, assign.MaxWeight)
	}
	if err := validRequest(m.ClientId, m.RequestId); err != nil {
		return nil, err
	}
	if m.Weight > 1 {
		// A weight is log format 5: an older voter would refuse the entry.
		if err := s.node.PlacementWritable(); err != nil {
			return nil, failedPrecondition("weight: %v", err)
		}
	}
	r, err := s.apply(ctx, &state.Command{
		Type: state.CmdSubmitTask, ClientID: m.ClientId, RequestID: m.RequestId,
		Task: state.Task{ID: m.TaskId, Stateful: m.Stateful, StandbyReplicas: m.StandbyReplicas, Weight: m.Weight},
	})
	if err != nil {
		return nil, err
	}
	switch r.Code {
	case state.CodeOK:
	case state.CodeAlreadyExists:
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("task %q exists (created at index %d)", m.TaskId, r.Task.CreatedIndex))
	default:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("submit: %s", r.Err))
	}
	return connect.NewResponse(&xcev1.SubmitTaskResponse{Task: taskPB(r.Task), Index: r.Index}), nil
}

// DeleteTask removes a task; idempotent by request id like SubmitTask.
func (s *Service) DeleteTask(ctx context.Context, req *connect.Request[xcev1.DeleteTaskRequest]) (*connect.Response[xcev1.DeleteTaskResponse], error) {
	m := req.Msg
	if !ValidTaskID(m.TaskId) {
		return nil, invalid("task_id %q: must be 1-128 characters of [A-Za-z0-9._-]", m.TaskId)
	}
	if err := validRequest(m.ClientId, m.RequestId); err != nil {
		return nil, err
	}
	r, err := s.apply(ctx, &state.Command{Type: state.CmdDeleteTask, ClientID: m.ClientId, RequestID: m.RequestId, Task: state.Task{ID: m.TaskId}})
	if err != nil {
		return nil, err
	}
	switch r.Code {
	case state.CodeOK:
	case state.CodeNotFound:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %q not found", m.TaskId))
	default:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("delete: %s", r.Err))
	}
	return connect.NewResponse(&xcev1.DeleteTaskResponse{Index: r.Index}), nil
}

func (s *Service) readBarrier(ctx context.Context, c xcev1.Consistency) error {
	if c == xcev1.Consistency_CONSISTENCY_STALE {
		return nil
	}
	if err := s.node.ReadBarrier(ctx); err != nil {
		return s.applyErr(err)
	}
	return nil
}

// GetTask reads one task.
func (s *Service) GetTask(ctx context.Context, req *connect.Request[xcev1.GetTaskRequest]) (*connect.Response[xcev1.GetTaskResponse], error) {
	m := req.Msg
	if !ValidTaskID(m.TaskId) {
		return nil, invalid("task_id %q: must be 1-128 characters of [A-Za-z0-9._-]", m.TaskId)
	}
	if err := s.readBarrier(ctx, m.Consistency); err != nil {
		return nil, err
	}
	_, applied := s.node.Indexes()
	t, ok := s.node.FSM().Task(m.TaskId)
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %q not found", m.TaskId))
	}
	fsm := s.node.FSM()
	resp := &xcev1.GetTaskResponse{Task: taskPB(t), AppliedIndex: applied}
	if p, ok := fsm.Placement(m.TaskId); ok {
		resp.Placement = placementProto(p)
	}
	if m.WithMoves {
		for _, mv := range fsm.TaskMoves(m.TaskId) {
			pm := &xcev1.TaskMove{Generation: mv.Generation, AppliedAtUnixNano: mv.AppliedAt.UnixNano()}
			if !mv.Removed {
				pm.Placement = placementProto(mv.Placement)
			}
			resp.Moves = append(resp.Moves, pm)
		}
	}
	return connect.NewResponse(resp), nil
}

// ListTasks pages through tasks in id order; the page token is the last id
// of the previous page.
func (s *Service) ListTasks(ctx context.Context, req *connect.Request[xcev1.ListTasksRequest]) (*connect.Response[xcev1.ListTasksResponse], error) {
	m := req.Msg
	size := int(m.PageSize)
	switch {
	case size == 0:
		size = defaultPageSize
	case size > maxPageSize:
		return nil, invalid("page_size: %d is more than %d", size, maxPageSize)
	}
	if m.PageToken != "" && !ValidTaskID(m.PageToken) {
		return nil, invalid("page_token: not a token this server issued")
	}
	if m.Prefix != "" && !ValidTaskID(m.Prefix) {
		return nil, invalid("prefix %q: must be 1-128 characters of [A-Za-z0-9._-]", m.Prefix)
	}
	if err := s.readBarrier(ctx, m.Consistency); err != nil {
		return nil, err
	}
	_, applied := s.node.Indexes()
	fsm := s.node.FSM()
	tasks, more := fsm.TasksWithPrefix(m.Prefix, m.PageToken, size)
	resp := &xcev1.ListTasksResponse{AppliedIndex: applied, Tasks: make([]*xcev1.Task, len(tasks))}
	for i, t := range tasks {
		resp.Tasks[i] = taskPB(t)
		if !m.WithPlacements {
			continue
		}
		if p, ok := fsm.Placement(t.ID); ok {
			resp.Placements = append(resp.Placements, placementProto(p))
		}
	}
	if more && len(tasks) > 0 {
		resp.NextPageToken = tasks[len(tasks)-1].ID
	}
	return connect.NewResponse(resp), nil
}

func taskPB(t state.Task) *xcev1.Task {
	return &xcev1.Task{
		TaskId: t.ID, Stateful: t.Stateful, StandbyReplicas: t.StandbyReplicas,
		CreatedIndex: t.CreatedIndex, State: t.State, PendingReason: t.PendingReason,
		Weight: max(t.Weight, 1), // the state machine keeps 0 for 1
	}
}

type apiMetrics struct {
	requests     *prometheus.CounterVec
	notReady     *prometheus.CounterVec
	held         prometheus.Gauge
	applyLatency prometheus.Histogram
}

func newAPIMetrics(reg prometheus.Registerer, node Node) *apiMetrics {
	m := &apiMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xce_requests_total", Help: "API requests by method, class and outcome.",
		}, []string{"method", "class", "outcome"}),
		notReady: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xce_not_ready_total", Help: "NOT_READY answers by reason.",
		}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "xce_requests_held", Help: "Requests the gate holds while no primary is known, to serve them once one is.",
		}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "xce_apply_seconds", Help: "Time to replicate and apply a write.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16),
		}),
	}
	reg.MustRegister(m.requests, m.notReady, m.held, m.applyLatency,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "xce_dedup_hits_total", Help: "Retried writes answered from the dedup table."},
			func() float64 { return float64(node.FSM().DedupHits()) }))
	return m
}
