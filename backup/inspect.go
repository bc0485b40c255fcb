package backup

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/xce/xce/state"
)

// Summary is what a backup holds, as `xce snapshot inspect` prints it.
type Summary struct {
	Format    uint32 `json:"format"`
	ClusterID string `json:"cluster_id"`
	Index     uint64 `json:"index"`
	Term      uint64 `json:"term"`
	Size      uint64 `json:"size"`
	SHA256    string `json:"sha256"`
	// ChecksumOK is false when the data does not match the header's
	// checksum; nothing of the data is decoded then.
	ChecksumOK bool `json:"checksum_ok"`
	// Of the state machine's snapshot:
	Tasks                int    `json:"tasks"`
	AssignmentGeneration uint64 `json:"assignment_generation"`
	OutboxLen            int    `json:"outbox_len"`
	Published            uint64 `json:"published"`
	AppliedIndex         uint64 `json:"applied_index"`
}

// Inspect verifies the backup at path and decodes its data. A file whose
// data fails its checksum returns the header's summary with ChecksumOK
// false, and the error; other damage returns only the error.
func Inspect(path string) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Summary{}, err
	}
	h, err := Verify(f, fi.Size())
	s := Summary{Format: h.Version, ClusterID: h.ClusterID, Index: h.Index, Term: h.Term, Size: h.Size, SHA256: h.Sum()}
	if errors.Is(err, ErrChecksum) {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	if err != nil {
		return Summary{}, fmt.Errorf("%s: %w", path, err)
	}
	s.ChecksumOK = true
	fsm, err := Decode(func() io.Reader { return io.NewSectionReader(f, h.Len(), int64(h.Size)) })
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	s.Tasks = fsm.NumTasks()
	s.AssignmentGeneration, _ = fsm.AssignmentGeneration()
	s.Published, s.OutboxLen, _ = fsm.Outbox(0)
	s.AppliedIndex = fsm.AppliedIndex()
	if s.AppliedIndex != h.Index {
		return s, fmt.Errorf("%s: %w: the header says index %d, the snapshot holds index %d", path, ErrCorrupt, h.Index, s.AppliedIndex)
	}
	return s, nil
}

// Decode restores a state machine from snapshot data, whatever cluster it
// was taken in; data returns a reader of the data from its start (it is
// read twice).
func Decode(data func() io.Reader) (*state.FSM, error) {
	id, err := state.SnapshotClusterID(data())
	if err != nil {
		return nil, fmt.Errorf("decode the state: %w", err)
	}
	fsm := state.NewFSM(id)
	if err := fsm.Restore(data()); err != nil {
		return nil, fmt.Errorf("decode the state: %w", err)
	}
	return fsm, nil
}
