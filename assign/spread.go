package assign

import (
	"cmp"
	"slices"
)

// spreadIndex holds, for each key of Config.SpreadBy, each worker's value
// as a small integer, and how many distinct values the workers that may
// hold a copy offer.
type spreadIndex struct {
	val      [][]int32 // per key, per worker
	distinct []int     // per key, among eligible workers
}

// newSpreadIndex indexes the spread keys' values; nil without keys.
func newSpreadIndex(keys []string, workers []Worker, eligible func(int) bool) *spreadIndex {
	if len(keys) == 0 {
		return nil
	}
	x := &spreadIndex{val: make([][]int32, len(keys)), distinct: make([]int, len(keys))}
	for k, key := range keys {
		ids := map[string]int32{}
		seen := map[int32]bool{}
		x.val[k] = make([]int32, len(workers))
		for w, wk := range workers {
			v := wk.Labels[key]
			id, ok := ids[v]
			if !ok {
				id = int32(len(ids))
				ids[v] = id
			}
			x.val[k][w] = id
			if eligible(w) && !seen[id] {
				seen[id] = true
				x.distinct[k]++
			}
		}
	}
	return x
}

// newValues returns the spread keys for which worker w's value is not
// among those of the target copies of t other than skip (and w itself),
// as a mask with the first key in the highest bit: comparing masks as
// integers compares spread key by key, in order of importance.
func (p *planner) newValues(t, w, skip int) uint {
	var mask uint
	K := len(p.sp.val)
	a := p.astar[t]
	for k, vals := range p.sp.val {
		v := vals[w]
		fresh := a < 0 || a == skip || a == w || vals[a] != v
		for _, x := range p.sstar[t] {
			if !fresh {
				break
			}
			fresh = x == skip || x == w || vals[x] != v
		}
		if fresh {
			mask |= 1 << (K - 1 - k)
		}
	}
	return mask
}

// spreadKeeps reports whether moving a target copy of t from v to u
// spreads the copies at least as well, key by key in order.
func (p *planner) spreadKeeps(t, v, u int) bool {
	return p.sp == nil || p.newValues(t, u, v) >= p.newValues(t, v, v)
}

// bestNewValues is the best spread a new copy of t could add: the
// largest newValues over the workers that may take one.
func (p *planner) bestNewValues(t int) uint {
	full := uint(1)<<len(p.sp.val) - 1
	var best uint
	for w := range p.nW {
		if p.weight[w] == 0 || p.holds(t, w) {
			continue
		}
		if m := p.newValues(t, w, -1); m > best {
			best = m
			if best == full {
				break
			}
		}
	}
	return best
}

// spreadMet reports whether copies (workers) span, for every key,
// min(copies, distinct values) values.
func (p *planner) spreadMet(copies []int) bool {
	for k := range p.sp.val {
		if distinctValues(p.sp.val[k], copies) < min(len(copies), p.sp.distinct[k]) {
			return false
		}
	}
	return true
}

func distinctValues(vals []int32, ws []int) int {
	n := 0
	for i, w := range ws {
		fresh := true
		for _, x := range ws[:i] {
			if vals[x] == vals[w] {
				fresh = false
				break
			}
		}
		if fresh {
			n++
		}
	}
	return n
}

// targetCopies returns the target active and standbys of t in buf.
func (p *planner) targetCopies(t int, buf []int) []int {
	return append(append(buf[:0], p.astar[t]), p.sstar[t]...)
}

// respread moves target standbys until each task's copies spread as far
// as the workers allow: a standby adding the fewest values moves to the
// worker adding the most (caught-up first, then one with room in its
// band, then the least loaded, then by id). A running copy moving to a worker that is
// not caught up stays until a warm-up there catches up, like any other
// standby move; without a warm-up slot the move waits for a later plan.
func (p *planner) respread(c *counter) {
	if p.sp == nil {
		return
	}
	var buf []int
	for _, t := range p.stateful {
		for range len(p.sstar[t]) * len(p.sp.val) {
			buf = p.targetCopies(t, buf)
			if p.spreadMet(buf) || !p.respreadOne(t, c) {
				break
			}
		}
	}
}

// respreadOne makes the best improving move of one standby of t and
// reports whether it made one.
func (p *planner) respreadOne(t int, c *counter) bool {
	type standby struct {
		w   int
		own uint
		cu  bool
	}
	var buf [MaxStandbyReplicas + 1]standby
	order := buf[:0]
	for _, w := range p.sstar[t] {
		order = append(order, standby{w, p.newValues(t, w, w), p.caughtUp(w, t)})
	}
	slices.SortFunc(order, func(a, b standby) int {
		return cmp.Or(cmp.Compare(a.own, b.own), cmpTrueFirst(!a.cu, !b.cu), cmp.Compare(b.w, a.w))
	})
	for _, o := range order {
		w, mw, best, bm := o.w, o.own, -1, uint(0)
		for u := range p.nW {
			if p.weight[u] == 0 || p.holds(t, u) {
				continue
			}
			m := p.newValues(t, u, w)
			if m <= mw || m < bm {
				continue
			}
			if best < 0 || m > bm || p.roomier(t, u, best, c) {
				best, bm = u, m
			}
		}
		if best < 0 {
			continue
		}
		// Of the workers adding as much, a caught-up one costs no warm-up.
		if !p.caughtUp(best, t) {
			cu := -1
			for _, e := range p.lags[t] {
				u := e.w
				if e.lag > p.cfg.AcceptableRecoveryLag || p.weight[u] == 0 || p.holds(t, u) || p.newValues(t, u, w) != bm {
					continue
				}
				if cu < 0 || p.roomier(t, u, cu, c) {
					cu = u
				}
			}
			if cu >= 0 {
				best = cu
			}
		}
		if p.moveStandby(t, w, best, c) {
			return true
		}
	}
	return false
}

// roomier orders equally spreading destinations of a standby of t: with
// room in its band first, then less loaded, then by id.
func (p *planner) roomier(t, u, b int, c *counter) bool {
	ru, rb := c.cnt[u]+p.wt[t] <= c.hi[u], c.cnt[b]+p.wt[t] <= c.hi[b]
	if ru != rb {
		return ru
	}
	x := cmpLoad(c.cnt[u]+1, c.weight[u], c.cnt[b]+1, c.weight[b])
	return x < 0 || (x == 0 && u < b)
}

// moveStandby moves a target standby of t from v to u outside the
// balancing phases; moving a running caught-up copy to a worker that is
// not caught up takes a warm-up slot (it reports false without one).
func (p *planner) moveStandby(t, v, u int, c *counter) bool {
	if !p.caughtUp(u, t) && p.valuable(t, v) {
		if p.budget == 0 {
			p.blocked = true
			return false
		}
		p.budget--
		p.pend[t] = append(p.pend[t], pendingMove{from: v, to: u})
	}
	p.sstar[t] = insertSorted(removeSorted(p.sstar[t], v), u)
	c.cnt[v] -= p.wt[t]
	c.cnt[u] += p.wt[t]
	return true
}

// shortfalls lists where the output's copies on live workers span fewer
// values of a spread key than they could.
func (p *planner) shortfalls() []Shortfall {
	if p.sp == nil {
		return nil
	}
	var out []Shortfall
	var buf []int
	for _, t := range p.stateful {
		buf = append(buf[:0], p.aOut[t])
		for _, w := range p.sOut[t] {
			if p.weight[w] > 0 {
				buf = append(buf, w)
			}
		}
		for k, key := range p.cfg.SpreadBy {
			have, want := distinctValues(p.sp.val[k], buf), min(len(buf), p.sp.distinct[k])
			if have >= want {
				continue
			}
			reason := "blocked"
			switch {
			case p.frozen:
				reason = "frozen"
			case p.followup:
				reason = "waits"
			}
			out = append(out, Shortfall{Task: p.tasks[t].ID, Key: key, Have: have, Want: want, Reason: reason})
		}
	}
	return out
}
