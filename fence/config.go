package fence

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/xce/xce/internal/fielderr"
	"github.com/xce/xce/internal/kafkaopts"
)

// Config configures a Publisher.
type Config struct {
	Brokers []string
	// Security is the connections' TLS and SASL.
	Security kafkaopts.Security
	Topic    string
	// TransactionalID names the cluster's primary role:
	// <prefix>.<cluster_id>.primary.
	TransactionalID string
	// BatchMax caps the events of one transaction. Default 500. New takes
	// the default of BatchMax, TrimEvery and TxnTimeout when left zero.
	BatchMax int
	// TrimEvery is how often the published watermark goes back through the
	// log. Default 100ms: every snapshot holds the events not yet trimmed,
	// and a restart decodes them.
	TrimEvery time.Duration
	// TxnTimeout is the transaction timeout given to the coordinator.
	// Default 10s.
	TxnTimeout time.Duration
	Logger     zerolog.Logger
}

// DefaultConfig returns the defaults of every setting but the brokers, the
// transactional id and the logger; the config file's kafka.topic defaults
// to its Topic.
func DefaultConfig() Config {
	return Config{Topic: "xce.events", BatchMax: 500, TrimEvery: 100 * time.Millisecond, TxnTimeout: 10 * time.Second}
}

// withDefaults returns c with the defaults of BatchMax, TrimEvery and
// TxnTimeout in place of those left zero.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.BatchMax <= 0 {
		c.BatchMax = d.BatchMax
	}
	if c.TrimEvery <= 0 {
		c.TrimEvery = d.TrimEvery
	}
	if c.TxnTimeout <= 0 {
		c.TxnTimeout = d.TxnTimeout
	}
	return c
}

// maxTopicLen is Kafka's longest topic name.
const maxTopicLen = 249

// Validate reports every invalid setting as a fielderr.List, each named
// by its field; the connections' own (Security, checked by
// kafkaopts.Security.Validate) are named under Security. Brokers are not
// checked: a node without them runs the Discarder instead of a Publisher.
func (c Config) Validate() error {
	var l fielderr.List
	switch {
	case c.Topic == "":
		l.Add("Topic", "required")
	case len(c.Topic) > maxTopicLen || !topicChars(c.Topic):
		l.Add("Topic", "must be 1-%d characters of [A-Za-z0-9._-]", maxTopicLen)
	case c.Topic == "." || c.Topic == "..":
		l.Add("Topic", `must not be "." or ".."`)
	}
	if c.TransactionalID == "" {
		l.Add("TransactionalID", "required")
	}
	if c.BatchMax < 1 {
		l.Add("BatchMax", "must be at least 1 (got %d)", c.BatchMax)
	}
	if c.TrimEvery <= 0 {
		l.Add("TrimEvery", "must be positive (got %s)", c.TrimEvery)
	}
	if c.TxnTimeout <= 0 {
		l.Add("TxnTimeout", "must be positive (got %s)", c.TxnTimeout)
	}
	l.AddUnder("Security", c.Security.Validate())
	return l.Err()
}

// topicChars reports whether s holds only the characters Kafka allows in
// a topic name.
func topicChars(s string) bool {
	for _, r := range s {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
