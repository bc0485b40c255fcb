package raftha

import (
	"net"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/xce/xce/ha/raftha/peernet"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// StartOn is Start as a node runs it: its peer port on ln, a listener the
// caller opened at PeerListen's address or inherited across an upgrade
// (the transport owns it from then on, and Shutdown closes it). With tls
// set the port speaks mutual TLS, and the members it accepts and dials
// follow raft's configuration as it changes. Unless cfg.CampaignAllowed is
// set, the node stands for election only while store takes writes.
func StartOn(cfg Config, fsm *state.FSM, store *persist.Store, ln net.Listener, tls *peernet.PeerTLS, logger hclog.Logger) (*Raft, error) {
	var live atomic.Pointer[Raft]
	var opts []peernet.StreamOption
	if tls != nil {
		t := *tls
		// Called at each handshake, on the stream layer's goroutines.
		t.Members = func() map[string]string { return peerMembers(live.Load()) }
		opts = append(opts, peernet.WithPeerTLS(t))
	}
	_, dialFrom := cfg.PeerListen()
	stream, err := peernet.NewStreamLayer(ln, cfg.PeerAddr, dialFrom, opts...)
	if err != nil {
		return nil, err
	}
	if cfg.CampaignAllowed == nil {
		// A node whose storage fails would win an election only to fail
		// its first write and step down again, churning terms.
		cfg.CampaignAllowed = func() error { return store.Health().Err }
	}
	b, err := Start(cfg, fsm, store, stream, logger)
	if err != nil {
		return nil, err
	}
	live.Store(b)
	return b, nil
}

// peerMembers is b's latest configuration as the peer port's TLS takes it
// (peer address → node id), or nil while it is not known: no backend yet,
// or one shut down (the config's peers stand in).
func peerMembers(b *Raft) map[string]string {
	if b == nil {
		return nil
	}
	members, _, _, err := b.Members()
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(members))
	for _, m := range members {
		out[m.PeerAddr] = m.ID
	}
	return out
}
