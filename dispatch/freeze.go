package dispatch

import (
	"context"

	"connectrpc.com/connect"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// PlacementCmds is what the freeze methods and weighted submits need from
// the node besides Apply: whether commands of log format 5 may be written
// (every voter applies them).
type PlacementCmds interface {
	PlacementWritable() error
}

// FreezePlacement holds the placement still: the assignor handles
// failures only until UnfreezePlacement (docs/operations.md, "Placement:
// zones, weights, freeze").
func (s *Service) FreezePlacement(ctx context.Context, _ *connect.Request[xcev1.FreezePlacementRequest]) (*connect.Response[xcev1.FreezePlacementResponse], error) {
	r, err := s.writeFreeze(ctx, true)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.FreezePlacementResponse{Index: r.Index}), nil
}

// UnfreezePlacement ends a freeze of the placement.
func (s *Service) UnfreezePlacement(ctx context.Context, _ *connect.Request[xcev1.UnfreezePlacementRequest]) (*connect.Response[xcev1.UnfreezePlacementResponse], error) {
	r, err := s.writeFreeze(ctx, false)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&xcev1.UnfreezePlacementResponse{Index: r.Index}), nil
}

// writeFreeze replicates the freeze's change once every voter applies it.
func (s *Service) writeFreeze(ctx context.Context, frozen bool) (state.Result, error) {
	if err := s.node.PlacementWritable(); err != nil {
		return state.Result{}, failedPrecondition("%v", err)
	}
	r, err := s.apply(ctx, &state.Command{Type: state.CmdSetPlacementFrozen, Frozen: frozen})
	if err != nil {
		return r, err
	}
	if r.Code != state.CodeOK {
		return r, failedPrecondition("%s", r.Err)
	}
	return r, nil
}
