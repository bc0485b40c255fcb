//go:build membership_merged

package controller

// The names the membership code of this package uses, bound to the real
// ones (state, ha/raftha, ha/autopilot, configs).

import (
	"github.com/xce/xce/configs"
	"github.com/xce/xce/ha/autopilot"
	"github.com/xce/xce/ha/raftha"
	"github.com/xce/xce/state"
)

type (
	memberRecord  = state.MemberRecord
	apConfig      = autopilot.Config
	apServer      = autopilot.Server
	apServerState = autopilot.ServerState
	apAction      = autopilot.Action
	apDecision    = autopilot.Decision
)

const (
	logFormatMembers = state.LogFormatMembers
	apPromote        = autopilot.Promote
	apRemove         = autopilot.Remove
)

var (
	encodeSetMember    = state.EncodeSetMember
	encodeRemoveMember = state.EncodeRemoveMember
)

func fsmMembers(f *state.FSM) []memberRecord          { return f.Members() }
func setRaftJoin(rc *raftha.Config, join bool)        { rc.Join = join }
func setConfigJoin(c *configs.Config, addrs []string) { c.Join = addrs }
func configJoin(c *configs.Config) []string           { return c.Join }
func autopilotConfig(c *configs.Config) apConfig      { return c.AutopilotConfig() }
func newAutopilot(cfg apConfig) stepper               { return autopilot.New(cfg) }
