package controller

import (
	"context"
	"time"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/ha/autopilot"
)

// Timings of the autopilot.
const (
	// autopilotEvery is how often the PRIMARY looks at the members.
	autopilotEvery = time.Second
	// recordGrace is how long a member record may name an id absent from
	// the configuration before the PRIMARY removes it: AddMember writes the
	// record just before it adds the member.
	recordGrace = 10 * time.Second
	// autopilotOpTimeout bounds one membership change.
	autopilotOpTimeout = 10 * time.Second
)

// autopilotService is the leader-only service that looks after the
// membership (docs/design.md, "Membership"): every tick it asks the
// autopilot's decision function about the members' health, performs at
// most the one action decided (promote a non-voter that caught up and
// stayed healthy, remove a dead server), keeps the decision for
// ListMembers, and brings the member table in line with the configuration.
type autopilotService struct {
	n *Node
	// absent is when each record's id was first seen missing from the
	// configuration.
	absent map[string]time.Time
}

func (*autopilotService) Name() string { return "autopilot" }

// Run serves the term until ctx ends. A backend without membership (the
// Kafka backend) has nothing to look after.
func (a *autopilotService) Run(ctx context.Context, _ uint64) error {
	m := a.n.membership()
	if m == nil {
		return nil
	}
	cfg := a.n.cfg.AutopilotConfig()
	pilot := autopilot.New(cfg)
	a.absent = make(map[string]time.Time)
	defer a.n.members.pilot.Store(nil)
	tick := time.NewTicker(autopilotEvery)
	defer tick.Stop()
	for {
		a.step(ctx, m, pilot, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// autopilotServers are the autopilot's inputs from the configuration: each
// member's suffrage, last contact and lag behind the leader's last index.
func autopilotServers(self string, members []ha.Member, lastIndex uint64) []autopilot.Server {
	servers := make([]autopilot.Server, 0, len(members))
	for _, mb := range members {
		s := autopilot.Server{ID: mb.ID, Voter: mb.Voter, Leader: mb.ID == self, LastContact: mb.LastContact}
		switch {
		case s.Leader:
			s.LastContact = 0
		case mb.MatchIndex <= lastIndex:
			s.Lag = lastIndex - mb.MatchIndex
		}
		servers = append(servers, s)
	}
	return servers
}

func (a *autopilotService) step(ctx context.Context, m ha.Membership, pilot stepper, now time.Time) {
	n := a.n
	members, _, pending, err := m.Members()
	if err != nil {
		n.log.Debug().Err(err).Msg("autopilot: no configuration to look at")
		return
	}
	for _, id := range n.members.takeRemoved() {
		pilot.Forget(id)
	}
	d := pilot.Step(autopilotServers(n.cfg.NodeID, members, m.LastIndex()), pending, now)
	n.members.pilot.Store(&d)
	if d.Action != nil {
		a.act(ctx, m, *d.Action)
		return
	}
	if !pending {
		a.reconcile(ctx, members, now)
	}
}

// act performs the autopilot's action.
func (a *autopilotService) act(ctx context.Context, m ha.Membership, act autopilot.Action) {
	n := a.n
	octx, cancel := context.WithTimeout(ctx, autopilotOpTimeout)
	defer cancel()
	switch act.Kind {
	case autopilot.Promote:
		n.log.Info().Str("member", act.ID).Str("reason", act.Reason).Msg("autopilot: promoting a non-voter to voter")
		if err := m.Promote(octx, act.ID); err != nil {
			n.log.Warn().Err(err).Str("member", act.ID).Msg("autopilot: promotion failed; deciding again next tick")
		}
	case autopilot.Remove:
		n.log.Warn().Str("member", act.ID).Str("reason", act.Reason).Msg("autopilot: removing a dead server")
		if err := m.Remove(octx, act.ID); err != nil {
			n.log.Warn().Err(err).Str("member", act.ID).Msg("autopilot: removal failed; deciding again next tick")
			return
		}
		if err := n.DeleteMember(octx, act.ID); err != nil {
			// The reconciliation removes the record later.
			n.log.Info().Err(err).Str("member", act.ID).Msg("autopilot: member record not removed yet")
		}
	}
}

// reconcile brings the member table in line with the configuration, once
// member commands may be written: a bootstrap peer (from this node's config
// peers) without a record gets one with its client address; a record of an
// id out of the configuration for recordGrace goes.
func (a *autopilotService) reconcile(ctx context.Context, members []ha.Member, now time.Time) {
	n := a.n
	if n.MembersWritable() != nil {
		return
	}
	in := make(map[string]ha.Member, len(members))
	for _, mb := range members {
		in[mb.ID] = mb
	}
	have := make(map[string]bool)
	for _, r := range n.fsm.Members() {
		have[r.ID] = true
		if _, ok := in[r.ID]; ok {
			delete(a.absent, r.ID)
			continue
		}
		since, ok := a.absent[r.ID]
		if !ok {
			a.absent[r.ID] = now
			continue
		}
		if now.Sub(since) < recordGrace {
			continue
		}
		if err := n.DeleteMember(ctx, r.ID); err != nil {
			n.log.Warn().Err(err).Str("member", r.ID).Msg("autopilot: removing the record of a former member failed")
			return
		}
		delete(a.absent, r.ID)
		n.log.Info().Str("member", r.ID).Msg("autopilot: removed the record of a server no longer in the configuration")
	}
	for _, p := range n.cfg.Peers {
		mb, ok := in[p.ID]
		if !ok || have[p.ID] || p.ClientAddr == "" {
			continue
		}
		if err := n.WriteMember(ctx, p.ID, mb.PeerAddr, p.ClientAddr); err != nil {
			n.log.Warn().Err(err).Str("member", p.ID).Msg("autopilot: writing a bootstrap peer's record failed")
			return
		}
		n.log.Info().Str("member", p.ID).Str("client_addr", p.ClientAddr).Msg("autopilot: recorded a bootstrap peer's client address")
	}
}
