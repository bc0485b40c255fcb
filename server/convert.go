package server

import (
	"github.com/rs/zerolog"

	"github.com/xce/xce/assign"
	"github.com/xce/xce/configs"
	"github.com/xce/xce/fence"
	"github.com/xce/xce/ha/kafkaha"
	"github.com/xce/xce/ha/succession"
	"github.com/xce/xce/placement"
)

// settings are the parts' own configs, translated from the node's config.
type settings struct {
	kafkaHA   kafkaha.Config // used with ha.backend kafka
	fence     fence.Config   // used when kafka.brokers is set
	placement placement.Config
}

// convert is the one place that translates configs.Config into the
// configs of the parts the server wires.
func convert(cfg *configs.Config, log zerolog.Logger) settings {
	coord, state, txn := kafkaha.Names(cfg.Kafka.TransactionalIDPrefix, cfg.ClusterID)
	a := cfg.Assignor
	return settings{
		kafkaHA: kafkaha.Config{
			Brokers: cfg.Kafka.Brokers, Member: cfg.NodeID, Role: "primary",
			CoordTopic: coord, StateTopic: state, TransactionalID: txn,
			Lease: succession.LeaseConfig{
				LeaseMillis: cfg.HA.Lease.Milliseconds(), RenewMillis: cfg.HA.Renew.Milliseconds(),
				StaggerMillis: cfg.HA.Stagger.Milliseconds(),
			},
			SnapshotInterval: cfg.Raft.SnapshotInterval.Duration, SnapshotThreshold: cfg.Raft.SnapshotThreshold,
			Logger: log,
		},
		fence: fence.Config{
			Brokers:         cfg.Kafka.Brokers,
			Topic:           cfg.Kafka.Topic,
			TransactionalID: cfg.Kafka.TransactionalIDPrefix + "." + cfg.ClusterID + ".primary",
			Logger:          log,
		},
		placement: placement.Config{
			Assign: assign.Config{
				AcceptableRecoveryLag:    a.AcceptableRecoveryLag,
				MaxWarmupReplicas:        a.MaxWarmupReplicas,
				NumStandbyReplicas:       a.NumStandbyReplicas,
				ProbingRebalanceInterval: a.ProbingRebalanceInterval.Duration,
			},
			SessionTimeout:    a.SessionTimeout.Duration,
			HeartbeatInterval: a.HeartbeatInterval.Duration,
		},
	}
}
