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

// History collects ops from many goroutines, in chunks: a long run records
// millions, and one growing slice would copy all of them under the lock
// each time it grew, stalling every client for the copy (and the run's
// latency figures with it).
type History struct {
	mu     sync.Mutex
	chunks [][]Op
}

// historyChunk is how many ops one chunk holds (about 400 KiB).
const historyChunk = 4096

// Add records one op.
func (h *History) Add(op Op) {
	h.mu.Lock()
	if n := len(h.chunks); n == 0 || len(h.chunks[n-1]) == historyChunk {
		h.chunks = append(h.chunks, make([]Op, 0, historyChunk))
	}
	last := &h.chunks[len(h.chunks)-1]
	*last = append(*last, op)
	h.mu.Unlock()
}

// Ops returns a copy of the recorded ops, in the order they were added.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.chunks {
		n += len(c)
	}
	ops := make([]Op, 0, n)
	for _, c := range h.chunks {
		ops = append(ops, c...)
	}
	return ops
}
