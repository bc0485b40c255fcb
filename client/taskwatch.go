package client

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	"github.com/xce/xce/internal/backoff"
	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/proto/xce/v1/xcev1connect"
)

// ErrTasksCompacted is what WatchTasks returns when the node it reaches no
// longer keeps the task events after the index it resumes from: list the
// tasks again (List gives the index it read at) and watch from there.
var ErrTasksCompacted = errors.New("task events after this index are no longer kept: list the tasks and watch again")

// WatchTasks calls fn with task creations and deletions in commit order,
// every one at a log index above from (0: from now on), with the index up
// to which all were sent, until ctx ends (nil) or fn returns an error
// (that error). Across failovers and reconnects it resumes from the last
// index delivered, missing none and repeating none, or returns
// ErrTasksCompacted (wrapped) when that is no longer possible.
func (c *Client) WatchTasks(ctx context.Context, from uint64, stale bool, fn func(events []*xcev1.TaskEvent, upTo uint64) error) error {
	consistency := xcev1.Consistency_CONSISTENCY_UNSPECIFIED
	if stale {
		consistency = xcev1.Consistency_CONSISTENCY_STALE
	}
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for {
		var fnErr error
		opened, err := c.watchTasksOnce(ctx, from, consistency, func(m *xcev1.WatchTasksResponse) error {
			if fnErr = fn(m.Events, m.AppliedIndex); fnErr != nil {
				return fnErr
			}
			from = max(from, m.AppliedIndex)
			bo.Reset()
			return nil
		})
		switch {
		case fnErr != nil:
			return fnErr
		case ctx.Err() != nil:
			return nil
		case connect.CodeOf(err) == connect.CodeOutOfRange:
			return errors.Join(ErrTasksCompacted, err)
		case !opened && err != nil:
			return err
		}
		if !backoff.Sleep(ctx, bo.Next()) {
			return nil
		}
	}
}

func (c *Client) watchTasksOnce(ctx context.Context, from uint64, consistency xcev1.Consistency, fn func(*xcev1.WatchTasksResponse) error) (bool, error) {
	stream, _, cancel, err := openStream(ctx, c, "task watch",
		func(sctx context.Context, s xcev1connect.ControllerServiceClient) (*connect.ServerStreamForClient[xcev1.WatchTasksResponse], error) {
			return s.WatchTasks(sctx, connect.NewRequest(&xcev1.WatchTasksRequest{FromIndex: from, Consistency: consistency}))
		})
	if err != nil {
		return false, err
	}
	defer cancel()
	for {
		if err := fn(stream.Msg()); err != nil {
			return true, err
		}
		if !stream.Receive() {
			return true, stream.Err()
		}
	}
}
