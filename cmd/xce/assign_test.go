package main

import (
	"strings"
	"testing"
)

func TestParsePlanInputErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"tasks":[{"id":"a"},{"id":"a"}]}`, `tasks[1].id: duplicate "a"`},
		{`{"tasks":[{"id":""}]}`, `tasks[0].id: empty`},
		{`{"workers":[{"id":"W","capacity":-1}]}`, `workers[0].capacity: -1 is negative`},
		{`{"workers":[{"id":"W","capacity":1},{"id":"W","capacity":1}]}`, `workers[1].id: duplicate "W"`},
		{`{"tasks":[{"id":"a"}],"workers":[{"id":"W","capacity":1,"lags":{"b":0}}]}`, `workers[0].lags: unknown task "b"`},
		{`{"tasks":[{"id":"a"}],"workers":[{"id":"W","capacity":1,"lags":{"a":-5}}]}`, `workers[0].lags["a"]: -5 is negative`},
		{`{"tasks":[{"id":"a"}],"previous":{"b":{"active":"W"}}}`, `previous: unknown task "b"`},
		{`{"tasks":[{"id":"a"}],"previous":{"a":{"active":"X"}}}`, `previous["a"]: unknown worker "X"`},
		{`{"config":{"max_warmup_replicas":0}}`, `max_warmup_replicas`},
		{`{"config":{"probing_rebalance_interval":"soon"}}`, `config.probing_rebalance_interval`},
		{`{"tasks":[],"extra":1}`, `unknown field "extra"`},
		{`not json`, `input:`},
	} {
		_, err := parsePlanInput(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParsePlanInputDefaults(t *testing.T) {
	in, err := parsePlanInput(strings.NewReader(`{"config":{"num_standby_replicas":1},"tasks":[{"id":"0_0","stateful":true}],"workers":[{"id":"C1","capacity":1,"lags":{"0_0":0}}],"previous":{"0_0":{"active":"C1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.AcceptableRecoveryLag != 10000 || in.Config.MaxWarmupReplicas != 2 || in.Config.NumStandbyReplicas != 1 {
		t.Fatalf("config %+v", in.Config)
	}
	if len(in.Tasks) != 1 || len(in.Workers) != 1 || in.Previous["0_0"].Active != "C1" {
		t.Fatalf("input %+v", in)
	}
}
