package dispatch

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/placement"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// Workers is the primary's worker sessions and assignor (placement.Service).
type Workers interface {
	RegisterWith(r placement.Registration) (placement.RegisterInfo, error)
	Beat(ctx context.Context, b placement.Beat) (placement.Answer, error)
	Workers() ([]placement.WorkerInfo, bool, error)
	Away() []placement.AwayInfo
	Addrs() map[string]string
	Soft() (tasks map[string]placement.TaskSoft, settling, followup, ok bool)
}

// workerService implements xce.v1.WorkerService on the Service's gate.
type workerService struct{ s *Service }

// workersErr maps the placement errors to the API's codes. A node whose
// assignor is not running (it left PRIMARY, or has not started its term's
// services yet) answers NOT_READY like the gate would.
func (s *Service) workersErr(err error) error {
	switch {
	case errors.Is(err, placement.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, placement.ErrUnknownWorker):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, placement.ErrStale):
		return connect.NewError(connect.CodeAborted, err)
	case errors.Is(err, placement.ErrTooManyWorkers):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, placement.ErrNotServing):
		v := s.node.View()
		d := Decide(v, ClassFact, false, s.timings)
		if d.Serve {
			d = Decision{Kind: "assignor_starting", Reason: "the assignor is starting", RetryAfter: s.timings.Electing}
		}
		return s.notReady(v, d)
	}
	return connect.NewError(connect.CodeInternal, err)
}

func (s *Service) noWorkers() error {
	v := s.node.View()
	return s.notReady(v, Decision{Kind: "no_assignor", Reason: "this node runs no assignor", RetryAfter: s.timings.Electing})
}

// Register opens a worker's session with the primary.
func (w *workerService) Register(ctx context.Context, req *connect.Request[xcev1.RegisterRequest]) (*connect.Response[xcev1.RegisterResponse], error) {
	if w.s.workers == nil {
		return nil, w.s.noWorkers()
	}
	m := req.Msg
	info, err := w.s.workers.RegisterWith(placement.Registration{Worker: m.WorkerId, Capacity: m.Capacity, Addr: m.ClientAddr, Labels: m.Labels})
	if err != nil {
		return nil, w.s.workersErr(err)
	}
	return connect.NewResponse(&xcev1.RegisterResponse{
		Generation:          info.Generation,
		SessionTimeoutMs:    uint32(info.SessionTimeout.Milliseconds()),
		HeartbeatIntervalMs: uint32(info.HeartbeatInterval.Milliseconds()),
		MaxWaitMs:           uint32(info.MaxWait.Milliseconds()),
	}), nil
}

// Heartbeat renews a session and answers with the worker's copies.
func (w *workerService) Heartbeat(ctx context.Context, req *connect.Request[xcev1.HeartbeatRequest]) (*connect.Response[xcev1.HeartbeatResponse], error) {
	if w.s.workers == nil {
		return nil, w.s.noWorkers()
	}
	m := req.Msg
	facts := make([]placement.Fact, len(m.Facts))
	for i, f := range m.Facts {
		facts[i] = placement.Fact{Kind: int(f.Kind), Task: f.TaskId, Text: f.Text}
	}
	// A worker that gave up on this heartbeat has sent, or will send, a
	// newer one; recording this one's running report after it could undo
	// the newer report (docs/design.md, "At most one active").
	if err := ctx.Err(); err != nil {
		return nil, connect.NewError(connect.CodeCanceled, err)
	}
	a, err := w.s.workers.Beat(ctx, placement.Beat{
		Worker: m.WorkerId, Seq: m.Seq, Lags: m.Lags, Loads: m.Loads, Facts: facts, Running: m.Running,
		Wait: time.Duration(m.WaitMs) * time.Millisecond, AckSeq: m.AcknowledgedSeq,
		Leaving: m.Leaving, LeaveNow: m.LeaveNow,
	})
	if err != nil {
		if ctx.Err() != nil {
			// The worker gave up on a held heartbeat: it sent a later one.
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
		return nil, w.s.workersErr(err)
	}
	return connect.NewResponse(&xcev1.HeartbeatResponse{
		Generation: a.Generation, Actives: a.Actives, Standbys: a.Standbys, Warmups: a.Warmups,
		PendingActives: a.PendingActives, Epochs: a.Epochs,
		ActiveLeaseMs:       uint32(a.ActiveLease.Milliseconds()),
		HeartbeatIntervalMs: uint32(w.s.node.Config().Assignor.HeartbeatInterval.Milliseconds()),
		Left:                a.Left, Drained: a.Drained,
	}), nil
}

// ListWorkers reports the primary's worker sessions.
func (s *Service) ListWorkers(ctx context.Context, _ *connect.Request[xcev1.ListWorkersRequest]) (*connect.Response[xcev1.ListWorkersResponse], error) {
	if s.workers == nil {
		return nil, s.noWorkers()
	}
	ws, settling, err := s.workers.Workers()
	if err != nil {
		return nil, s.workersErr(err)
	}
	gen, _ := s.node.FSM().AssignmentGeneration()
	resp := &xcev1.ListWorkersResponse{Generation: gen, Settling: settling, Workers: make([]*xcev1.WorkerInfo, len(ws)),
		Drained: s.node.FSM().Drained()}
	for i, w := range ws {
		resp.Workers[i] = &xcev1.WorkerInfo{
			WorkerId: w.ID, Capacity: uint32(w.Capacity), ClientAddr: w.Addr,
			LastHeartbeatAgeMs: w.LastSeen.Milliseconds(),
			Actives:            w.Copies.Actives, Standbys: w.Copies.Standbys, Warmups: w.Copies.Warmups,
			Lags: w.Lags, Notice: w.Notice, DrainState: w.DrainState, Labels: w.Labels,
		}
	}
	for _, a := range s.workers.Away() {
		resp.Away = append(resp.Away, &xcev1.AwayWorker{WorkerId: a.ID, ReplacedInMs: a.ReplacedIn.Milliseconds(),
			Labels: a.Labels, Standbys: a.Standbys})
	}
	return connect.NewResponse(resp), nil
}

// GetAssignment reads the committed assignment, with each task's epoch; on
// the primary it adds the soft facts (lags, pending reasons, updates).
func (s *Service) GetAssignment(ctx context.Context, req *connect.Request[xcev1.GetAssignmentRequest]) (*connect.Response[xcev1.GetAssignmentResponse], error) {
	if err := s.readBarrier(ctx, req.Msg.Consistency); err != nil {
		return nil, err
	}
	_, applied := s.node.Indexes()
	fsm := s.node.FSM()
	gen, a := fsm.Assignment()
	tasks, _ := fsm.AllTasks()
	slices.SortFunc(tasks, func(x, y state.Task) int { return strings.Compare(x.ID, y.ID) })
	var (
		soft               map[string]placement.TaskSoft
		settling, followup bool
	)
	if s.workers != nil && s.node.View().Role == ha.RolePrimary {
		soft, settling, followup, _ = s.workers.Soft()
	}
	resp := &xcev1.GetAssignmentResponse{Generation: gen, AppliedIndex: applied, Settling: settling, Followup: followup,
		Frozen: s.node.FSM().PlacementFrozen(),
		Tasks:  make([]*xcev1.TaskAssignment, 0, len(tasks))}
	for _, t := range tasks {
		p, placed := a[t.ID]
		if !placed {
			// A task whose placement was removed keeps its epoch.
			p.Epoch = fsm.TaskEpoch(t.ID)
		}
		ta := &xcev1.TaskAssignment{
			Placement: &xcev1.TaskPlacement{TaskId: t.ID, Active: p.Active, Standbys: p.Standbys, Warmups: p.Warmups, Epoch: p.Epoch},
			Stateful:  t.Stateful,
		}
		if st, ok := soft[t.ID]; ok {
			ta.Lags = maps.Clone(st.Lags)
			ta.PendingReason, ta.Update = st.PendingReason, st.Update
		}
		resp.Tasks = append(resp.Tasks, ta)
	}
	return connect.NewResponse(resp), nil
}
