package placement

import (
	"maps"
	"testing"

	"github.com/xce/xce/assign"
)

func TestHandoverWaits(t *testing.T) {
	cfg := assign.DefaultConfig()
	cfg.AcceptableRecoveryLag, cfg.MaxWarmupReplicas = 100, 2
	in := assign.Input{Config: cfg, Workers: []assign.Worker{
		{ID: "d", Capacity: 1, Drained: true, Lags: map[string]int64{"a": 0, "b": 0, "c": 0}},
		{ID: "w1", Capacity: 1, Lags: map[string]int64{"a": 5000, "b": 900}},
		{ID: "w2", Capacity: 1, Lags: map[string]int64{"a": 700}},
	}}
	res := assign.Result{Assignment: assign.Assignment{
		"a": {Active: "d", Standbys: []string{"w1"}, Warmups: []string{"w2"}},
		"b": {Active: "d", Standbys: []string{"w2"}},
		"c": {Active: "d"},
		"e": {Active: "w1"},
	}}
	got := handoverWaits(in, res)
	want := map[string]string{
		"a": "waiting for w2 to catch up (lag 700; caught up at 100 or less)",
		"b": "waiting for a copy elsewhere to report its lag",
		"c": "no copy elsewhere yet: waiting for a warm-up slot (max_warmup_replicas 2)",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	in.Workers = in.Workers[:1]
	if got := handoverWaits(in, res); got["a"] != "no other worker may run it" || len(got) != 3 {
		t.Fatalf("a lone drained worker: %q", got)
	}
}
