package bench

import (
	"context"
	"time"

	"github.com/xce/xce/client"
)

// SnapshotResult is a raft snapshot the PRIMARY took during the run when
// asked (Options.SnapshotAt); the report's "snapshot".
type SnapshotResult struct {
	// AtSeconds is when it was asked for, into the run; TookSeconds the
	// PRIMARY's time from asking raft to its being persisted; Bytes and
	// Index its size and last index.
	AtSeconds   float64 `json:"at_seconds"`
	TookSeconds float64 `json:"took_seconds"`
	Bytes       uint64  `json:"bytes"`
	Index       uint64  `json:"index"`
	// MaxLatencyMsAround is the largest latency of the writes in flight
	// while it was taken (from the call to its answer, as the bench saw
	// them); MaxLatencyMsRun the largest of the whole run's writes, for
	// comparison.
	MaxLatencyMsAround float64 `json:"max_latency_ms_around"`
	MaxLatencyMsRun    float64 `json:"max_latency_ms_run"`
	// Error says why no snapshot was taken.
	Error string `json:"error,omitempty"`

	start, end time.Time
}

// takeSnapshot asks the PRIMARY for a snapshot at time at, unless ctx
// ends first (the run ended before), and returns what it took.
func takeSnapshot(ctx context.Context, cl *client.Client, runStart time.Time, at time.Duration) *SnapshotResult {
	out := &SnapshotResult{}
	due := time.NewTimer(time.Until(runStart.Add(at)))
	defer due.Stop()
	select {
	case <-ctx.Done():
		out.Error = "the run ended before the snapshot was due"
		return out
	case <-due.C:
	}
	sctx, cancel := context.WithTimeout(context.Background(), restartWait)
	defer cancel()
	out.start = time.Now()
	r, err := cl.TakeSnapshot(sctx)
	out.end = time.Now()
	out.AtSeconds = out.start.Sub(runStart).Seconds()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.TookSeconds, out.Bytes, out.Index = r.Seconds, r.Bytes, r.Index
	return out
}

// MaxWriteLatency is the largest latency of the answered submits whose
// call overlaps [from, to] (all of them when both are zero): a write in
// flight while the snapshot held the state machine waited for it. Calls
// without an answer (cut off, timed out) say nothing of latency and are
// left out.
func MaxWriteLatency(ops []Op, from, to time.Time) time.Duration {
	all := from.IsZero() && to.IsZero()
	var m time.Duration
	for _, op := range ops {
		if op.Kind != Submit || op.Outcome == Unknown {
			continue
		}
		if !all && (op.Return.Before(from) || op.Call.After(to)) {
			continue
		}
		m = max(m, op.Return.Sub(op.Call))
	}
	return m
}
