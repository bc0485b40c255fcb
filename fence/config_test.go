package fence

import (
	"strings"
	"testing"
	"time"

	"github.com/xce/xce/internal/testutil"
)

func TestConfigValidate(t *testing.T) {
	valid := DefaultConfig()
	valid.TransactionalID = "xce.local.primary"
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string // "" for valid
	}{
		{"defaults", func(c *Config) {}, ""},
		{"topic required", func(c *Config) { c.Topic = "" }, "topic: required"},
		{"topic chars", func(c *Config) { c.Topic = "xce events" }, "topic: must be 1-249 characters of [A-Za-z0-9._-]"},
		{"topic too long", func(c *Config) { c.Topic = strings.Repeat("t", 250) }, "topic: must be 1-249 characters"},
		{"topic max length", func(c *Config) { c.Topic = strings.Repeat("t", 249) }, ""},
		{"topic dot", func(c *Config) { c.Topic = "." }, `topic: must not be "." or ".."`},
		{"transactional id required", func(c *Config) { c.TransactionalID = "" }, "transactional_id: required"},
		{"batch zero", func(c *Config) { c.BatchMax = 0 }, "batch_max: must be at least 1 (got 0)"},
		{"trim zero", func(c *Config) { c.TrimEvery = 0 }, "trim_every: must be positive (got 0s)"},
		{"txn timeout negative", func(c *Config) { c.TxnTimeout = -time.Second }, "txn_timeout: must be positive (got -1s)"},
	} {
		c := valid
		tc.edit(&c)
		testutil.CheckErr(t, tc.name, c.Validate(), tc.want)
	}
	if c := (Config{Topic: "t", TransactionalID: "x"}).withDefaults(); c.Validate() != nil || c.BatchMax != 500 {
		t.Errorf("zero settings do not take the defaults: %+v", c)
	}
}
