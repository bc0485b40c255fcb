package autopilot

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// Servers in a compact notation: "n1:L" leader, "n2:V" healthy voter,
// "n3:v" unhealthy voter, "n4:N" healthy non-voter, "n5:n" unhealthy
// non-voter.
func servers(spec string) []Server {
	var out []Server
	for _, f := range strings.Fields(spec) {
		id, k, _ := strings.Cut(f, ":")
		s := Server{ID: id, LastContact: 10 * time.Millisecond}
		switch k {
		case "L":
			s.Voter, s.Leader, s.LastContact = true, true, 0
		case "V":
			s.Voter = true
		case "v":
			s.Voter, s.LastContact = true, -1
		case "N":
		case "n":
			s.Lag = 1 << 20
		default:
			panic(k)
		}
		out = append(out, s)
	}
	return out
}

type step struct {
	at      float64 // seconds after t0
	spec    string
	pending bool
	want    string // "" no action, "promote n4", "remove n2"
}

func actionString(a *Action) string {
	if a == nil {
		return ""
	}
	return a.Kind.String() + " " + a.ID
}

func TestStepTable(t *testing.T) {
	cleanup := DefaultConfig()
	cleanup.CleanupDeadServers = true
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"a stable cluster does nothing", DefaultConfig(), []step{
			{0, "n1:L n2:V n3:V", false, ""}, {100, "n1:L n2:V n3:V", false, ""}}},
		{"promote after stabilization", DefaultConfig(), []step{
			{0, "n1:L n2:V n3:V n4:N", false, ""},
			{9.999, "n1:L n2:V n3:V n4:N", false, ""},
			{10, "n1:L n2:V n3:V n4:N", false, "promote n4"}}},
		{"no action while pending", DefaultConfig(), []step{
			{0, "n1:L n2:V n3:V n4:N", false, ""},
			{20, "n1:L n2:V n3:V n4:N", true, ""},
			{21, "n1:L n2:V n3:V n4:N", false, "promote n4"}}},
		{"a flap restarts stabilization", DefaultConfig(), []step{
			{0, "n1:L n4:N", false, ""},
			{5, "n1:L n4:n", false, ""},
			{6, "n1:L n4:N", false, ""},
			{15, "n1:L n4:N", false, ""},
			{16, "n1:L n4:N", false, "promote n4"}}},
		{"catching up is never promoted", DefaultConfig(), []step{
			{0, "n1:L n4:n", false, ""}, {1000, "n1:L n4:n", false, ""}}},
		{"oldest healthy first", DefaultConfig(), []step{
			{0, "n1:L n5:N", false, ""},
			{3, "n1:L n4:N n5:N", false, ""},
			{13, "n1:L n4:N n5:N", false, "promote n5"}}},
		{"ties go by id", DefaultConfig(), []step{
			{0, "n1:L n5:N n4:N", false, ""},
			{10, "n1:L n5:N n4:N", false, "promote n4"}}},
		{"zero stabilization promotes at once", Config{MaxLag: 1, LastContactThreshold: time.Second, DeadServerTimeout: time.Second}, []step{
			{0, "n1:L n4:N", false, "promote n4"}}},
		{"dead voter kept without cleanup", DefaultConfig(), []step{
			{0, "n1:L n2:V n3:v n4:N", false, ""},
			{40, "n1:L n2:V n3:v n4:N", false, "promote n4"}}},
		{"dead voter replaced: removed, then the replacement promoted", cleanup, []step{
			{0, "n1:L n2:V n3:v n4:N", false, ""},
			{29, "n1:L n2:V n3:v n4:N", false, "promote n4"}, // not dead for long enough yet
			{30, "n1:L n2:V n3:v n4:N", false, "remove n3"},
			{30.1, "n1:L n2:V n4:N", true, ""},
			{31, "n1:L n2:V n4:N", false, "promote n4"}}},
		{"dead voter kept without a replacement", cleanup, []step{
			{0, "n1:L n2:V n3:v", false, ""}, {100, "n1:L n2:V n3:v", false, ""},
			{100, "n1:L n2:V n3:v n4:n", false, ""}, {200, "n1:L n2:V n3:v n4:n", false, ""}}},
		{"replacement must be stabilized", cleanup, []step{
			{0, "n1:L n2:V n3:v", false, ""},
			{100, "n1:L n2:V n3:v n4:N", false, ""},
			{109, "n1:L n2:V n3:v n4:N", false, ""},
			{110, "n1:L n2:V n3:v n4:N", false, "remove n3"}}},
		{"never below a healthy quorum", cleanup, []step{
			// 5 voters, 3 dead: removing one leaves 4 voters with 2 healthy.
			{0, "n1:L n2:V n3:v n4:v n5:v n6:N", false, ""},
			{100, "n1:L n2:V n3:v n4:v n5:v n6:N", false, "promote n6"}}},
		{"two dead of five: one at a time, oldest first", cleanup, []step{
			{0, "n1:L n2:V n3:V n4:v n6:N n7:N", false, ""},
			{5, "n1:L n2:V n3:v n4:v n6:N n7:N", false, ""},
			{35, "n1:L n2:V n3:v n4:v n6:N n7:N", false, "remove n4"},
			{36, "n1:L n2:V n3:v n6:N n7:N", false, "remove n3"},
			{37, "n1:L n2:V n6:N n7:N", false, "promote n6"}}},
		{"the leader is never removed", cleanup, []step{
			{0, "n1:L n2:V n3:V n4:N", false, ""},
			{100, "n1:L n2:V n3:V n4:N", false, "promote n4"}}},
		{"a dead voter that recovers is kept", cleanup, []step{
			{0, "n1:L n2:V n3:v n4:N", false, ""},
			{29, "n1:L n2:V n3:V n4:N", false, "promote n4"},
			{31, "n1:L n2:V n3:v n4:N", false, "promote n4"}}},
		{"a removed server is forgotten", DefaultConfig(), []step{
			{0, "n1:L n4:N", false, ""},
			{5, "n1:L", false, ""},
			{6, "n1:L n4:N", false, ""},
			{15, "n1:L n4:N", false, ""},
			{16, "n1:L n4:N", false, "promote n4"}}},
	} {
		a := New(tc.cfg)
		for i, s := range tc.steps {
			d := a.Step(servers(s.spec), s.pending, at(s.at))
			if got := actionString(d.Action); got != s.want {
				t.Errorf("%s, step %d (%gs %q pending=%v): action %q, want %q", tc.name, i, s.at, s.spec, s.pending, got, s.want)
			}
		}
	}
}

// The states name what autopilot makes of each server.
func TestStepStates(t *testing.T) {
	a := New(DefaultConfig())
	a.Step(servers("n1:L n2:v n4:N n5:n n6:N"), false, at(0))
	d := a.Step(servers("n1:L n2:v n4:N n5:n n6:N n7:N"), false, at(10))
	want := map[string]string{"n1": "voter true", "n2": "voter false", "n4": "promoting true", "n5": "catching_up false",
		"n6": "nonvoter true", "n7": "stabilizing true"}
	if len(d.States) != len(want) {
		t.Fatalf("states %+v", d.States)
	}
	for i, st := range d.States {
		if i > 0 && d.States[i-1].ID >= st.ID {
			t.Fatalf("states not sorted by id: %+v", d.States)
		}
		if got := fmt.Sprint(st.State, " ", st.Healthy); got != want[st.ID] {
			t.Errorf("%s: %s, want %s", st.ID, got, want[st.ID])
		}
		if st.Healthy == st.HealthySince.IsZero() || st.Healthy != st.UnhealthySince.IsZero() {
			t.Errorf("%s: since times %+v", st.ID, st)
		}
	}
	if d.States[6-1].HealthySince != at(10) || d.States[2].HealthySince != at(0) {
		t.Errorf("healthy since: %+v", d.States)
	}
}

// A server removed and added again under the same id between two steps
// (so that no step saw it gone) starts its stabilization afresh once
// forgotten.
func TestForgetRestartsStabilization(t *testing.T) {
	a := New(DefaultConfig())
	a.Step(servers("n1:L n2:v n3:v n4:N"), false, at(0))
	a.Forget("n4")
	d := a.Step(servers("n1:L n2:v n3:v n4:N"), false, at(20))
	if d.Action != nil {
		t.Fatalf("promoted a forgotten server at once: %+v", d.Action)
	}
	for _, st := range d.States {
		if st.ID == "n4" && (st.State != "stabilizing" || st.HealthySince != at(20)) {
			t.Errorf("n4 after Forget: %+v, want stabilizing since %v", st, at(20))
		}
	}
}

func TestHealthy(t *testing.T) {
	c := DefaultConfig()
	for _, tc := range []struct {
		s    Server
		want bool
	}{
		{Server{Leader: true, LastContact: -1, Lag: 1 << 30}, true},
		{Server{LastContact: 0}, true},
		{Server{LastContact: 2 * time.Second, Lag: 1024}, true},
		{Server{LastContact: 2*time.Second + 1}, false},
		{Server{LastContact: time.Millisecond, Lag: 1025}, false},
		{Server{LastContact: -1}, false},
	} {
		if got := c.Healthy(tc.s); got != tc.want {
			t.Errorf("Healthy(%+v) = %v", tc.s, got)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"cleanup on", func(c *Config) { c.CleanupDeadServers = true }, ""},
		{"zero stabilization", func(c *Config) { c.StabilizationTime = 0 }, ""},
		{"negative stabilization", func(c *Config) { c.StabilizationTime = -1 }, "stabilization_time: must be between 0s and 24h0m0s (got -1ns)"},
		{"zero max lag", func(c *Config) { c.MaxLag = 0 }, "max_lag: must be between 1 and 1099511627776 (got 0)"},
		{"zero contact", func(c *Config) { c.LastContactThreshold = 0 }, "last_contact_threshold: must be between 1ns and 24h0m0s (got 0s)"},
		{"zero dead timeout", func(c *Config) { c.DeadServerTimeout = 0 }, "dead_server_timeout: must be between 1ns and 24h0m0s (got 0s)"},
		{"dead below contact", func(c *Config) { c.DeadServerTimeout = time.Second }, "dead_server_timeout: must not be less than last_contact_threshold (1s < 2s)"},
		{"huge", func(c *Config) { c.StabilizationTime = 25 * time.Hour }, "stabilization_time: must be between"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Random histories: autopilot never promotes a server that has not been
// healthy at every step of the last StabilizationTime, never removes the
// leader, a non-voter or a voter that is not dead for DeadServerTimeout,
// never leaves the remaining voters without a healthy quorum, and never
// acts while a change is pending.
func TestStepProperties(t *testing.T) {
	cfg := Config{StabilizationTime: 3 * time.Second, MaxLag: 10, LastContactThreshold: time.Second, CleanupDeadServers: true, DeadServerTimeout: 5 * time.Second}
	ids := []string{"a", "b", "c", "d", "e", "f", "g"}
	kinds := map[Kind]int{}
	for seed := range 300 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		a := New(cfg)
		// The test's own record: present servers, and since when each
		// has been healthy / unhealthy without a break.
		members := map[string]*Server{}
		healthySince, unhealthySince := map[string]time.Time{}, map[string]time.Time{}
		for _, id := range ids[:3] {
			members[id] = &Server{ID: id, Voter: true}
		}
		members["a"].Leader = true
		now := t0
		actions := 0
		for stepN := range 200 {
			now = now.Add(time.Duration(rng.IntN(2000)) * time.Millisecond)
			// Mutate health, occasionally add a non-voter.
			for _, s := range members {
				switch rng.IntN(6) {
				case 0:
					s.LastContact = -1
				case 1:
					s.Lag = uint64(rng.IntN(30))
				default:
					s.LastContact, s.Lag = time.Duration(rng.IntN(1200))*time.Millisecond, uint64(rng.IntN(12))
				}
			}
			if rng.IntN(10) == 0 {
				id := ids[rng.IntN(len(ids))]
				if _, ok := members[id]; !ok {
					members[id] = &Server{ID: id, LastContact: -1}
				}
			}
			var list []Server
			for _, id := range ids {
				if s, ok := members[id]; ok {
					list = append(list, *s)
					if cfg.Healthy(*s) {
						delete(unhealthySince, id)
						if _, ok := healthySince[id]; !ok {
							healthySince[id] = now
						}
					} else {
						delete(healthySince, id)
						if _, ok := unhealthySince[id]; !ok {
							unhealthySince[id] = now
						}
					}
				} else {
					delete(healthySince, id)
					delete(unhealthySince, id)
				}
			}
			pending := rng.IntN(5) == 0
			d := a.Step(list, pending, now)
			where := fmt.Sprintf("seed %d step %d", seed, stepN)
			if len(d.States) != len(list) {
				t.Fatalf("%s: %d states for %d servers", where, len(d.States), len(list))
			}
			act := d.Action
			if act == nil {
				continue
			}
			actions++
			kinds[act.Kind]++
			if pending {
				t.Fatalf("%s: %v while pending", where, act)
			}
			s := members[act.ID]
			if s == nil {
				t.Fatalf("%s: action on unknown %s", where, act.ID)
			}
			switch act.Kind {
			case Promote:
				hs, ok := healthySince[act.ID]
				if s.Voter || !ok || now.Sub(hs) < cfg.StabilizationTime {
					t.Fatalf("%s: promoted %+v healthy since %v (ok %v)", where, *s, hs, ok)
				}
				s.Voter = true
			case Remove:
				us, ok := unhealthySince[act.ID]
				if s.Leader || !s.Voter || !ok || now.Sub(us) < cfg.DeadServerTimeout {
					t.Fatalf("%s: removed %+v unhealthy since %v (ok %v)", where, *s, us, ok)
				}
				voters, healthy := 0, 0
				for id, m := range members {
					if m.Voter && id != act.ID {
						voters++
						if cfg.Healthy(*m) {
							healthy++
						}
					}
				}
				if healthy < voters/2+1 {
					t.Fatalf("%s: removing %s leaves %d healthy of %d voters", where, act.ID, healthy, voters)
				}
				delete(members, act.ID)
			default:
				t.Fatalf("%s: action %+v", where, act)
			}
		}
		if seed == 0 && actions == 0 {
			t.Fatal("seed 0 took no action: the generator exercises nothing")
		}
	}
	if kinds[Promote] == 0 || kinds[Remove] == 0 {
		t.Fatalf("actions taken %v: the generator does not exercise both kinds", kinds)
	}
	t.Logf("actions: %v", kinds)
}
