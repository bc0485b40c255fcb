package controller

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/xce/xce/ha"
	"github.com/xce/xce/state"
)

// Startup phases, in the order a start goes through them (Status's
// startup; docs/operations.md, "Restarts").
const (
	// PhaseListen: the client port serves (NOT_READY until a role).
	PhaseListen = "listen"
	// PhaseStorageOpen: the data dir is open and checked.
	PhaseStorageOpen = "storage_open"
	// PhaseSnapshotRestore: the state machine holds the latest snapshot.
	PhaseSnapshotRestore = "snapshot_restore"
	// PhaseBackendStarted: the election backend runs.
	PhaseBackendStarted = "backend_started"
	// PhaseFirstRole: the first role decision (PRIMARY or STANDBY).
	PhaseFirstRole = "first_role"
	// PhaseLogReplayed: as PRIMARY, every entry before its term is applied
	// (the leader's barrier).
	PhaseLogReplayed = "log_replayed"
)

// startup records when each phase of the node's start ended, once.
type startup struct {
	start  time.Time
	mu     sync.Mutex
	phases []ha.StartupPhase
}

func (s *startup) mark(name string) { s.markAt(name, time.Now(), 0) }

func (s *startup) markAt(name string, at time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.phases {
		if p.Name == name {
			return
		}
	}
	s.phases = append(s.phases, ha.StartupPhase{Name: name, At: at.Sub(s.start), Took: took})
}

// StartupPhases returns the phases of the node's start that have ended,
// each with its end since the node started and, for a snapshot restore,
// its duration.
func (n *Node) StartupPhases() []ha.StartupPhase {
	return n.boot.list(n.fsm)
}

func (s *startup) list(fsm *state.FSM) []ha.StartupPhase {
	if at, took := fsm.LastRestore(); !at.IsZero() && !at.Before(s.start) {
		s.markAt(PhaseSnapshotRestore, at, took)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.phases)
	// In the order they ended: a restore is noted when read.
	slices.SortStableFunc(out, func(a, b ha.StartupPhase) int { return cmp.Compare(a.At, b.At) })
	return out
}
