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

// AssignmentUpdate is one generation of the assignment as a watcher
// receives it (WatchAssignment).
type AssignmentUpdate struct {
	Generation uint64
	// Full: Tasks is the whole assignment; forget what was held before.
	Full bool
	// Tasks are the placements the generation set (all of them when
	// Full), each with its task's epoch.
	Tasks []*xcev1.TaskPlacement
	// Removed are the tasks that lost their placement.
	Removed []string
	// AppliedAt is when the serving node applied the entry that made the
	// generation, by that node's wall clock (zero for a full copy): the
	// PRIMARY applies right after the commit.
	AppliedAt time.Time
	// WorkerAddrs are worker client addresses the node knows (every
	// node, from its log): all of them with Full, else those new or
	// changed.
	WorkerAddrs map[string]string
	// Where it came from: the node, its role, and its applied and known
	// commit index (a STANDBY may be behind).
	Endpoint                  string
	Role                      xcev1.Role
	AppliedIndex, CommitIndex uint64
}

// WatchAssignment calls fn with the assignment, then with each new
// generation, until ctx ends (it returns nil) or fn returns an error (it
// returns that error). from is the last generation the caller has (0:
// none; the first update is then a full copy). Across failovers, node
// restarts and cut-offs it reconnects, to any node when stale (STANDBYs
// serve from what they have applied) or to the PRIMARY, and resumes from
// the last generation fn received: fn gets exactly the generations it
// missed, or a full copy when the node it reaches no longer has them, and
// never one twice.
func (c *Client) WatchAssignment(ctx context.Context, from uint64, stale bool, fn func(AssignmentUpdate) error) error {
	return c.watchAssignment(ctx, from, stale, fn, nil)
}

// WatchAssignmentBreaks is WatchAssignment that also calls onBreak each
// time an open stream ends and the watch goes on to reconnect, with what
// ended it: a failover, a node's restart, or a cut-off (IsWatchCutOff).
func (c *Client) WatchAssignmentBreaks(ctx context.Context, from uint64, stale bool, fn func(AssignmentUpdate) error, onBreak func(error)) error {
	return c.watchAssignment(ctx, from, stale, fn, onBreak)
}

// IsWatchCutOff reports whether err, the end of a watch stream, is the
// node cutting off a watcher that fell further behind than the history it
// keeps (the watch resumes from its last generation).
func IsWatchCutOff(err error) bool {
	return connect.CodeOf(err) == connect.CodeResourceExhausted
}

// watchAssignment is WatchAssignment that also calls onBreak (when set)
// each time an open stream ends and the watch goes on to reconnect.
func (c *Client) watchAssignment(ctx context.Context, from uint64, stale bool, fn func(AssignmentUpdate) error, onBreak func(error)) error {
	consistency := xcev1.Consistency_CONSISTENCY_UNSPECIFIED
	if stale {
		consistency = xcev1.Consistency_CONSISTENCY_STALE
	}
	bo := backoff.Backoff{Min: 20 * time.Millisecond, Max: time.Second}
	for {
		var fnErr error
		opened, err := c.watchOnce(ctx, from, consistency, func(u AssignmentUpdate) error {
			if fnErr = fn(u); fnErr != nil {
				return fnErr
			}
			from = u.Generation
			bo.Reset()
			return nil
		})
		switch {
		case fnErr != nil:
			return fnErr
		case ctx.Err() != nil:
			return nil
		case !opened && err != nil:
			// The call itself was refused (retry already went through
			// elections and unreachable nodes): an answer, not a break.
			return err
		}
		// An open stream that ends, however (a node killed mid-message,
		// a cut-off, a restart), is resumed.
		if onBreak != nil {
			onBreak(err)
		}
		if !backoff.Sleep(ctx, bo.Next()) {
			return nil
		}
	}
}

// watchOnce opens one stream (retried like any call until its first
// message) and delivers its generations until it ends. opened reports
// whether the stream was opened.
func (c *Client) watchOnce(ctx context.Context, from uint64, consistency xcev1.Consistency, fn func(AssignmentUpdate) error) (opened bool, err error) {
	stream, ep, cancel, err := openStream(ctx, c, "assignment watch",
		func(sctx context.Context, s xcev1connect.ControllerServiceClient) (*connect.ServerStreamForClient[xcev1.WatchAssignmentResponse], error) {
			return s.WatchAssignment(sctx, connect.NewRequest(&xcev1.WatchAssignmentRequest{FromGeneration: from, Consistency: consistency}))
		})
	if err != nil {
		return false, err
	}
	defer cancel()
	defer stream.Close()
	var u AssignmentUpdate
	pending := false
	for m := stream.Msg(); ; m = stream.Msg() {
		if !pending {
			u, pending = AssignmentUpdate{Generation: m.Generation, Full: m.Full, Endpoint: ep}, true
			if m.AppliedAtUnixNano != 0 {
				u.AppliedAt = time.Unix(0, m.AppliedAtUnixNano)
			}
		}
		u.Tasks = append(u.Tasks, m.Tasks...)
		u.Removed = append(u.Removed, m.Removed...)
		for id, a := range m.WorkerAddrs {
			if u.WorkerAddrs == nil {
				u.WorkerAddrs = map[string]string{}
			}
			u.WorkerAddrs[id] = a
		}
		u.Role, u.AppliedIndex, u.CommitIndex = m.Role, m.AppliedIndex, m.CommitIndex
		if !m.More {
			if err := fn(u); err != nil {
				return true, err
			}
			pending = false
		}
		if !stream.Receive() {
			return true, stream.Err()
		}
	}
}

// openStream opens a server stream on the ControllerService through retry,
// like any call: an attempt lasts until the stream's first message (or
// its failure); from then on the stream lives as long as ctx. It returns
// the stream on its first message, the endpoint that serves it, and the
// function that ends it.
func openStream[T any](ctx context.Context, c *Client, what string,
	open func(ctx context.Context, s xcev1connect.ControllerServiceClient) (*connect.ServerStreamForClient[T], error),
) (*connect.ServerStreamForClient[T], string, func(), error) {
	var stream *connect.ServerStreamForClient[T]
	var ep string
	sctx, cancel := context.WithCancel(ctx)
	err := retry(ctx, c, func(e string) xcev1connect.ControllerServiceClient { ep = e; return c.svc(e) },
		func(actx context.Context, s xcev1connect.ControllerServiceClient) error {
			st, err := open(sctx, s)
			if err != nil {
				return err
			}
			stop := context.AfterFunc(actx, func() { st.Close() })
			ok := st.Receive()
			stopped := stop()
			if !ok {
				err := st.Err()
				st.Close()
				if err == nil || !stopped {
					err = connect.NewError(connect.CodeUnavailable, errors.New(what+" ended before its first message"))
				}
				return err
			}
			stream = st
			return nil
		})
	if err != nil {
		cancel()
		return nil, "", nil, err
	}
	return stream, ep, func() { stream.Close(); cancel() }, nil
}
