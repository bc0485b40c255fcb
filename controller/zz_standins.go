//go:build !membership_merged

package controller

// TEMPORARY STAND-INS, to be deleted at merge.
//
// These name, inside this package, what the raft/state/autopilot/configs
// side of membership provides. At merge, delete this file and enable
// names_merged.go (remove its build constraint line): it binds each name
// below to the real one.

import (
	"sync"
	"time"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/state"
)

// memberRecord stands in for state.MemberRecord.
type memberRecord = struct{ ID, PeerAddr, ClientAddr string }

// logFormatMembers stands in for state.LogFormatMembers.
const logFormatMembers = 3

// encodeSetMember stands in for state.EncodeSetMember: a no-op command.
func encodeSetMember(memberRecord) ([]byte, error) {
	return (&state.Command{Type: state.CmdNoop}).Encode(), nil
}

// encodeRemoveMember stands in for state.EncodeRemoveMember.
func encodeRemoveMember(string) ([]byte, error) {
	return (&state.Command{Type: state.CmdNoop}).Encode(), nil
}

// fsmMembers stands in for (*state.FSM).Members.
func fsmMembers(*state.FSM) []memberRecord { return nil }

// setRaftJoin stands in for setting raftha.Config.Join.
func setRaftJoin(*raftha.Config, bool) {}

// configJoin stands in for configs.Config.Join, setConfigJoin for setting
// it (tests).
func configJoin(c *configs.Config) []string {
	standinJoinMu.Lock()
	defer standinJoinMu.Unlock()
	return standinJoin[c]
}

func setConfigJoin(c *configs.Config, addrs []string) {
	standinJoinMu.Lock()
	defer standinJoinMu.Unlock()
	standinJoin[c] = addrs
}

var (
	standinJoinMu sync.Mutex
	standinJoin   = map[*configs.Config][]string{}
)

// autopilotConfig stands in for (*configs.Config).AutopilotConfig.
func autopilotConfig(*configs.Config) apConfig {
	return apConfig{StabilizationTime: 10 * time.Second, MaxLag: 1000, LastContactThreshold: time.Second}
}

// The autopilot's types stand in for package ha/autopilot's.
type (
	apConfig struct {
		StabilizationTime    time.Duration
		MaxLag               uint64
		LastContactThreshold time.Duration
		CleanupDeadServers   bool
		DeadServerTimeout    time.Duration
	}
	apServer struct {
		ID            string
		Voter, Leader bool
		LastContact   time.Duration
		Lag           uint64
	}
	apServerState struct {
		ID      string
		Healthy bool
		State   string
	}
	apAction struct {
		Kind       apKind
		ID, Reason string
	}
	apDecision struct {
		Servers []apServerState
		Action  *apAction
	}
	apKind int
)

const (
	apPromote apKind = iota + 1
	apRemove
)

// newAutopilot stands in for autopilot.New: it promotes a healthy
// non-voter once it has been healthy for the stabilization time, and
// removes nothing.
func newAutopilot(cfg apConfig) stepper {
	return &standinPilot{cfg: cfg, since: map[string]time.Time{}}
}

type standinPilot struct {
	cfg   apConfig
	since map[string]time.Time
}

func (p *standinPilot) Step(servers []apServer, pending bool, now time.Time) apDecision {
	var d apDecision
	for _, s := range servers {
		healthy := s.Leader || (s.LastContact >= 0 && s.LastContact <= p.cfg.LastContactThreshold && s.Lag <= p.cfg.MaxLag)
		st := "voter"
		if !s.Voter {
			st = "catching_up"
			if healthy {
				if _, ok := p.since[s.ID]; !ok {
					p.since[s.ID] = now
				}
				st = "stabilizing"
				if now.Sub(p.since[s.ID]) >= p.cfg.StabilizationTime && !pending && d.Action == nil {
					st = "promoting"
					d.Action = &apAction{Kind: apPromote, ID: s.ID, Reason: "healthy for the stabilization time"}
				}
			} else {
				delete(p.since, s.ID)
			}
		}
		d.Servers = append(d.Servers, apServerState{ID: s.ID, Healthy: healthy, State: st})
	}
	return d
}
