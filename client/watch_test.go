package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/client"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// cutOffNode serves WatchAssignment: from generation 0 a full copy of
// generation 1 and generation 2, then it cuts the watcher off; from
// generation 2, generation 3, then nothing more until the watcher goes.
type cutOffNode struct {
	xcev1connect.UnimplementedControllerServiceHandler
	applied time.Time
}

func (n *cutOffNode) WatchAssignment(ctx context.Context, req *connect.Request[xcev1.WatchAssignmentRequest], s *connect.ServerStream[xcev1.WatchAssignmentResponse]) error {
	switch req.Msg.FromGeneration {
	case 0:
		if err := s.Send(&xcev1.WatchAssignmentResponse{Generation: 1, Full: true}); err != nil {
			return err
		}
		if err := s.Send(&xcev1.WatchAssignmentResponse{Generation: 2, AppliedAtUnixNano: n.applied.UnixNano()}); err != nil {
			return err
		}
		return connect.NewError(connect.CodeResourceExhausted, errors.New("watcher fell behind this node's history"))
	case 2:
		if err := s.Send(&xcev1.WatchAssignmentResponse{Generation: 3, AppliedAtUnixNano: n.applied.Add(time.Millisecond).UnixNano()}); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	return connect.NewError(connect.CodeInvalidArgument, errors.New("unexpected from_generation"))
}

// TestWatchAssignmentBreaks: each generation carries the serving node's
// apply time (none for a full copy); a cut-off is reported to onBreak as
// such, and the watch resumes from the last generation it delivered.
func TestWatchAssignmentBreaks(t *testing.T) {
	n := &cutOffNode{applied: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	mux := http.NewServeMux()
	mux.Handle(xcev1connect.NewControllerServiceHandler(n))
	c := newClient(t, []string{serve(t, mux)}, client.Options{})
	defer c.Close()

	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var got []client.AssignmentUpdate
	var breaks []error
	err := c.WatchAssignmentBreaks(ctx, 0, true, func(u client.AssignmentUpdate) error {
		got = append(got, u)
		if u.Generation == 3 {
			cancel()
		}
		return nil
	}, func(err error) { breaks = append(breaks, err) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Generation != 1 || !got[0].Full || got[1].Generation != 2 || got[2].Generation != 3 {
		t.Fatalf("updates %+v, want generations 1 (full), 2, 3", got)
	}
	if !got[0].AppliedAt.IsZero() || !got[1].AppliedAt.Equal(n.applied) || !got[2].AppliedAt.Equal(n.applied.Add(time.Millisecond)) {
		t.Errorf("applied at %v, %v, %v; want zero, %v, %v", got[0].AppliedAt, got[1].AppliedAt, got[2].AppliedAt,
			n.applied, n.applied.Add(time.Millisecond))
	}
	if len(breaks) != 1 || !client.IsWatchCutOff(breaks[0]) {
		t.Errorf("breaks %v, want one cut-off", breaks)
	}
}
