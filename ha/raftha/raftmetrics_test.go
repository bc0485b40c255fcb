package raftha

import (
	"context"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/internal/testutil"
	"github.com/xce/xce/state"
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
	if err := ExportMetrics(reg); err != nil {
		t.Fatal(err)
	}
	before := histogramCounts(t, reg)
	leader, stop := startCluster(t, 3)
	defer stop()
	cmd := (&state.Command{Type: state.CmdNoop}).Encode()
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
	defer func() {
		if t.Failed() {
			t.Logf("raft's timings: %v", got)
		}
	}()
	testutil.Eventually(t, 5*time.Second, "raft's timings all arrive", func() bool {
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
	// A second registry cannot take the process-wide reports over.
	if err := ExportMetrics(prometheus.NewRegistry()); err != nil {
		t.Errorf("second call: %v", err)
	}
}

// refusedCounts returns xce_peer_refused_total by reason.
func refusedCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "xce_peer_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// What the peer port refuses reaches xce_peer_refused_total, by reason;
// every reason is exported from the start.
func TestPeerRefusalsExported(t *testing.T) {
	reg := raftTestRegistry()
	if err := ExportMetrics(reg); err != nil {
		t.Fatal(err)
	}
	before := refusedCounts(t, reg)
	for _, reason := range raft.RefusalReasons {
		if _, ok := before[reason]; !ok {
			t.Errorf("reason %q not exported", reason)
		}
	}
	r, addr := startOne(t, nil)
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool { return r.View().State == ha.StateLeader })
	intruder, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(intruder.LocalAddr())}
	var vr raft.RequestVoteResponse
	if err := intruder.RequestVote("n1", raft.ServerAddress(addr), &raft.RequestVoteRequest{RPCHeader: hdr, Term: math.MaxUint64}, &vr); err == nil {
		t.Error("vote request at term 2^64-1 answered")
	}
	// An AppendEntries whose first entry declares 1 GiB of data.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frame := []byte{0, 0x81, 0xa7, 'E', 'n', 't', 'r', 'i', 'e', 's', 0x91, 0x81, 0xa4, 'D', 'a', 't', 'a', 0xc6, 0x40, 0, 0, 0}
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the oversized request was answered")
	}
	var got map[string]float64
	defer func() {
		if t.Failed() {
			t.Logf("refusals before %v, after %v", before, got)
		}
	}()
	testutil.Eventually(t, 5*time.Second, "the refusals exported", func() bool {
		got = refusedCounts(t, reg)
		return got["bad_term"] >= before["bad_term"]+1 && got["too_large"] >= before["too_large"]+1
	})
}
