package placement

// DELETE AT MERGE: a stand-in until state.FSM has TaskEpoch. At the merge,
// delete this file, add `TaskEpoch(id string) uint64` to the FSM interface
// and replace taskEpoch(s.fsm, t) with s.fsm.TaskEpoch(t).

// taskEpoch returns the task's epoch when the FSM knows epochs, else 0.
func taskEpoch(f FSM, id string) uint64 {
	if e, ok := f.(interface{ TaskEpoch(string) uint64 }); ok {
		return e.TaskEpoch(id)
	}
	return 0
}
