package dispatch

import (
	"context"
	"maps"
	"slices"

	"connectrpc.com/connect"

	"github.com/xce/xce/placement"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// Drains is what the drain methods need from the node besides Apply:
// whether drains may be written (every voter applies them).
type Drains interface {
	DrainsWritable() error
}

// DrainWorker drains a worker: its actives move away as copies elsewhere
// catch up, and it is given no new copy (docs/design.md, "Draining and
// leaving"). The answer names the tasks of which it holds the only copy.
func (s *Service) DrainWorker(ctx context.Context, req *connect.Request[xcev1.DrainWorkerRequest]) (*connect.Response[xcev1.DrainWorkerResponse], error) {
	id := req.Msg.WorkerId
	r, err := s.writeDrain(ctx, id, true)
	if err != nil {
		return nil, err
	}
	resp := &xcev1.DrainWorkerResponse{Index: r.Index, OnlyCopy: onlyCopies(s.node.FSM(), id)}
	if s.workers != nil {
		if ws, _, err := s.workers.Workers(); err == nil {
			resp.Connected = slices.ContainsFunc(ws, func(w placement.WorkerInfo) bool { return w.ID == id })
		}
	}
	return connect.NewResponse(resp), nil
}

// UndrainWorker ends a worker's drain.
func (s *Service) UndrainWorker(ctx context.Context, req *connect.Request[xcev1.UndrainWorkerRequest]) (*connect.Response[xcev1.UndrainWorkerResponse], error) {
	r, err := s.writeDrain(ctx, req.Msg.WorkerId, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.UndrainWorkerResponse{Index: r.Index}), nil
}

// writeDrain checks the worker id and replicates the drain's change.
func (s *Service) writeDrain(ctx context.Context, id string, drained bool) (state.Result, error) {
	if !ValidTaskID(id) {
		return state.Result{}, invalid("worker_id %q: must be 1-128 characters of [A-Za-z0-9._-]", id)
	}
	if err := s.node.DrainsWritable(); err != nil {
		return state.Result{}, failedPrecondition("%v", err)
	}
	r, err := s.apply(ctx, &state.Command{Type: state.CmdSetWorkerDrain, Worker: id, Drained: drained})
	if err != nil {
		return r, err
	}
	if r.Code != state.CodeOK {
		return r, failedPrecondition("%s", r.Err)
	}
	return r, nil
}

// onlyCopies lists the tasks whose every copy (active, standbys, warm-ups)
// in the committed assignment is on worker id.
func onlyCopies(fsm *state.FSM, id string) []string {
	_, a := fsm.Assignment()
	var out []string
	for _, t := range slices.Sorted(maps.Keys(a)) {
		p := a[t]
		held := p.Active == id || slices.Contains(p.Standbys, id) || slices.Contains(p.Warmups, id)
		if !held {
			continue
		}
		elsewhere := p.Active != "" && p.Active != id ||
			slices.ContainsFunc(p.Standbys, func(w string) bool { return w != id }) ||
			slices.ContainsFunc(p.Warmups, func(w string) bool { return w != id })
		if !elsewhere {
			out = append(out, t)
		}
	}
	return out
}
