package state

import (
	"fmt"
	"io"
)

// What backups need of the state machine (package backup, docs/design.md
// "Backup and restore"): the index a snapshot was taken at, the cluster a
// snapshot names, and a restored state moved to a new cluster at a later
// index.

// AppliedIndex is the index of the last entry the snapshot holds: the
// state it copied is exactly the log up to it.
func (s *Snapshot) AppliedIndex() uint64 { return s.s.AppliedIndex }

// SnapshotClusterID reads a snapshot in any version this binary reads and
// returns the cluster it was taken in. It reads r to the snapshot's end.
func SnapshotClusterID(r io.Reader) (string, error) {
	s, _, _, _, err := readSnapshot(r)
	if err != nil {
		return "", err
	}
	return s.ClusterID, nil
}

// Rebase gives a restored state the cluster id clusterID, the applied
// index applied, which may not be below the one it holds, and the member
// table members. A backup restored as a new cluster is installed at an
// index past the last event the old cluster published (so new events
// follow it downstream), under the new cluster's id, with the new
// cluster's members (the old ones' addresses would send clients and leader
// hints to machines that are gone); the snapshot written after Rebase
// records all three, so a node that restores it has the applied index raft
// gives it.
func (f *FSM) Rebase(clusterID string, applied uint64, members []MemberRecord) error {
	table := make(map[string]MemberRecord, len(members))
	for _, m := range members {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("rebase: %w", err)
		}
		if _, dup := table[m.ID]; dup {
			return fmt.Errorf("rebase: member %q listed twice", m.ID)
		}
		table[m.ID] = m
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.applied.Load(); applied < cur {
		return fmt.Errorf("rebase to index %d: the state is already at index %d", applied, cur)
	}
	f.clusterID = clusterID
	f.applied.Store(applied)
	f.members = table
	return nil
}
