package raftha

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/ha"
)

// SnapshotMetrics show what the node's raft snapshots cost: the time the
// state machine is held to copy its state (applies wait for it: the write
// stall a snapshot causes), the time and bytes of writing the copy out, and
// how many were persisted (docs/operations.md, "Snapshots"). A nil
// *SnapshotMetrics records nothing.
type SnapshotMetrics struct {
	capture, persist, bytes prometheus.Gauge
	total                   prometheus.Counter
}

// NewSnapshotMetrics registers the snapshot metrics with reg.
func NewSnapshotMetrics(reg prometheus.Registerer) (*SnapshotMetrics, error) {
	m := &SnapshotMetrics{
		capture: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xce_snapshot_capture_seconds",
			Help: "Time the last raft snapshot held the state machine to copy it; applies wait meanwhile."}),
		persist: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xce_snapshot_persist_seconds",
			Help: "Time to write out and sync the last raft snapshot this node persisted (the state machine is not held)."}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "xce_snapshot_bytes",
			Help: "Size of the state machine's data in the last raft snapshot this node persisted."}),
		total: prometheus.NewCounter(prometheus.CounterOpts{Name: "xce_snapshots_total",
			Help: "Raft snapshots this node persisted since it started."}),
	}
	for _, c := range []prometheus.Collector{m.capture, m.persist, m.bytes, m.total} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *SnapshotMetrics) captured(d time.Duration) {
	if m != nil {
		m.capture.Set(d.Seconds())
	}
}

func (m *SnapshotMetrics) persisted(d time.Duration, n int64) {
	if m != nil {
		m.persist.Set(d.Seconds())
		m.bytes.Set(float64(n))
		m.total.Inc()
	}
}

// countingWriter counts what passes through to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// TakeSnapshot makes the leader take a raft snapshot now, as it does on
// its own every SnapshotInterval once SnapshotThreshold entries are in, and
// returns once it is persisted (and the log compacted).
func (b *Raft) TakeSnapshot(ctx context.Context) (ha.SnapshotInfo, error) {
	switch b.r.State() {
	case raft.Leader:
	case raft.Shutdown:
		return ha.SnapshotInfo{}, ha.ErrShutdown
	default:
		return ha.SnapshotInfo{}, fmt.Errorf("%w: snapshots on demand are taken by the leader", ha.ErrNotLeader)
	}
	f := b.r.Snapshot()
	resolved, err := b.wait(ctx, f)
	switch {
	case !resolved:
		return ha.SnapshotInfo{}, fmt.Errorf("%w: %v (the snapshot may still be taken)", ha.ErrTimeout, ctx.Err())
	case err == raft.ErrNothingNewToSnapshot:
		return ha.SnapshotInfo{}, fmt.Errorf("%w: %v", ha.ErrNothingToSnapshot, err)
	case err != nil:
		return ha.SnapshotInfo{}, mapErr(err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return ha.SnapshotInfo{}, fmt.Errorf("open the snapshot taken: %w", err)
	}
	rc.Close()
	return ha.SnapshotInfo{Index: meta.Index, Bytes: uint64(meta.Size)}, nil
}

var _ ha.Snapshotter = (*Raft)(nil)
