package raftha

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/testutil"
)

// A snapshot on demand, on a real one-node raft with real storage: it
// holds what was applied, its metrics show its size (the bytes persisted,
// as raft's metadata says), a count of one and the times it took; asked
// again it takes another; a follower refuses it.
func TestTakeSnapshot(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewSnapshotMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := startOne(t, func(c *Config) { c.Snapshots = m })
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool { return r.View().State == ha.StateLeader })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last uint64
	for i := range 50 {
		_, idx, err := r.Apply(ctx, submit(fmt.Sprintf("t-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		last = idx
	}
	info, err := r.TakeSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Index < last || info.Bytes == 0 {
		t.Errorf("snapshot %+v, want index >= %d and some bytes", info, last)
	}
	got := gather(t, reg)
	if got["xce_snapshots_total"] != 1 {
		t.Errorf("xce_snapshots_total %v, want 1", got["xce_snapshots_total"])
	}
	if got["xce_snapshot_bytes"] != float64(info.Bytes) {
		t.Errorf("xce_snapshot_bytes %v, want %d", got["xce_snapshot_bytes"], info.Bytes)
	}
	if got["xce_snapshot_persist_seconds"] <= 0 || got["xce_snapshot_capture_seconds"] <= 0 {
		t.Errorf("metrics %v: want both times measured", got)
	}
	if _, err := r.TakeSnapshot(ctx); err != nil {
		t.Errorf("a second snapshot: %v", err)
	}
	if got := gather(t, reg)["xce_snapshots_total"]; got != 2 {
		t.Errorf("xce_snapshots_total %v after two, want 2", got)
	}

	f, _ := startOne(t, func(c *Config) { c.CampaignAllowed = func() error { return errors.New("not now") } })
	if _, err := f.TakeSnapshot(ctx); !errors.Is(err, ha.ErrNotLeader) {
		t.Errorf("on a follower: %v, want ErrNotLeader", err)
	}
}

// Without metrics, a snapshot records nothing and still persists.
func TestSnapshotWithoutMetrics(t *testing.T) {
	var m *SnapshotMetrics
	m.captured(time.Second)
	m.persisted(time.Second, 10)
}

// gather reads the registry's unlabelled gauges and counters by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				out[mf.GetName()] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[mf.GetName()] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// A node snapshots once SnapshotWrites commands (and up to a quarter more)
// were applied since its last snapshot, however far raft's own entry
// threshold is.
func TestSnapshotByWrites(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewSnapshotMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := startOne(t, func(c *Config) {
		c.Snapshots, c.SnapshotWrites, c.SnapshotThreshold = m, 100, 1<<30
	})
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool { return r.View().State == ha.StateLeader })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 60 {
		if _, _, err := r.Apply(ctx, submit(fmt.Sprintf("t-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := gather(t, reg)["xce_snapshots_total"]; n != 0 {
		t.Fatalf("%v snapshots after 60 writes, want none yet", n)
	}
	// Each node waits up to a quarter more than the limit.
	for i := range 70 {
		if _, _, err := r.Apply(ctx, submit(fmt.Sprintf("u-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 10*time.Second, "a snapshot after 130 writes", func() bool {
		return gather(t, reg)["xce_snapshots_total"] == 1
	})
}

func TestSnapshotDue(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name          string
		writes, limit uint64
		stretch       float64
		since, took   time.Duration
		want          bool
	}{
		{"first snapshot, enough writes", 8192, 8192, 1, 0, 0, true},
		{"first snapshot, too few writes", 8191, 8192, 1, 0, 0, false},
		{"the spread asks for more writes", 9000, 8192, 1.25, 10 * s, s / 10, false},
		{"the spread met", 10240, 8192, 1.25, 10 * s, s / 10, true},
		{"a cheap snapshot does not hold the next back", 8192, 8192, 1, s, s / 10, true},
		{"a costly snapshot spaces the next", 100_000, 8192, 1, 7 * s, s, false},
		{"eight times its cost has passed", 100_000, 8192, 1, 8 * s, s, true},
		{"spaced, yet too few writes", 100, 8192, 1, time.Hour, s, false},
	} {
		if got := snapshotDue(tc.writes, tc.limit, tc.stretch, tc.since, tc.took); got != tc.want {
			t.Errorf("%s: snapshotDue(%d, %d, %v, %v, %v) = %v, want %v", tc.name, tc.writes, tc.limit, tc.stretch, tc.since, tc.took, got, tc.want)
		}
	}
}
