package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParsePlanInputErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"tasks":[{"id":"a"},{"id":"a"}]}`, `tasks[1].id: duplicate "a"`},
		{`{"tasks":[{"id":""}]}`, `tasks[0].id: empty`},
		{`{"tasks":[{"id":"a","stateful":true,"standby_replicas":-1}]}`, `tasks[0].standby_replicas: -1 is negative`},
		{`{"tasks":[{"id":"a"},{"id":"b","stateful":true,"standby_replicas":17}]}`, `tasks[1].standby_replicas: 17 is more than 16`},
		{`{"workers":[{"id":"W","capacity":-1}]}`, `workers[0].capacity: -1 is negative`},
		{`{"workers":[{"id":"W","capacity":1},{"id":"W","capacity":1}]}`, `workers[1].id: duplicate "W"`},
		{`{"tasks":[{"id":"a"}],"workers":[{"id":"W","capacity":1,"lags":{"b":0}}]}`, `workers[0].lags: unknown task "b"`},
		{`{"tasks":[{"id":"a"}],"workers":[{"id":"W","capacity":1,"lags":{"a":-5}}]}`, `workers[0].lags["a"]: -5 is negative`},
		{`{"tasks":[{"id":"a"}],"previous":{"b":{"active":"W"}}}`, `previous: unknown task "b"`},
		{`{"config":{"max_warmup_replicas":0}}`, `max_warmup_replicas`},
		{`{"config":{"probing_rebalance_interval":"soon"}}`, `config.probing_rebalance_interval`},
		{`{"tasks":[],"extra":1}`, `unknown field "extra"`},
		{`{"tasks":[{"id":"a","weight":70000}]}`, `tasks[0].weight: 70000 is outside 1..65536`},
		{`{"workers":[{"id":"W","capacity":1,"labels":{"zone":"a b"}}]}`, `workers[0].labels: label "zone": value "a b"`},
		{`{"tasks":[{"id":"a"}],"workers":[{"id":"W","capacity":1,"loads":{"a":-1}}]}`, `workers[0].loads["a"]: -1 is negative`},
		{`{"config":{"spread_by":["zone","zone"]}}`, `"zone" is listed twice`},
		{`{"config":{"balance":"random"}}`, `balance`},
		{`{"config":{"replace_delay":"-1s"}}`, `config.replace_delay`},
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

// departedInput is example 2 of docs/design.md, "The assignor", right after
// I1 died: the previous assignment still names I1, which is no longer among
// the workers. Standbys are caught up (lag 0).
const departedInput = `{
  "config": {"num_standby_replicas": 1},
  "tasks": [{"id":"T1","stateful":true},{"id":"T2","stateful":true},{"id":"T3","stateful":true},{"id":"T4","stateful":true}],
  "workers": [
    {"id":"I2","capacity":1,"lags":{"T2":0,"T1":0,"T4":0}},
    {"id":"I3","capacity":1,"lags":{"T3":0,"T2":0}}
  ],
  "previous": {
    "T1": {"active":"I1","standbys":["I2"]},
    "T2": {"active":"I2","standbys":["I3"]},
    "T3": {"active":"I3","standbys":["I1"]},
    "T4": {"active":"I1","standbys":["I2"]}
  }
}`

// planJSON writes input to a file and runs `xce assign plan --json` on it;
// it returns the file, for other runs, and the decoded plan.
func planJSON(t *testing.T, input string) (string, planOutput) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(file, []byte(input), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code := runCmd(t, assignCmd(), "plan", "--input", file, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, out)
	}
	var got planOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return file, got
}

// A previous assignment that names a departed worker is planned like any
// other: that worker's copies are lost, its actives go to their standbys.
func TestAssignPlanDepartedWorker(t *testing.T) {
	file, got := planJSON(t, departedInput)
	// I2 {T1,T4 | T2,T3}, I3 {T2,T3 | T1,T4}: one plan, no follow-up.
	want := map[string]placementJSON{
		"T1": {Active: "I2", Standbys: []string{"I3"}, Warmups: []string{}},
		"T2": {Active: "I3", Standbys: []string{"I2"}, Warmups: []string{}},
		"T3": {Active: "I3", Standbys: []string{"I2"}, Warmups: []string{}},
		"T4": {Active: "I2", Standbys: []string{"I3"}, Warmups: []string{}},
	}
	if !reflect.DeepEqual(got.Assignment, want) || got.Followup {
		t.Fatalf("got %+v followup %v, want %+v", got.Assignment, got.Followup, want)
	}
	if !reflect.DeepEqual(got.Departed, []string{"I1"}) {
		t.Fatalf("departed %v, want [I1]", got.Departed)
	}
	// I1's actives have no previous worker left: they move from nowhere.
	for _, m := range got.Moves {
		if m.From == "I1" {
			t.Fatalf("move %+v from the departed worker", m)
		}
	}
	if !slices.ContainsFunc(got.Moves, func(m moveJSON) bool { return m == moveJSON{Task: "T1", Kind: "active", To: "I2"} }) {
		t.Fatalf("moves %+v lack T1's active going to I2", got.Moves)
	}

	text, code := runCmd(t, assignCmd(), "plan", "--input", file)
	if code != exitOK || !strings.Contains(text, "departed workers (their copies are lost): I1") ||
		!strings.Contains(text, "T1    I2      I3") {
		t.Fatalf("exit %d, text output:\n%s", code, text)
	}
}

// standbysInput asks, with num_standby_replicas left at its default (0),
// for two standbys of T and none of U, on three workers.
const standbysInput = `{
  "tasks": [{"id":"T","stateful":true,"standby_replicas":2},{"id":"U","stateful":true}],
  "workers": [
    {"id":"W1","capacity":1,"lags":{"T":0}},
    {"id":"W2","capacity":1,"lags":{"T":0}},
    {"id":"W3","capacity":1,"lags":{"T":0,"U":0}}
  ],
  "previous": {"T": {"active":"W1","standbys":["W2"]}, "U": {"active":"W3"}}
}`

// A task's standby_replicas replaces num_standby_replicas for it, and the
// table and the JSON show the same plan.
func TestAssignPlanTaskStandbys(t *testing.T) {
	file, got := planJSON(t, standbysInput)
	want := map[string]placementJSON{
		"T": {Active: "W1", Standbys: []string{"W2", "W3"}, Warmups: []string{}},
		"U": {Active: "W3", Standbys: []string{}, Warmups: []string{}},
	}
	if !reflect.DeepEqual(got.Assignment, want) || got.Followup {
		t.Fatalf("got %+v followup %v, want %+v", got.Assignment, got.Followup, want)
	}
	if wantMoves := []moveJSON{{Task: "T", Kind: "standby", To: "W3"}}; !reflect.DeepEqual(got.Moves, wantMoves) {
		t.Fatalf("moves %+v, want %+v", got.Moves, wantMoves)
	}

	text, code := runCmd(t, assignCmd(), "plan", "--input", file)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, text)
	}
	for _, line := range []string{"T     W1      W2,W3", "U     W3", "1 moves; follow-up rebalance needed: false", "T standby: (none) -> W3"} {
		if !strings.Contains(text, line) {
			t.Fatalf("text output lacks %q:\n%s", line, text)
		}
	}
}

// A drained worker in the what-if input hands its active to its caught-up
// standby and keeps a standby of it.
func TestAssignPlanDrainedWorker(t *testing.T) {
	_, got := planJSON(t, `{
  "config": {"num_standby_replicas": 1},
  "tasks": [{"id":"T","stateful":true}],
  "workers": [
    {"id":"W1","capacity":1,"lags":{"T":0},"drained":true},
    {"id":"W2","capacity":1,"lags":{"T":0}},
    {"id":"W3","capacity":1}
  ],
  "previous": {"T": {"active":"W1","standbys":["W2"]}}
}`)
	want := map[string]placementJSON{"T": {Active: "W2", Standbys: []string{"W1", "W3"}, Warmups: []string{}}}
	if !reflect.DeepEqual(got.Assignment, want) || got.Followup {
		t.Fatalf("got %+v followup %v, want %+v", got.Assignment, got.Followup, want)
	}
}

// TestAssignPlanSpreadsByZone: the contract of issue-level names: worker
// labels, task weight and standby_replicas, config spread_by; three zones
// of two workers: every task's three copies land in three zones, and a
// frozen unspread previous assignment reports where spread is not met.
func TestAssignPlanSpreadsByZone(t *testing.T) {
	in := `{"config":{"spread_by":["zone"],"replace_delay":"0s","balance":"weight"},
"tasks":[{"id":"T1","stateful":true,"standby_replicas":2,"weight":3},{"id":"T2","stateful":true,"standby_replicas":2}],
"workers":[{"id":"a1","capacity":1,"labels":{"zone":"a"}},{"id":"a2","capacity":1,"labels":{"zone":"a"}},
{"id":"b1","capacity":1,"labels":{"zone":"b"}},{"id":"b2","capacity":1,"labels":{"zone":"b"}},
{"id":"c1","capacity":1,"labels":{"zone":"c"}},{"id":"c2","capacity":1,"labels":{"zone":"c"}}]}`
	_, got := planJSON(t, in)
	for _, id := range []string{"T1", "T2"} {
		p := got.Assignment[id]
		zones := map[byte]bool{}
		for _, w := range append([]string{p.Active}, p.Standbys...) {
			zones[w[0]] = true
		}
		if len(zones) != 3 {
			t.Fatalf("%s: %+v spans %d zones, want 3", id, p, len(zones))
		}
	}
	if len(got.Unspread) != 0 {
		t.Fatalf("unspread %v", got.Unspread)
	}
	frozen := strings.Replace(in, `"tasks"`, `"frozen":true,"previous":{"T1":{"active":"a1","standbys":["a2","b1"]}},"tasks"`, 1)
	_, got = planJSON(t, frozen)
	want := shortfallJSON{Task: "T1", Key: "zone", Have: 2, Want: 3, Reason: "frozen"}
	if len(got.Unspread) != 1 || got.Unspread[0] != want {
		t.Fatalf("frozen: unspread %v, want [%v]", got.Unspread, want)
	}
}

// TestAssignPlanReplaceDelay: with replace_delay, a worker previous names
// that is missing is planned as away: its standby is kept and no new copy
// is made.
func TestAssignPlanReplaceDelay(t *testing.T) {
	in := `{"config":{"num_standby_replicas":1%s},"tasks":[{"id":"T1","stateful":true}],
"workers":[{"id":"I2","capacity":1,"lags":{"T1":0}},{"id":"I3","capacity":1}],
"previous":{"T1":{"active":"I1","standbys":["I2"]}}}`
	_, got := planJSON(t, fmt.Sprintf(in, ""))
	if p := got.Assignment["T1"]; p.Active != "I2" || len(p.Standbys) != 1 || p.Standbys[0] != "I3" {
		t.Fatalf("no delay: %+v, want I2 active and a new standby on I3", p)
	}
	_, got = planJSON(t, fmt.Sprintf(in, `,"replace_delay":"30s"`))
	if p := got.Assignment["T1"]; p.Active != "I2" || len(p.Standbys) != 1 || p.Standbys[0] != "I1" || len(got.Departed) != 0 {
		t.Fatalf("delay: %+v (departed %v), want I2 active and I1 kept as a standby", p, got.Departed)
	}
}
