package dispatch

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	xcev1 "github.com/xce/xce/proto/xce/v1"
	"github.com/xce/xce/state"
)

// WatchTasks streams task creations and deletions in commit order, from
// the index the watcher gives, then as this node applies them. A node
// behind that index sends nothing until it has caught up; one that no
// longer keeps events after it answers OUT_OF_RANGE.
func (s *Service) WatchTasks(ctx context.Context, req *connect.Request[xcev1.WatchTasksRequest], stream *connect.ServerStream[xcev1.WatchTasksResponse]) error {
	release, err := s.startWatch(ctx, req.Msg.Consistency)
	if err != nil {
		return err
	}
	defer release()
	fsm := s.node.FSM()
	from := req.Msg.FromIndex
	if from == 0 {
		from = fsm.AppliedIndex()
	}
	for first := true; ; first = false {
		events, applied, ok, compacted, changed := fsm.TasksSince(from)
		if !ok {
			if !first {
				s.wm.cutOff.Inc()
			}
			return connect.NewError(connect.CodeOutOfRange, fmt.Errorf(
				"this node keeps task events after index %d only, not after %d: list the tasks and watch from the index they were read at", compacted, from))
		}
		if len(events) > 0 || first {
			if err := s.sendTaskEvents(stream, events, max(applied, from)); err != nil {
				return err
			}
			from = max(applied, from)
		}
		if done, err := s.awaitChange(ctx, changed); done {
			return err
		}
	}
}

// sendTaskEvents sends events (at least one message, even with none) in
// parts of at most watchPage, each part ending at a whole index, the last
// one saying everything up to upTo is sent.
func (s *Service) sendTaskEvents(stream *connect.ServerStream[xcev1.WatchTasksResponse], events []state.TaskEvent, upTo uint64) error {
	for {
		n := min(len(events), watchPage)
		for n > 0 && n < len(events) && events[n].Index == events[n-1].Index {
			n++
		}
		part := events[:n]
		events = events[n:]
		m := &xcev1.WatchTasksResponse{Events: make([]*xcev1.TaskEvent, len(part)), AppliedIndex: upTo}
		for i, e := range part {
			t := &xcev1.Task{TaskId: e.Task.ID}
			if !e.Deleted {
				t = taskPB(e.Task)
			}
			m.Events[i] = &xcev1.TaskEvent{Index: e.Index, Deleted: e.Deleted, Task: t}
		}
		if len(events) > 0 {
			m.AppliedIndex = part[len(part)-1].Index
		}
		commit, _ := s.node.Indexes()
		m.CommitIndex, m.Role = commit, xcev1.Role(s.node.View().Role)
		if err := stream.Send(m); err != nil {
			return err
		}
		s.wm.messages.Inc()
		if len(events) == 0 {
			return nil
		}
	}
}
