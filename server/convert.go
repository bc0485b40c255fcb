package server

import (
	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/ha/kafkaha"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/placement"
)

// settings are the parts' own configs, translated from the node's config.
type settings struct {
	raft      raftha.Config  // used with ha.backend raft
	kafkaHA   kafkaha.Config // used with ha.backend kafka
	fence     fence.Config   // used when kafka.brokers is set
	placement placement.Config
}

// convert takes the parts' settings from the node's config (configs owns
// the translation) and gives them the node's logger.
func convert(cfg *configs.Config, log zerolog.Logger) settings {
	s := settings{
		raft:      cfg.RaftConfig(),
		kafkaHA:   cfg.KafkaHAConfig(),
		fence:     cfg.FenceConfig(),
		placement: cfg.AssignorConfig(),
	}
	s.kafkaHA.Logger, s.fence.Logger = log, log
	return s
}
