// Package bench drives load against a cluster, records every call as a
// history, and checks that history: linearizability against a model of the
// task registry (porcupine), nothing acknowledged lost, nothing applied twice.
package bench

import (
	"fmt"
	"sync"
	"time"
)

// Kind is an operation of the task registry.
type Kind uint8

const (
	Submit Kind = iota + 1
	Get
	Delete
)

func (k Kind) String() string {
	switch k {
	case Submit:
		return "submit"
	case Get:
		return "get"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Outcome is what a call returned, as far as the caller knows.
type Outcome uint8

const (
	// Unknown: the call failed without an answer (deadline, transport);
	// it may or may not have taken effect.
	Unknown Outcome = iota
	// OK: submit created the task / get found it / delete removed it.
	OK
	// Exists: submit found the task already there.
	Exists
	// NotFound: get or delete found no such task.
	NotFound
)

func (o Outcome) String() string {
	switch o {
	case Unknown:
		return "unknown"
	case OK:
		return "ok"
	case Exists:
		return "exists"
	case NotFound:
		return "not-found"
	}
	return fmt.Sprintf("Outcome(%d)", o)
}

// Op is one recorded call.
type Op struct {
	Client  int
	Kind    Kind
	TaskID  string
	Call    time.Time
	Return  time.Time
	Outcome Outcome
	// Index is the Raft index of an acknowledged write.
	Index uint64
	// Retries counts the NOT_READY or transport retries inside the call.
	Retries int
}

// History collects ops from many goroutines.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records one op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the recorded ops.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}
