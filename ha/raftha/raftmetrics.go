package raftha

import (
	"slices"
	"sync"

	metrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// raftSink exports a few of hashicorp/raft's own timings as Prometheus
// histograms: where a write's time goes (the leader's log write, a
// follower's, the replication round trip, the commit, the FSM), how often
// the leader lost its lease, and what the peer port refused. Raft reports
// through go-metrics' process-wide sink; every other key is dropped.
type raftSink struct {
	commit, leaderStore, followerStore, fsmApply prometheus.Histogram
	replication                                  *prometheus.HistogramVec
	leaseTimeouts                                prometheus.Counter
	peerRefused                                  *prometheus.CounterVec
}

// peerRefusedKey is the go-metrics key of the raft transport's refusals,
// labelled with the reason (raft.RefusalReasons).
var peerRefusedKey = []string{"raft", "net", "refused"}

var (
	raftMetricsOnce sync.Once
	raftMetricsErr  error
)

// ExportMetrics registers raft's timings with reg and routes raft's
// go-metrics reports to them. Raft reports process-wide, so the first
// call wins and later ones return its result.
func ExportMetrics(reg prometheus.Registerer) error {
	raftMetricsOnce.Do(func() {
		s := newRaftSink()
		if raftMetricsErr = s.register(reg); raftMetricsErr != nil {
			return
		}
		cfg := metrics.DefaultConfig("")
		cfg.EnableHostname = false
		cfg.EnableRuntimeMetrics = false
		_, raftMetricsErr = metrics.NewGlobal(cfg, s)
	})
	return raftMetricsErr
}

func newRaftSink() *raftSink {
	// 100 µs to about 1.6 s.
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 15)
	h := func(o prometheus.HistogramOpts) prometheus.Histogram {
		o.Buckets = buckets
		return prometheus.NewHistogram(o)
	}
	return &raftSink{
		commit:        h(prometheus.HistogramOpts{Name: "xce_raft_commit_seconds", Help: "Leader: from handing entries to raft to their commit (a majority stored them)."}),
		leaderStore:   h(prometheus.HistogramOpts{Name: "xce_raft_leader_log_store_seconds", Help: "Leader: writing a batch of entries to its own log (one sync of its segment log)."}),
		followerStore: h(prometheus.HistogramOpts{Name: "xce_raft_follower_log_store_seconds", Help: "Follower: writing the entries of an AppendEntries to its log."}),
		fsmApply:      h(prometheus.HistogramOpts{Name: "xce_raft_fsm_apply_seconds", Help: "Applying a batch of committed entries to the state machine."}),
		replication: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "xce_raft_replication_seconds", Help: "Leader: AppendEntries round trip to a follower.", Buckets: buckets,
		}, []string{"peer"}),
		leaseTimeouts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "xce_raft_leader_lease_timeouts_total", Help: "Times this node stepped down as leader for want of contact with a quorum.",
		}),
		peerRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "xce_peer_refused_total",
			Help: "Peer connections, RPCs and RPC responses the raft transport refused, by reason: too_large (over the RPC size limit), " +
				"too_many_connections, idle (no RPC within the idle timeout), slow (an RPC not read or answered in time), " +
				"bad_term (a term no node may hold), malformed (does not decode, truncated), first_byte (no RPC begun within the first-byte timeout), " +
				"evicted (a connection that had begun no RPC, closed at the connection cap to admit a newer one).",
		}, []string{"reason"}),
	}
}

func (s *raftSink) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{s.commit, s.leaderStore, s.followerStore, s.fsmApply, s.replication, s.leaseTimeouts, s.peerRefused} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	// Every reason shows, at zero until it happens.
	for _, reason := range raft.RefusalReasons {
		s.peerRefused.WithLabelValues(reason)
	}
	return nil
}

// AddSample takes raft's timings, in milliseconds.
func (s *raftSink) AddSample(key []string, ms float32) {
	if len(key) < 2 || key[0] != "raft" {
		return
	}
	sec := float64(ms) / 1000
	switch {
	case slices.Equal(key, []string{"raft", "commitTime"}):
		s.commit.Observe(sec)
	case slices.Equal(key, []string{"raft", "leader", "parallelStoreLogs"}):
		s.leaderStore.Observe(sec)
	case slices.Equal(key, []string{"raft", "rpc", "appendEntries", "storeLogs"}):
		s.followerStore.Observe(sec)
	case slices.Equal(key, []string{"raft", "fsm", "applyBatch"}), slices.Equal(key, []string{"raft", "fsm", "apply"}):
		s.fsmApply.Observe(sec)
	}
}

func (s *raftSink) AddSampleWithLabels(key []string, ms float32, labels []metrics.Label) {
	if !slices.Equal(key, []string{"raft", "replication", "appendEntries", "rpc"}) {
		s.AddSample(key, ms)
		return
	}
	for _, l := range labels {
		if l.Name == "peer_id" {
			s.replication.WithLabelValues(l.Value).Observe(float64(ms) / 1000)
		}
	}
}

func (s *raftSink) IncrCounter(key []string, val float32) {
	if slices.Equal(key, []string{"raft", "transition", "leader_lease_timeout"}) {
		s.leaseTimeouts.Add(float64(val))
	}
}

func (s *raftSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	if slices.Equal(key, peerRefusedKey) {
		for _, l := range labels {
			if l.Name == "reason" {
				s.peerRefused.WithLabelValues(l.Value).Add(float64(val))
			}
		}
		return
	}
	s.IncrCounter(key, val)
}

func (*raftSink) SetGauge([]string, float32)                            {}
func (*raftSink) SetGaugeWithLabels([]string, float32, []metrics.Label) {}
func (*raftSink) EmitKey([]string, float32)                             {}
