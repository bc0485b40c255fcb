package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	xcev1 "github.com/xce/xce/proto/xce/v1"
)

// The largest latency of the answered submits that overlap the window:
// those begun before and ending inside, inside, spanning it, begun inside
// and ending after; not those entirely before or after, not reads, not
// calls without an answer. Zero bounds take the whole run.
func TestMaxWriteLatency(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	op := func(kind Kind, out Outcome, call, ret int) Op {
		return Op{Kind: kind, Outcome: out, Call: at(call), Return: at(ret)}
	}
	from, to := at(100), at(200)
	for _, tc := range []struct {
		name     string
		ops      []Op
		from, to time.Time
		want     time.Duration
	}{
		{name: "none", from: from, to: to},
		{name: "before and after only", ops: []Op{op(Submit, OK, 0, 99), op(Submit, OK, 201, 900)}, from: from, to: to},
		{name: "ends inside", ops: []Op{op(Submit, OK, 50, 150), op(Submit, OK, 0, 99)}, from: from, to: to, want: 100 * time.Millisecond},
		{name: "spans the window", ops: []Op{op(Submit, OK, 90, 260), op(Submit, OK, 120, 130)}, from: from, to: to, want: 170 * time.Millisecond},
		{name: "begins inside, ends after", ops: []Op{op(Submit, Exists, 199, 499)}, from: from, to: to, want: 300 * time.Millisecond},
		{name: "touching the bounds", ops: []Op{op(Submit, OK, 40, 100), op(Submit, OK, 200, 230)}, from: from, to: to, want: 60 * time.Millisecond},
		{name: "reads and unanswered calls left out",
			ops:  []Op{op(Get, OK, 100, 900), op(Submit, Unknown, 100, 10000), op(Submit, OK, 150, 160)},
			from: from, to: to, want: 10 * time.Millisecond},
		{name: "the whole run", ops: []Op{op(Submit, OK, 0, 99), op(Submit, OK, 201, 900), op(Get, OK, 0, 5000)}, want: 699 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MaxWriteLatency(tc.ops, tc.from, tc.to); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// A node is caught up when its applied index reaches the commit index of
// the PRIMARY seen in the same look; without its answer or a PRIMARY's,
// it is not.
func TestCaughtUp(t *testing.T) {
	st := func(role xcev1.Role, commit, applied uint64) *xcev1.StatusResponse {
		return &xcev1.StatusResponse{Role: role, CommitIndex: commit, AppliedIndex: applied}
	}
	p, s := xcev1.Role_ROLE_PRIMARY, xcev1.Role_ROLE_STANDBY
	for _, tc := range []struct {
		name string
		sts  []*xcev1.StatusResponse
		want bool
	}{
		{"behind", []*xcev1.StatusResponse{st(p, 100, 100), st(s, 90, 90), st(s, 100, 100)}, false},
		{"reached", []*xcev1.StatusResponse{st(p, 100, 100), st(s, 100, 100), st(s, 100, 100)}, true},
		{"past a commit read earlier", []*xcev1.StatusResponse{st(p, 100, 99), st(s, 101, 101), nil}, true},
		{"no answer from it", []*xcev1.StatusResponse{st(p, 100, 100), nil, st(s, 100, 100)}, false},
		{"no PRIMARY", []*xcev1.StatusResponse{st(s, 100, 100), st(s, 100, 100), st(xcev1.Role_ROLE_ELECTING, 100, 100)}, false},
		{"it is the PRIMARY itself", []*xcev1.StatusResponse{st(s, 0, 0), st(p, 100, 100), nil}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := caughtUp(tc.sts, 1); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// The report's "snapshot" and "restarts" carry the fields docs/benchmarks.md
// names, and fewer tasks after a cold restart than acknowledged before it
// is the bench's error.
func TestReportRestartsAndSnapshot(t *testing.T) {
	r := &Report{
		Snapshot: &SnapshotResult{AtSeconds: 1, TookSeconds: 0.2, Bytes: 4096, Index: 9, MaxLatencyMsAround: 12, MaxLatencyMsRun: 15},
		Restarts: &Restarts{FollowerCatchupSeconds: 0.5, FollowerBehindEntries: 3000, ColdRestartSeconds: 1.5,
			ColdRestartReadySeconds: map[string]float64{"n1": 1.2}, TasksAcked: 10, TasksAfter: 10,
			NodeStats: []NodeStats{{ID: "n1", Snapshots: 1}}},
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Snapshot map[string]any `json:"snapshot"`
		Restarts map[string]any `json:"restarts"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"at_seconds", "took_seconds", "bytes", "index", "max_latency_ms_around", "max_latency_ms_run"} {
		if _, ok := got.Snapshot[k]; !ok {
			t.Errorf("snapshot lacks %q: %s", k, b)
		}
	}
	for _, k := range []string{"follower_catchup_seconds", "follower_behind_entries", "cold_restart_seconds", "cold_restart_ready_seconds",
		"tasks_acked", "tasks_after", "node_stats"} {
		if _, ok := got.Restarts[k]; !ok {
			t.Errorf("restarts lacks %q: %s", k, b)
		}
	}
	ns := got.Restarts["node_stats"].([]any)[0].(map[string]any)
	for _, k := range []string{"snapshot_capture_seconds", "snapshot_persist_seconds", "snapshot_bytes", "snapshots"} {
		if _, ok := ns[k]; !ok {
			t.Errorf("node_stats lacks %q: %s", k, b)
		}
	}
	if err := r.Err(); err != nil {
		t.Errorf("nothing lost: %v", err)
	}
	r.Restarts.TasksAfter = 9
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "10 acknowledged before it, 9 after") {
		t.Errorf("one lost: %v", err)
	}
	if b, _ := json.Marshal(&Report{}); strings.Contains(string(b), "snapshot") || strings.Contains(string(b), "restarts") {
		t.Errorf("a report without them names them: %s", b)
	}
}
