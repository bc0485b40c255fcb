package raftha

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/xce/xce/state"
)

// FSM serves the state machine to raft: raft hands it log entries,
// membership changes, snapshots to take and snapshots to restore
// (docs/design.md, "Tasks, workers, assignments").
type FSM struct {
	fsm     *state.FSM
	metrics *SnapshotMetrics
	// snapWrites is fsm.Writes() as of the state the last snapshot
	// persisted or restored holds: a restart replays what lies beyond it.
	snapWrites atomic.Uint64
}

var (
	_ raft.FSM                = (*FSM)(nil)
	_ raft.BatchingFSM        = (*FSM)(nil)
	_ raft.ConfigurationStore = (*FSM)(nil)
)

// NewFSM returns the adapter that lets raft drive fsm.
func NewFSM(fsm *state.FSM) *FSM { return &FSM{fsm: fsm} }

// entry is l as the state machine sees it: entries other than commands
// only advance its applied index.
func entry(l *raft.Log) state.Entry {
	return state.Entry{Index: l.Index, Term: l.Term, Data: l.Data, NoCommand: l.Type != raft.LogCommand}
}

// Apply implements raft.FSM.
func (r *FSM) Apply(l *raft.Log) any {
	if l.Type == raft.LogCommand {
		return r.fsm.Apply(l.Index, l.Term, l.Data)
	}
	return r.fsm.ApplyBatch([]state.Entry{entry(l)})[0]
}

// ApplyBatch implements raft.BatchingFSM: one lock for a whole batch.
func (r *FSM) ApplyBatch(logs []*raft.Log) []any {
	entries := make([]state.Entry, len(logs))
	for i, l := range logs {
		entries[i] = entry(l)
	}
	return r.fsm.ApplyBatch(entries)
}

// StoreConfiguration implements raft.ConfigurationStore. Membership lives in
// raft; the FSM only counts the entry as applied, so its applied index keeps
// pace with every entry raft hands it.
func (r *FSM) StoreConfiguration(index uint64, _ raft.Configuration) {
	r.fsm.Advance(index)
}

// Snapshot implements raft.FSM: it copies the state; Persist writes the
// copy out without holding the FSM. The copy's time is what the snapshot
// stalls applies for, so it is measured on its own.
func (r *FSM) Snapshot() (raft.FSMSnapshot, error) {
	start := time.Now()
	s := r.fsm.Snapshot()
	r.metrics.captured(time.Since(start))
	return raftSnapshot{s: s, metrics: r.metrics, writes: &r.snapWrites}, nil
}

// Restore implements raft.FSM.
func (r *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	if err := r.fsm.Restore(rc); err != nil {
		return err
	}
	r.snapWrites.Store(r.fsm.Writes())
	return nil
}

// restoredAtOpen notes that the state machine was restored from a
// snapshot before raft started (persist.Options.RestoreSnapshot), as
// Restore would.
func (r *FSM) restoredAtOpen() { r.snapWrites.Store(r.fsm.Writes()) }

// writesSinceSnapshot is how many commands a restart would replay.
func (r *FSM) writesSinceSnapshot() uint64 { return r.fsm.Writes() - r.snapWrites.Load() }

type raftSnapshot struct {
	s       *state.Snapshot
	metrics *SnapshotMetrics
	writes  *atomic.Uint64
}

// Persist writes the snapshot to sink, and cancels the sink when that fails.
func (s raftSnapshot) Persist(sink raft.SnapshotSink) error {
	start := time.Now()
	w := &countingWriter{w: sink}
	if err := s.s.Write(w); err != nil {
		sink.Cancel()
		return err
	}
	if err := sink.Close(); err != nil {
		return err
	}
	s.metrics.persisted(time.Since(start), w.n)
	if s.writes != nil {
		s.writes.Store(s.s.Writes())
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s raftSnapshot) Release() { s.s.Release() }
