package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Drained workers: an operator's decision that a worker runs no active
// (xce workers drain), kept in the log so that it outlives failovers and the
// worker's restarts (docs/design.md, "Draining and leaving"). The set holds
// worker ids only; whether a worker is connected is the primary's soft
// state.

// MaxDrained bounds the drained workers: a drain names a worker that may
// never have registered, and the set must not grow without bound.
const MaxDrained = 10_000

// ErrBadDrain is returned by EncodeDrain for an invalid worker id.
var ErrBadDrain = errors.New("invalid drain")

// validWorkerID reports whether id is a worker id: 1-128 characters of
// [A-Za-z0-9._-], as the worker API requires.
func validWorkerID(id string) error {
	if len(id) < 1 || len(id) > 128 {
		return fmt.Errorf("worker id %q: must be 1-128 characters of [A-Za-z0-9._-]", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("worker id %q: must be 1-128 characters of [A-Za-z0-9._-]", id)
		}
	}
	return nil
}

// EncodeDrain returns the CmdSetWorkerDrain entry that drains worker id
// (drained) or ends its drain.
func EncodeDrain(id string, drained bool) ([]byte, error) {
	if err := validWorkerID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadDrain, err)
	}
	return (&Command{Type: CmdSetWorkerDrain, Worker: id, Drained: drained}).Encode(), nil
}

// drainLocked sets or clears worker id's drain. Draining a worker beyond
// MaxDrained is CodeInvalid and changes nothing; the same state twice is
// not an error.
func (f *FSM) drainLocked(index uint64, id string, drained bool) Result {
	_, was := f.drained[id]
	switch {
	case drained == was:
		return Result{Index: index}
	case drained && len(f.drained) >= MaxDrained:
		return Result{Index: index, Code: CodeInvalid, Err: fmt.Sprintf("%d workers are drained already (the most there may be)", MaxDrained)}
	case drained:
		f.drained[id] = struct{}{}
	default:
		delete(f.drained, id)
	}
	f.drainVer++
	return Result{Index: index}
}

// Drained returns the drained workers, sorted.
func (f *FSM) Drained() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Sorted(maps.Keys(f.drained))
}

// IsDrained reports whether worker id is drained.
func (f *FSM) IsDrained(id string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, ok := f.drained[id]
	return ok
}

// DrainVersion counts the changes of the drained set, so that the
// assignor plans again when it changes.
func (f *FSM) DrainVersion() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.drainVer
}

// restoreDrained checks a snapshot's drained workers: valid ids, each
// once, at most MaxDrained.
func restoreDrained(ids []string) (map[string]struct{}, error) {
	if len(ids) > MaxDrained {
		return nil, fmt.Errorf("%w: %d drained workers (at most %d)", ErrBadSnapshot, len(ids), MaxDrained)
	}
	out := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		if err := validWorkerID(id); err != nil {
			return nil, fmt.Errorf("%w: drained %v", ErrBadSnapshot, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("%w: drained worker %q listed twice", ErrBadSnapshot, id)
		}
		out[id] = struct{}{}
	}
	return out, nil
}

// EncodeFreeze returns the CmdSetPlacementFrozen entry that freezes the
// placement (frozen) or ends its freeze.
func EncodeFreeze(frozen bool) []byte {
	return (&Command{Type: CmdSetPlacementFrozen, Frozen: frozen}).Encode()
}

// PlacementFrozen reports whether an operator froze the placement (xce
// placement freeze): the assignor then handles failures only.
func (f *FSM) PlacementFrozen() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.frozen
}
