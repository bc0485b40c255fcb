// Copyright (c) HashiCorp, Inc.
// SPDX-License-Identifier: MPL-2.0

package raft

import (
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
)

// leaderWriter writes a leader's new entries to its log store on a goroutine
// of its own, so that the leader replicates an entry while its own disk write
// is under way instead of after it (Raft thesis §10.2.1). The leader counts
// itself toward commitment only once its write has returned, so an entry is
// still committed only when a majority holds it durably.
//
// Entries wait in staged, where the replicators read them, until the store
// holds them. Writes happen in dispatch order. After a failed write the rest
// are dropped and the leader steps down; drain then puts lastLog back to the
// last entry that was stored.
//
// The leader's main goroutine is the only one that stages and drains. It
// drains before anything else touches the log store (stepping down, an
// AppendEntries or InstallSnapshot from a newer leader, a user snapshot
// restore), so a follower never writes or truncates under a leader's write.
type leaderWriter struct {
	logs       LogStore
	commitment *commitment
	localID    ServerID
	stepDown   chan struct{}
	logger     hclog.Logger

	queue chan []*Log
	wg    sync.WaitGroup // one per queued batch
	done  chan struct{}  // closed when run returns

	mu     sync.Mutex
	staged []*Log // dispatched and not yet stored, in index order
	failed bool   // a write failed: later ones are dropped
	reset  bool   // lastLog has been put back after the failure
	// stored is the last entry the store holds: the entry lastLog goes
	// back to after a failed write.
	storedIndex, storedTerm uint64
}

func newLeaderWriter(r *Raft) *leaderWriter {
	idx, term := r.getLastLog()
	w := &leaderWriter{
		logs:        r.logs,
		commitment:  r.leaderState.commitment,
		localID:     r.localID,
		stepDown:    r.leaderState.stepDown,
		logger:      r.logger,
		queue:       make(chan []*Log, 1024),
		done:        make(chan struct{}),
		storedIndex: idx,
		storedTerm:  term,
	}
	go w.run()
	return w
}

// stage makes logs visible to the replicators and queues their write. The
// caller sets lastLog and notifies the replicators afterwards.
func (w *leaderWriter) stage(logs []*Log) {
	w.mu.Lock()
	w.staged = append(w.staged, logs...)
	w.mu.Unlock()
	w.wg.Add(1)
	w.queue <- logs
}

// run writes queued batches in order, all those waiting in one StoreLogs.
func (w *leaderWriter) run() {
	defer close(w.done)
	for logs := range w.queue {
		n := 1
	gather:
		for {
			select {
			case more, ok := <-w.queue:
				if !ok {
					break gather
				}
				logs = append(logs[:len(logs):len(logs)], more...)
				n++
			default:
				break gather
			}
		}
		w.write(logs)
		w.wg.Add(-n)
	}
}

func (w *leaderWriter) write(logs []*Log) {
	w.mu.Lock()
	failed := w.failed
	w.mu.Unlock()
	if failed {
		return
	}
	start := time.Now()
	err := w.logs.StoreLogs(logs)
	metrics.MeasureSince([]string{"raft", "leader", "parallelStoreLogs"}, start)
	last := logs[len(logs)-1]
	w.mu.Lock()
	if err != nil {
		w.failed = true
		w.staged = nil
		w.mu.Unlock()
		w.logger.Error("failed to store logs; stepping down", "first", logs[0].Index, "last", last.Index, "error", err)
		asyncNotifyCh(w.stepDown)
		return
	}
	w.storedIndex, w.storedTerm = last.Index, last.Term
	n := 0
	for n < len(w.staged) && w.staged[n].Index <= last.Index {
		n++
	}
	w.staged = w.staged[n:]
	w.mu.Unlock()
	w.commitment.match(w.localID, last.Index)
}

// getLog copies a staged entry into out.
func (w *leaderWriter) getLog(index uint64, out *Log) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.staged) == 0 || index < w.staged[0].Index {
		return false
	}
	i := index - w.staged[0].Index
	if i >= uint64(len(w.staged)) {
		return false
	}
	*out = *w.staged[i]
	return true
}

// drain waits for every queued write. After a failed one it returns, once,
// reset and the last entry the store holds, for the caller to put lastLog
// back to.
func (w *leaderWriter) drain() (reset bool, index, term uint64) {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.failed || w.reset {
		return false, 0, 0
	}
	w.reset = true
	return true, w.storedIndex, w.storedTerm
}

// stop ends the writer's goroutine; call it drained.
func (w *leaderWriter) stop() {
	close(w.queue)
	<-w.done
}

// drainLeaderWrites makes the log store hold every entry this node has
// dispatched as leader, or, after a failed write, puts lastLog back to the
// last entry it holds. It runs on the main goroutine before anything else
// writes the log store; with no leader writer it does nothing.
func (r *Raft) drainLeaderWrites() {
	w := r.leaderWriter.Load()
	if w == nil {
		return
	}
	if reset, index, term := w.drain(); reset {
		r.setLastLog(index, term)
	}
}

// stopLeaderWriter drains and ends the leader writer when leadership ends.
func (r *Raft) stopLeaderWriter() {
	w := r.leaderWriter.Load()
	if w == nil {
		return
	}
	r.drainLeaderWrites()
	w.stop()
	r.leaderWriter.Store(nil)
}

// getLogOrStaged reads an entry for the leader's replicators and its FSM: a
// staged one if the leader has not stored it yet, otherwise from the log
// store.
func (r *Raft) getLogOrStaged(index uint64, out *Log) error {
	if w := r.leaderWriter.Load(); w != nil && w.getLog(index, out) {
		return nil
	}
	return r.logs.GetLog(index, out)
}
