package ha

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/persist"
)

// histogramCounts returns the observation count of every histogram series
// in reg, by metric name and (for labelled ones) label value.
func histogramCounts(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				name := mf.GetName()
				for _, l := range m.GetLabel() {
					name += "/" + l.GetValue()
				}
				out[name] = h.GetSampleCount()
			}
		}
	}
	return out
}

// raftTestRegistry is the registry the tests export raft's timings to.
var raftTestRegistry = sync.OnceValue(prometheus.NewRegistry)

// Raft's own timings reach the registry: the commit of every entry, the
// leader's and the followers' log writes, the round trip to each follower
// and the FSM.
//
// Raft reports process-wide and the first registry keeps them, so runs of
// the test in one process (-count) share a registry and count from what the
// run found there.
func TestRaftMetricsExported(t *testing.T) {
	reg := raftTestRegistry()
	if err := ExportRaftMetrics(reg); err != nil {
		t.Fatal(err)
	}
	before := histogramCounts(t, reg)
	leader, stop := startCluster(t, 3)
	defer stop()
	cmd := (&persist.Command{Type: persist.CmdNoop}).Encode()
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := leader.Apply(ctx, cmd)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]uint64
	want := []string{"xce_raft_commit_seconds", "xce_raft_leader_log_store_seconds",
		"xce_raft_follower_log_store_seconds", "xce_raft_fsm_apply_seconds", "xce_raft_replication_seconds/n1",
		"xce_raft_replication_seconds/n2", "xce_raft_replication_seconds/n3"}
	// Followers report their own writes a moment after the leader commits.
	err := pollUntil(5*time.Second, func() bool {
		got = histogramCounts(t, reg)
		for name, c := range before {
			got[name] -= c
		}
		n := 0
		for _, name := range want {
			if got[name] > 0 {
				n++
			}
		}
		// Two of the three peers are the leader's followers.
		return n >= len(want)-1 && got["xce_raft_commit_seconds"] >= 20
	})
	if err != nil {
		t.Fatalf("raft's timings did not all arrive: %v", got)
	}
	// A second registry cannot take the process-wide reports over.
	if err := ExportRaftMetrics(prometheus.NewRegistry()); err != nil {
		t.Errorf("second call: %v", err)
	}
}
