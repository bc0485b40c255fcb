package backup

import (
	"errors"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/xce/xce/configs"
	"github.com/xce/xce/persist"
	"github.com/xce/xce/state"
)

// keyCurrentTerm is the stable store's key of raft's current term.
var keyCurrentTerm = []byte("CurrentTerm")

// Restored is what Restore installed.
type Restored struct {
	DataDir   string
	ClusterID string
	// Index is where the snapshot was installed: the backup's index, or
	// the floor when that is higher.
	Index, Term uint64
	Voters      []string
	Tasks       int
}

// Restore fills cfg's data dir, which must be empty or absent, so that the
// node starts as a member of a new cluster holding the backup's state: the
// dir is laid out as the server lays it out (persist.Open), the state is
// raft's snapshot at index max(backup index, floor) and the backup's term,
// with cfg's peers as the voters, and the stable store's term is that
// term. floor is the index of the last event the cluster's topic holds
// (0 without Kafka): new events then follow it downstream (docs/design.md,
// "Backup and restore"). The state takes cfg's cluster id.
//
// Every voter is restored from the same file with its own config, before
// any of them starts. On failure nothing is left in the data dir.
func Restore(f *File, cfg *configs.Config, floor uint64, logger hclog.Logger) (r Restored, err error) {
	if cfg.HA.Backend != "" && cfg.HA.Backend != configs.BackendRaft {
		return r, fmt.Errorf("ha.backend is %s: restore installs a raft snapshot, for ha.backend raft", cfg.HA.Backend)
	}
	dir := cfg.DataDir
	existed, err := emptyDir(dir)
	if err != nil {
		return r, err
	}
	h := f.Header
	fsm, err := Decode(f.Data)
	if err != nil {
		return r, err
	}
	if fsm.AppliedIndex() != h.Index {
		return r, fmt.Errorf("%w: the header says index %d, the snapshot holds index %d", ErrCorrupt, h.Index, fsm.AppliedIndex())
	}
	index := max(h.Index, floor)
	// A new cluster's first election is in the term after the backup's:
	// never term 0, which raft reads as no state.
	term := max(h.Term, 1)
	var conf raft.Configuration
	var members []state.MemberRecord
	for _, p := range cfg.Peers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.PeerAddr)})
		members = append(members, state.MemberRecord{ID: p.ID, PeerAddr: p.PeerAddr, ClientAddr: p.ClientAddr})
		r.Voters = append(r.Voters, p.ID)
	}
	if len(conf.Servers) == 0 {
		return r, errors.New("the config names no peers")
	}
	// The new cluster's members are the config's peers, the member table
	// included: the backup's records name the old cluster's addresses.
	if err := fsm.Rebase(cfg.ClusterID, index, members); err != nil {
		return r, err
	}

	defer func() {
		if err == nil {
			return
		}
		// Leave the dir as it was found: absent, or empty.
		if !existed {
			_ = os.RemoveAll(dir)
			return
		}
		if ents, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range ents {
				_ = os.RemoveAll(dir + string(os.PathSeparator) + e.Name())
			}
		}
	}()
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	store, err := persist.Open(dir, persist.Options{
		NodeID: cfg.NodeID, ClusterID: cfg.ClusterID, Logger: logger, SegmentSize: cfg.Raft.LogSegmentSize,
	})
	if err != nil {
		return r, err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close data dir: %w", cerr)
		}
	}()
	if has, err := store.HasState(); err != nil || has {
		return r, fmt.Errorf("data dir %s already holds raft state (%v)", dir, err)
	}
	if err := store.Stable.SetUint64(keyCurrentTerm, term); err != nil {
		return r, fmt.Errorf("write the term: %w", err)
	}
	// The snapshot store encodes the peers through a transport; any does.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := store.Snaps.Create(raft.SnapshotVersionMax, index, term, conf, index, trans)
	if err != nil {
		return r, fmt.Errorf("create the snapshot: %w", err)
	}
	snap := fsm.Snapshot()
	defer snap.Release()
	if err := snap.Write(sink); err != nil {
		_ = sink.Cancel()
		return r, fmt.Errorf("write the snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return r, fmt.Errorf("write the snapshot: %w", err)
	}
	return Restored{DataDir: dir, ClusterID: cfg.ClusterID, Index: index, Term: term, Voters: r.Voters, Tasks: fsm.NumTasks()}, nil
}

// emptyDir returns an error unless dir is absent or an empty directory;
// existed tells which.
func emptyDir(dir string) (existed bool, err error) {
	if dir == "" {
		return false, errors.New("the config has no data_dir")
	}
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.IsDir() {
		return true, fmt.Errorf("data dir %s is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return true, err
	}
	if len(ents) > 0 {
		return true, fmt.Errorf("data dir %s is not empty (%d entries, e.g. %s): restore fills only an empty or absent data dir; "+
			"move the old one aside first", dir, len(ents), ents[0].Name())
	}
	return true, nil
}
