package assign

import (
	"cmp"
	"math/bits"
	"slices"
)

// reportedLoads returns each task's weight as an active under BalanceLoad:
// the load its previous active's worker reports, scaled so that the
// largest is at most MaxWeight (loads are in any unit; only ratios
// matter). A stateful task without a report counts as the median report,
// so that a new task is neither free nor heavy; with no report at all,
// the task weights stand.
func (p *planner) reportedLoads() []int {
	raw := make([]int64, p.nT)
	var known []int64
	for _, t := range p.stateful {
		raw[t] = -1
		a := p.origA[t]
		if a < 0 {
			continue
		}
		if l, ok := p.workers[a].Loads[p.tasks[t].ID]; ok {
			raw[t] = l
			known = append(known, l)
		}
	}
	if len(known) == 0 {
		return p.wt
	}
	slices.Sort(known)
	median, top := known[len(known)/2], known[len(known)-1]
	wa := make([]int, p.nT)
	for _, t := range p.stateful {
		l := raw[t]
		if l < 0 {
			l = median
		}
		wa[t] = scaleLoad(l, top)
	}
	return wa
}

// scaleLoad maps a load in [0, top] to [1, MaxWeight], rounding up so
// that no reported load counts as nothing.
func scaleLoad(l, top int64) int {
	if top <= MaxWeight {
		return max(int(l), 1)
	}
	// l·MaxWeight/top in 128 bits: l <= top, so the quotient fits.
	h, lo := bits.Mul64(uint64(l), MaxWeight)
	q, r := bits.Div64(h, lo, uint64(top))
	if r != 0 {
		q++
	}
	return max(int(q), 1)
}

// startLoadMoves sets the active moves this round may make under
// BalanceLoad: MaxLoadMoves, less those earlier rounds of this Plan made
// (an active away from where Previous had it on a live worker).
func (p *planner) startLoadMoves() {
	if p.cfg.Balance != BalanceLoad {
		p.moveLeft = -1
		return
	}
	p.moved = make([]bool, p.nT)
	used := 0
	for _, t := range p.stateful {
		if o := p.origA[t]; o >= 0 && !p.away[o] && p.prevA[t] != o {
			used++
		}
	}
	p.moveLeft = max(cmp.Or(p.cfg.MaxLoadMoves, DefaultMaxLoadMoves)-used, 0)
}

// weighActives sets wa, the tasks' weights as actives, once Previous is
// known.
func (p *planner) weighActives() {
	p.wa = p.wt
	if p.cfg.Balance == BalanceLoad {
		p.wa = p.reportedLoads()
		p.tolerance = cmp.Or(p.cfg.LoadTolerance, DefaultLoadTolerance)
	}
	for _, t := range p.stateful {
		p.sumA += p.wa[t]
		p.maxWA = max(p.maxWA, p.wa[t])
	}
}
