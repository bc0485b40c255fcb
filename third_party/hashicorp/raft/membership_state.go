// Copyright IBM Corp. 2013, 2025
// SPDX-License-Identifier: MPL-2.0

package raft

import "time"

// ConfigurationState is the latest configuration with its log index and the
// index of the latest committed configuration. The latest one is pending
// (written, not committed yet) while LatestIndex > CommittedIndex; the
// leader accepts no other change until it commits.
type ConfigurationState struct {
	Latest         Configuration
	LatestIndex    uint64
	CommittedIndex uint64
}

// Pending reports whether the latest configuration is not committed yet.
func (c ConfigurationState) Pending() bool { return c.LatestIndex > c.CommittedIndex }

// ConfigurationState returns what the main goroutine last published of its
// configurations. It can be called from any goroutine.
func (r *Raft) ConfigurationState() ConfigurationState {
	if c := r.configurationState.Load(); c != nil {
		return *c
	}
	return ConfigurationState{}
}

// publishConfigurationState publishes a copy of r.configurations for
// ConfigurationState. Main goroutine only.
func (r *Raft) publishConfigurationState() {
	r.configurationState.Store(&ConfigurationState{
		Latest:         r.configurations.latest.Clone(),
		LatestIndex:    r.configurations.latestIndex,
		CommittedIndex: r.configurations.committedIndex,
	})
}

// Progress is what a leader knows of one follower's replication.
type Progress struct {
	// MatchIndex is the last log index known to be stored on the follower;
	// 0 until its first successful AppendEntries or InstallSnapshot of this
	// leader's term.
	MatchIndex uint64
	// LastContact is when the follower last answered an RPC of this
	// leader; replication starts it at the time the leader began
	// replicating to the follower.
	LastContact time.Time
}

// Progress returns, on the leader, each follower's replication progress
// (the leader itself is not included); nil on any other node. It can be
// called from any goroutine.
func (r *Raft) Progress() map[ServerID]Progress {
	r.progressLock.Lock()
	defer r.progressLock.Unlock()
	if r.progress == nil {
		return nil
	}
	out := make(map[ServerID]Progress, len(r.progress))
	for id, s := range r.progress {
		out[id] = Progress{MatchIndex: s.matchIndex.Load(), LastContact: s.LastContact()}
	}
	return out
}

// publishProgress publishes a copy of the leader's replication map for
// Progress, or nil when the node stops leading. Main goroutine only.
func (r *Raft) publishProgress(repl map[ServerID]*followerReplication) {
	var m map[ServerID]*followerReplication
	if repl != nil {
		m = make(map[ServerID]*followerReplication, len(repl))
		for id, s := range repl {
			m[id] = s
		}
	}
	r.progressLock.Lock()
	r.progress = m
	r.progressLock.Unlock()
}
