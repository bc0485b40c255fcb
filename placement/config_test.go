package placement

import (
	"testing"
	"time"

	"github.com/xce/xce/internal/testutil"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string // "" for valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"session too short", func(c *Config) { c.SessionTimeout = 100 * time.Millisecond }, "session_timeout: must be between 500ms and 1h0m0s (got 100ms)"},
		{"heartbeat too short", func(c *Config) { c.HeartbeatInterval = 10 * time.Millisecond }, "heartbeat_interval: must be at least 50ms (got 10ms)"},
		{"heartbeat above half", func(c *Config) { c.HeartbeatInterval = 6 * time.Second }, "heartbeat_interval: must be at most half of session_timeout (6s > 10s/2)"},
		{"heartbeat at half", func(c *Config) { c.HeartbeatInterval = 5 * time.Second }, ""},
		{"negative margin", func(c *Config) { c.GrantMargin = -time.Second }, "grant_margin: must not be negative (got -1s)"},
		{"margin leaves no lease", func(c *Config) { c.GrantMargin = 10 * time.Second }, "grant_margin: session_timeout − grant_margin (the active lease, 0s) must exceed heartbeat_interval (1s)"},
		{"lease at the heartbeat interval", func(c *Config) { c.GrantMargin = 9 * time.Second }, "grant_margin: session_timeout − grant_margin (the active lease, 1s) must exceed heartbeat_interval (1s)"},
		{"lease above the heartbeat interval", func(c *Config) { c.GrantMargin = 8 * time.Second }, ""},
		{"negative replace delay", func(c *Config) { c.ReplaceDelay = -time.Second }, "replace_delay: must be between 0s and 24h0m0s (got -1s)"},
		{"replace delay above a day", func(c *Config) { c.ReplaceDelay = 25 * time.Hour }, "replace_delay: must be between 0s and 24h0m0s (got 25h0m0s)"},
		{"replace delay of a day", func(c *Config) { c.ReplaceDelay = MaxReplaceDelay }, ""},
		{"bad spread key", func(c *Config) { c.Assign.SpreadBy = []string{""} }, "assign.spread_by"},
		{"default margin at the shortest session", func(c *Config) {
			c.SessionTimeout, c.HeartbeatInterval, c.GrantMargin = MinSessionTimeout, MinSessionTimeout/2, 0
		}, ""},
		{"assign settings", func(c *Config) { c.Assign.MaxWarmupReplicas = 0 }, "max_warmup_replicas: must be at least 1"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		testutil.CheckErr(t, tc.name, c.Validate(), tc.want)
	}
}

// New takes the defaults for the loop's timings left zero, and a Settle
// left zero is the session timeout.
func TestNewFillsTheLoopTimings(t *testing.T) {
	c := Config{Assign: DefaultConfig().Assign, SessionTimeout: 3 * time.Second, HeartbeatInterval: time.Second}.withDefaults()
	if c.GrantMargin != 600*time.Millisecond || c.ActiveLease() != 2400*time.Millisecond {
		t.Fatalf("default margin %s, lease %s; want session_timeout/5 and the rest", c.GrantMargin, c.ActiveLease())
	}
	if c.Settle != 3*time.Second || c.Tick != DefaultConfig().Tick || c.TaskReplan != DefaultConfig().TaskReplan {
		t.Fatalf("withDefaults: %+v", c)
	}
}

// TestTaskReplanAfter: a plan caused only by new or deleted tasks waits
// ten times as long as the last plan took, at least a tick and at most
// TaskReplan.
func TestTaskReplanAfter(t *testing.T) {
	c := Config{Tick: 100 * time.Millisecond, TaskReplan: time.Second}
	for _, tc := range []struct{ took, want time.Duration }{
		{0, 100 * time.Millisecond},
		{2 * time.Millisecond, 100 * time.Millisecond},
		{10 * time.Millisecond, 100 * time.Millisecond},
		{20 * time.Millisecond, 200 * time.Millisecond},
		{100 * time.Millisecond, time.Second},
		{3 * time.Second, time.Second},
	} {
		if got := c.taskReplanAfter(tc.took); got != tc.want {
			t.Errorf("after a plan of %v: %v, want %v", tc.took, got, tc.want)
		}
	}
}
