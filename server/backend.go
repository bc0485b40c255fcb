package server

import (
	"fmt"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/controller"
	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/kafkaha"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/logging"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// backendMetrics are the Raft backend's metrics: raft's own timings, its
// snapshots' cost and its peer port's TLS refusals. They are registered
// whatever the backend, so that every node's /metrics lists the same
// series (at zero under Kafka).
type backendMetrics struct {
	snapshots *raftha.SnapshotMetrics
	peerTLS   *peernet.PeerTLSMetrics
}

func newBackendMetrics(reg *prometheus.Registry) (backendMetrics, error) {
	if err := raftha.ExportMetrics(reg); err != nil {
		return backendMetrics{}, fmt.Errorf("raft metrics: %w", err)
	}
	snaps, err := raftha.NewSnapshotMetrics(reg)
	if err != nil {
		return backendMetrics{}, fmt.Errorf("snapshot metrics: %w", err)
	}
	return backendMetrics{snapshots: snaps, peerTLS: peernet.NewPeerTLSMetrics(reg)}, nil
}

// newElection builds the node's election backend from its config: the
// Kafka-coordinated one, which has no peer port, or Raft on a peer
// listener opened here with listen (an upgrade's new process passes the
// one it inherited). peerLn is that listener, nil with Kafka.
func newElection(cfg *configs.Config, set settings, fsm *state.FSM, listen func(network, addr string) (net.Listener, error),
	m backendMetrics, log zerolog.Logger) (e controller.Election, peerLn net.Listener, err error) {
	if cfg.HA.Backend == configs.BackendKafka {
		k := set.kafkaHA
		log.Info().Str("coordination_topic", k.CoordTopic).Str("state_topic", k.StateTopic).Str("transactional_id", k.TransactionalID).
			Dur("lease", cfg.HA.Lease.Duration).Dur("renew", cfg.HA.Renew.Duration).Dur("stagger", cfg.HA.Stagger.Duration).
			Msg("ha.backend kafka: the role is coordinated through Kafka")
		return controller.Election{Name: configs.BackendKafka, ElectingHint: k.ElectingHint, Start: func(store *persist.Store) (ha.Backend, error) {
			return kafkaha.Start(k, fsm, store.Snaps)
		}}, nil, nil
	}
	rc := set.raft
	rc.Snapshots = m.snapshots
	addr, _ := rc.PeerListen()
	if peerLn, err = listen("tcp", addr); err != nil {
		return controller.Election{}, nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	tls, hlog := peerTLS(cfg, m.peerTLS, log), logging.NewHCLog(log, "raft")
	return controller.Election{Name: configs.BackendRaft, ElectingHint: rc.ElectingHint(), Start: func(store *persist.Store) (ha.Backend, error) {
		return raftha.StartOn(rc, fsm, store, peerLn, tls, hlog)
	}}, peerLn, nil
}

// peerTLS is the peer port's mutual TLS when peer_tls is set, nil
// otherwise (docs/operations.md, "TLS on the peer port").
func peerTLS(cfg *configs.Config, m *peernet.PeerTLSMetrics, log zerolog.Logger) *peernet.PeerTLS {
	files := cfg.PeerTLSFiles()
	if files.Empty() {
		return nil
	}
	peers := map[string]string{}
	for _, p := range cfg.Peers {
		peers[p.PeerAddr] = p.ID
	}
	return &peernet.PeerTLS{Files: files, Cluster: cfg.ClusterID, Peers: peers, Metrics: m,
		Logger: log.With().Str("component", "peer_tls").Logger()}
}
