package placement

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/xce/xce/state"
)

// Worker addresses in the log: the PRIMARY writes each worker's client
// address (CmdSetWorkerAddr) when the worker registers with one the log
// does not hold, and forgets it once the worker has gone for good, so that
// every node hands the addresses to watchers (docs/design.md, "Tasks,
// workers, assignments"). The loop writes them, off the registration's
// path, and only once the node says every voter applies them (SetAddrGate).
//
// A new primary starts without sessions: it forgets no address merely for
// want of one. A worker without a session and not away is gone for good
// only once the term is a session timeout old (a live worker has
// registered again by then), or when its session ended in this term
// without it being away, or when its replace delay ran out.

// maxAddrWrites bounds the address writes of one loop pass, so that a
// crowd of registrations at a new term does not hold up planning; the
// rest are written at the next passes.
const maxAddrWrites = 64

// SetAddrGate sets what tells the Service whether it may write worker
// addresses in the current term: nil from writable once every voter
// applies them. Until it is set, none are written.
func (s *Service) SetAddrGate(writable func() error) {
	s.addrGate.Store(&writable)
}

// addrsWritable reports whether worker addresses may be written now.
func (s *Service) addrsWritable() bool {
	g := s.addrGate.Load()
	return g != nil && *g != nil && (*g)() == nil
}

// addrSync is what the loop knows of its last address pass.
type addrSync struct {
	// open: the gate was open; ripe: the term was a session timeout old.
	open, ripe bool
	// ver is the log's address version the pass left.
	ver uint64
	// more: writes were left for the next pass.
	more bool
}

// addrChange is one address to write ("" forgets the worker's).
type addrChange struct{ worker, addr string }

// syncAddrs writes the address changes the sessions call for, when
// anything changed since the last pass (a registration, an ended
// session, the log's addresses, the gate opening, the term ripening).
func (s *Service) syncAddrs(ctx context.Context, ts *termState, st *addrSync) {
	if !s.addrsWritable() {
		st.open = false
		return
	}
	ripe := time.Since(ts.started) >= s.cfg.SessionTimeout
	s.mu.Lock()
	dirty := ts.addrsDirty
	ts.addrsDirty = false
	s.mu.Unlock()
	if st.open && st.ripe == ripe && st.ver == s.fsm.WorkerAddrVersion() && !dirty && !st.more {
		return
	}
	st.open, st.ripe, st.more = true, ripe, false
	changes := s.addrChanges(ts, ripe)
	if len(changes) > maxAddrWrites {
		changes, st.more = changes[:maxAddrWrites], true
	}
	for _, c := range changes {
		if !s.writeAddr(ctx, c) {
			st.more = true
			break
		}
	}
	st.ver = s.fsm.WorkerAddrVersion()
}

// addrChanges lists, by worker id, the addresses of sessions that differ
// from the log's and, once the term is ripe, the log's addresses of
// workers without a session that are not away.
func (s *Service) addrChanges(ts *termState, ripe bool) []addrChange {
	have, _ := s.fsm.WorkerAddrs()
	var out []addrChange
	s.mu.Lock()
	for id, w := range ts.workers {
		if have[id] != w.addr {
			out = append(out, addrChange{worker: id, addr: w.addr})
		}
	}
	if ripe {
		for id := range have {
			_, live := ts.workers[id]
			_, away := ts.away[id]
			if !live && !away {
				out = append(out, addrChange{worker: id})
			}
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b addrChange) int { return strings.Compare(a.worker, b.worker) })
	return out
}

// writeAddr writes one address change and reports whether it was
// written (or cannot ever be: it is then skipped).
func (s *Service) writeAddr(ctx context.Context, c addrChange) bool {
	b, err := state.EncodeWorkerAddr(c.worker, c.addr)
	if err != nil {
		s.log.Error().Err(err).Str("worker", c.worker).Msg("worker address not written")
		return true
	}
	actx, cancel := context.WithTimeout(ctx, applyTimeout)
	defer cancel()
	r, err := s.apply(actx, b)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.log.Warn().Err(err).Str("worker", c.worker).Msg("writing the worker's address failed; trying again shortly")
		}
		return false
	case r.Code != state.CodeOK:
		s.log.Error().Str("err", r.Err).Str("worker", c.worker).Msg("the log refused the worker's address")
		return true
	}
	if c.addr == "" {
		s.log.Info().Str("worker", c.worker).Msg("worker gone for good: its address forgotten")
	} else {
		s.log.Debug().Str("worker", c.worker).Str("addr", c.addr).Msg("worker address written")
	}
	return true
}
