package placement

import (
	"fmt"
	"maps"
	"slices"

	"github.com/xce/xce/assign"
)

// Handover waits: a drained or leaving worker keeps an active until a copy
// elsewhere has caught up (docs/design.md, "Draining and leaving"). The
// primary says, once per task and reason, why one still waits, so that an
// operator watching a drain (or a worker's slow exit) knows what it waits
// for.

// handoverWaits returns, for every task whose active the plan leaves on a
// drained worker, why it waits there. It is a pure function of the plan's
// input and result.
func handoverWaits(in assign.Input, res assign.Result) map[string]string {
	drained := map[string]bool{}
	lags := map[string]map[string]int64{}
	eligible := 0
	for _, w := range in.Workers {
		drained[w.ID] = w.Drained
		lags[w.ID] = w.Lags
		if !w.Drained && w.Capacity > 0 {
			eligible++
		}
	}
	limit := in.Config.AcceptableRecoveryLag
	out := map[string]string{}
	for _, t := range slices.Sorted(maps.Keys(res.Assignment)) {
		p := res.Assignment[t]
		if p.Active == "" || !drained[p.Active] {
			continue
		}
		if eligible == 0 {
			out[t] = "no other worker may run it"
			continue
		}
		best, bestLag := "", int64(-1)
		for _, w := range append(slices.Clone(p.Warmups), p.Standbys...) {
			if drained[w] {
				continue
			}
			lag, ok := lags[w][t]
			if !ok {
				continue
			}
			if best == "" || lag < bestLag || lag == bestLag && w < best {
				best, bestLag = w, lag
			}
		}
		switch {
		case best != "":
			out[t] = fmt.Sprintf("waiting for %s to catch up (lag %d; caught up at %d or less)", best, bestLag, limit)
		case len(p.Warmups)+len(p.Standbys) > 0:
			out[t] = "waiting for a copy elsewhere to report its lag"
		default:
			out[t] = fmt.Sprintf("no copy elsewhere yet: waiting for a warm-up slot (max_warmup_replicas %d)", in.Config.MaxWarmupReplicas)
		}
	}
	return out
}

// noteWaits logs each task that waits on a drained or leaving worker, when
// it starts waiting or its reason changes. Only the loop calls it.
func (s *Service) noteWaits(ts *termState, in assign.Input, res assign.Result) {
	waits := handoverWaits(in, res)
	for _, t := range slices.Sorted(maps.Keys(waits)) {
		if ts.waits[t] == waits[t] {
			continue
		}
		s.log.Info().Str("task", t).Str("worker", res.Assignment[t].Active).Str("why", waits[t]).
			Msg("an active stays on a drained or leaving worker until a copy elsewhere has caught up")
	}
	ts.waits = waits
}

// noteUnspread logs, when their number changes, the tasks whose copies
// span fewer values of a spread key than the workers offer (a few of
// them, with why: assign.Shortfall), and when there are none any more.
func (s *Service) noteUnspread(ts *termState, sf []assign.Shortfall) {
	s.mu.Lock()
	was := ts.unspread
	ts.unspread = len(sf)
	s.mu.Unlock()
	switch {
	case len(sf) == was:
	case len(sf) == 0:
		s.log.Info().Msg("every task's copies are spread as far as the workers allow")
	default:
		ex := make([]string, 0, 5)
		for _, x := range sf[:min(len(sf), cap(ex))] {
			ex = append(ex, fmt.Sprintf("%s: %d of %d values of %s (%s)", x.Task, x.Have, x.Want, x.Key, x.Reason))
		}
		s.log.Warn().Int("shortfalls", len(sf)).Strs("examples", ex).
			Msg("copies not spread as far as the workers allow (xce assign plan shows why)")
	}
}
