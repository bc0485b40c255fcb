package assign

import (
	"cmp"
	"slices"
	"strings"
)

// maxRounds bounds the rounds run computes towards a fixed point; in
// practice the second round already is one (see run), but many actives
// waiting to leave drained workers for a few warm-up slots can take a
// dozen.
const maxRounds = 20

// lagEntry is one reported lag, indexed by task so that "who has state for
// this task" is a short sorted list instead of a scan over every worker.
type lagEntry struct {
	w   int
	lag int64
}

// pendingMove is a target standby move that waits: the standby stays on
// from, which is caught up, while to warms up.
type pendingMove struct{ from, to int }

// planner holds one Plan's working state. Tasks and workers are sorted by id
// and referred to by index, so index order is id order and every tie broken
// "by index" is broken by id.
type planner struct {
	cfg       Config
	tasks     []Task
	workers   []Worker
	nT, nW    int
	weight    []uint64 // effective capacity
	totalW    uint64
	drained   []bool // per worker: Worker.Drained
	kt        []int  // per task: its standbys (0 for a stateless task)
	nCopies   int    // stateful copies: the sum over stateful tasks of 1+kt
	wt        []int  // per task: its weight (Task.Weight, at least 1)
	wa        []int  // per task: its weight as an active (its load under BalanceLoad)
	sumA      int    // the sum of wa over stateful tasks
	maxWA     int    // the largest wa of a stateful task
	maxWC     int    // the largest wt of a stateful task
	maxWT     int    // the largest wt of any task
	tolerance int    // BalanceLoad's band in percent; 0 under BalanceWeight
	away      []bool // per worker: Worker.Away
	live      int    // workers not away
	frozen    bool   // Input.Frozen
	sp        *spreadIndex
	reserved  [][]int // per task: standbys kept for away workers, beside sstar
	need      []int   // per task: the target standbys on live workers
	moveLeft  int     // BalanceLoad: active moves this plan may still make
	moved     []bool  // BalanceLoad: per task, its target active moved for balance
	stateful  []int
	stateless []int

	lags   [][]lagEntry // per task, sorted by worker
	minLag []int64      // per task, infLag when nobody has state
	anyCU  []bool       // per task: some worker is caught up
	cuList [][]int      // per worker: stateful tasks it is caught up on, sorted

	// The cleaned Previous, which Moves are relative to.
	origA []int
	origS [][]int
	origW [][]int

	// The previous assignment of the current round (see run).
	prevA   []int   // -1 when none
	prevS   [][]int // stateful only, sorted
	prevW   [][]int // stateful only, sorted
	pinned  []bool  // nobody is caught up and the previous active is among the most caught up
	sbList  [][]int // per worker: stateful tasks it held a previous standby of, sorted
	wuList  [][]int // per worker: stateful tasks it held a previous warm-up of, sorted
	minList [][]int // per worker: unpinned tasks nobody is caught up on and it is among the most caught up

	// One round's work.
	a0      []int   // where each stateful active can run now
	astar   []int   // target active
	paid    []bool  // per task: the target active move holds a warm-up slot
	cntA    []int   // target actives per worker
	sstar   [][]int // target standbys
	extra   [][]int // per task: standbys kept on drained workers, beyond sstar
	copies  []int   // target stateful copies per worker
	pend    [][]pendingMove
	budget  int  // warm-up slots left
	blocked bool // a target move waited for lack of warm-up slots

	aOut     []int
	sOut     [][]int
	wOut     [][]int
	followup bool
	rounds   int

	scratch []int
}

func newPlanner(in Input) *planner {
	p := &planner{cfg: in.Config}
	p.tasks = slices.Clone(in.Tasks)
	slices.SortFunc(p.tasks, func(a, b Task) int { return strings.Compare(a.ID, b.ID) })
	p.workers = slices.Clone(in.Workers)
	slices.SortFunc(p.workers, func(a, b Worker) int { return strings.Compare(a.ID, b.ID) })
	p.nT, p.nW = len(p.tasks), len(p.workers)

	tidx := make(map[string]int, p.nT)
	for i, t := range p.tasks {
		tidx[t.ID] = i
		if t.Stateful {
			p.stateful = append(p.stateful, i)
		} else {
			p.stateless = append(p.stateless, i)
		}
	}
	widx := p.indexWorkers()
	p.frozen = in.Frozen
	p.weighTasks()
	p.sp = newSpreadIndex(p.cfg.SpreadBy, p.workers, func(w int) bool { return p.weight[w] > 0 })
	p.indexLags(tidx)
	p.cleanPrevious(in.Previous, widx)
	p.weighActives()
	p.setPrev(p.origA, p.origS, p.origW)
	return p
}

// indexWorkers derives each worker's effective capacity (weight) and
// returns the index of worker ids.
func (p *planner) indexWorkers() map[string]int {
	widx := make(map[string]int, p.nW)
	p.weight = make([]uint64, p.nW)
	p.drained = make([]bool, p.nW)
	p.away = make([]bool, p.nW)
	for i, w := range p.workers {
		widx[w.ID] = i
		switch {
		case w.Away:
			// Weight 0 and no lags: it runs nothing and gets nothing;
			// its standbys are kept for it (placeStandbys).
			p.away[i] = true
			p.live--
		case w.Drained:
			// Weight 0: it takes no active and no new copy; its
			// standbys stay as extras (placeStandbys).
			p.drained[i] = true
		default:
			p.weight[i] = uint64(w.Capacity)
			p.totalW += uint64(w.Capacity)
		}
	}
	p.live += p.nW
	if p.totalW == 0 {
		// Nowhere better to go: every live worker counts alike, the
		// drained ones too, and the placement stays where it is.
		for i := range p.weight {
			if !p.away[i] {
				p.weight[i] = 1
				p.drained[i] = false
				p.totalW++
			}
		}
	}
	return widx
}

// weighTasks derives each task's standbys and its weight wt from
// Task.Weight.
func (p *planner) weighTasks() {
	eligible := 0
	for _, w := range p.weight {
		if w > 0 {
			eligible++
		}
	}
	p.kt = make([]int, p.nT)
	p.wt = make([]int, p.nT)
	for t, task := range p.tasks {
		p.wt[t] = max(task.Weight, 1)
		p.maxWT = max(p.maxWT, p.wt[t])
	}
	for _, t := range p.stateful {
		want := p.tasks[t].StandbyReplicas
		if want == 0 {
			want = p.cfg.NumStandbyReplicas
		}
		p.kt[t] = min(want, max(eligible-1, 0))
		p.nCopies += 1 + p.kt[t]
		p.maxWC = max(p.maxWC, p.wt[t])
	}
}

// indexLags inverts the workers' lag maps into per-task lists sorted by
// worker. Workers are visited in id order, so each list comes out sorted
// whatever the map iteration order; two passes keep it to one allocation.
func (p *planner) indexLags(tidx map[string]int) {
	arl := p.cfg.AcceptableRecoveryLag
	off := make([]int, p.nT+1)
	for _, w := range p.workers {
		for id, l := range w.Lags {
			if t, ok := tidx[id]; ok && p.tasks[t].Stateful && l != infLag {
				off[t+1]++
			}
		}
	}
	for t := range p.nT {
		off[t+1] += off[t]
	}
	buf := make([]lagEntry, off[p.nT])
	next := slices.Clone(off[:p.nT])
	for wi, w := range p.workers {
		for id, l := range w.Lags {
			if t, ok := tidx[id]; ok && p.tasks[t].Stateful && l != infLag {
				buf[next[t]] = lagEntry{w: wi, lag: l}
				next[t]++
			}
		}
	}
	p.lags = make([][]lagEntry, p.nT)
	p.minLag = make([]int64, p.nT)
	p.anyCU = make([]bool, p.nT)
	p.cuList = make([][]int, p.nW)
	for t := range p.nT {
		p.lags[t] = buf[off[t]:off[t+1]:off[t+1]]
		p.minLag[t] = infLag
		for _, e := range p.lags[t] {
			p.minLag[t] = min(p.minLag[t], e.lag)
			if e.lag <= arl {
				p.cuList[e.w] = append(p.cuList[e.w], t)
			}
		}
		p.anyCU[t] = p.minLag[t] <= arl
	}
}

// cleanPrevious drops departed workers, unknown tasks, duplicate copies and
// the standbys and warm-ups of stateless tasks, so that later steps can trust
// that a worker holds at most one copy of a task.
func (p *planner) cleanPrevious(prev Assignment, widx map[string]int) {
	p.origA = make([]int, p.nT)
	p.origS = make([][]int, p.nT)
	p.origW = make([][]int, p.nT)
	for t := range p.nT {
		p.origA[t] = -1
		pl, ok := prev[p.tasks[t].ID]
		if !ok {
			continue
		}
		a := -1
		if w, ok := widx[pl.Active]; ok {
			a = w
		}
		p.origA[t] = a
		if !p.tasks[t].Stateful {
			continue
		}
		var s, wu []int
		for _, id := range pl.Standbys {
			if w, ok := widx[id]; ok && w != a && !slices.Contains(s, w) {
				s = append(s, w)
			}
		}
		for _, id := range pl.Warmups {
			if w, ok := widx[id]; ok && w != a && !slices.Contains(s, w) && !slices.Contains(wu, w) {
				wu = append(wu, w)
			}
		}
		slices.Sort(s)
		slices.Sort(wu)
		p.origS[t], p.origW[t] = s, wu
	}
}

// setPrev makes a (clean) assignment the previous one of the next round and
// derives the per-worker views the balancing steps scan.
func (p *planner) setPrev(a []int, s, w [][]int) {
	p.prevA, p.prevS, p.prevW = a, s, w
	if p.sbList == nil {
		p.sbList = make([][]int, p.nW)
		p.wuList = make([][]int, p.nW)
		p.minList = make([][]int, p.nW)
		p.pinned = make([]bool, p.nT)
	}
	for i := range p.nW {
		p.sbList[i], p.wuList[i], p.minList[i] = p.sbList[i][:0], p.wuList[i][:0], p.minList[i][:0]
	}
	for _, t := range p.stateful {
		for _, x := range s[t] {
			p.sbList[x] = append(p.sbList[x], t)
		}
		for _, x := range w[t] {
			p.wuList[x] = append(p.wuList[x], t)
		}
		p.pinned[t] = !p.anyCU[t] && a[t] >= 0 && !p.away[a[t]] && p.lag(a[t], t) == p.minLag[t]
		if !p.anyCU[t] && !p.pinned[t] && p.minLag[t] != infLag {
			for _, e := range p.lags[t] {
				if e.lag == p.minLag[t] {
					p.minList[e.w] = append(p.minList[e.w], t)
				}
			}
		}
	}
}

func (p *planner) lag(w, t int) int64 {
	e := p.lags[t]
	i, ok := slices.BinarySearchFunc(e, w, func(x lagEntry, w int) int { return cmp.Compare(x.w, w) })
	if !ok {
		return infLag
	}
	return e[i].lag
}

func (p *planner) caughtUp(w, t int) bool { return p.lag(w, t) <= p.cfg.AcceptableRecoveryLag }

// free reports whether the active of t may go to u although u is not caught
// up: nobody is caught up, u is among the most caught up, and the tie rule
// does not keep the previous active.
func (p *planner) free(t, u int) bool {
	return !p.anyCU[t] && !p.pinned[t] && p.lag(u, t) == p.minLag[t]
}

// holds reports whether w holds a target copy of t.
func (p *planner) holds(t, w int) bool {
	return p.astar[t] == w || slices.Contains(p.sstar[t], w)
}

// run plans rounds until the output is a fixed point: planning again from
// it, with the same lags, would change nothing. A round's target depends on
// where the previous standbys and warm-ups are (they are preferred
// destinations), so the first round's output, fed back, can pick slightly
// different but equally good destinations; returning the fixed point keeps
// a controller that re-plans on every event from flapping copies around.
func (p *planner) run() Result {
	if p.live == 0 {
		return p.nobodyLive()
	}
	for p.rounds = 1; ; p.rounds++ {
		p.solve()
		if p.fixedPoint() || p.rounds == maxRounds {
			break
		}
		p.setPrev(p.aOut, p.sOut, p.wOut)
	}
	return p.result()
}

// nobodyLive is the plan when no worker is live: no task runs, and the
// standbys of away workers, and the slot of an active one held, are kept
// for them.
func (p *planner) nobodyLive() Result {
	res := Result{Assignment: make(Assignment, p.nT)}
	for t, task := range p.tasks {
		var keep []string
		if task.Stateful {
			for _, w := range p.origS[t] {
				keep = append(keep, p.workers[w].ID)
			}
			if a := p.origA[t]; a >= 0 {
				keep = append(keep, p.workers[a].ID)
			}
			slices.Sort(keep)
		}
		res.Assignment[task.ID] = Placement{Standbys: keep}
		if a := p.origA[t]; a >= 0 {
			res.Moves = append(res.Moves, Move{Task: task.ID, From: p.workers[a].ID, Kind: KindActive})
		}
	}
	return res
}

// fixedPoint reports whether the round's output equals its previous
// assignment.
func (p *planner) fixedPoint() bool {
	for t := range p.nT {
		if p.aOut[t] != p.prevA[t] || !slices.Equal(p.sOut[t], p.prevS[t]) || !slices.Equal(p.wOut[t], p.prevW[t]) {
			return false
		}
	}
	return true
}

// solve runs one round from the current previous assignment.
func (p *planner) solve() {
	p.budget = p.cfg.MaxWarmupReplicas
	p.blocked, p.followup = false, false
	p.startLoadMoves()
	p.placeActives()
	if p.frozen {
		p.astar = slices.Clone(p.a0)
		p.paid = make([]bool, p.nT)
	} else {
		p.balanceActives()
	}
	p.placeStandbys()
	p.reconcile()
	p.placeStateless()
}

// placeActives decides where each stateful active can run now, before any
// balancing: that is the state-preserving placement the target starts from.
func (p *planner) placeActives() {
	arl := p.cfg.AcceptableRecoveryLag
	p.a0 = make([]int, p.nT)
	p.cntA = make([]int, p.nW)
	for t := range p.a0 {
		p.a0[t] = -1
	}
	var pending []int
	for _, t := range p.stateful {
		if a := p.prevA[t]; a >= 0 && p.staysActive(t, a) {
			p.a0[t] = a
			p.cntA[a] += p.wa[t]
		} else {
			pending = append(pending, t)
		}
	}
	lighter := func(a, b int) bool {
		if p.away[a] != p.away[b] {
			return p.away[b]
		}
		c := cmpLoad(p.cntA[a]+1, p.weight[a], p.cntA[b]+1, p.weight[b])
		return c < 0 || (c == 0 && a < b)
	}
	var h *workerHeap
	for _, t := range pending {
		best := -1
		// A drained worker takes an active only when no other worker is
		// as caught up: it then holds the one copy to run from.
		drainedToo := false
		consider := func(w int) {
			if (drainedToo || !p.drained[w]) && !p.away[w] && (best < 0 || lighter(w, best)) {
				best = w
			}
		}
		for pass := 0; pass < 2 && best < 0; pass++ {
			drainedToo = pass == 1
			switch {
			case p.anyCU[t]:
				// A caught-up standby takes over first (a swap, no
				// warm-up), then a caught-up warm-up, then any caught-up
				// worker.
				for _, w := range p.prevS[t] {
					if p.caughtUp(w, t) {
						consider(w)
					}
				}
				if best < 0 {
					for _, w := range p.prevW[t] {
						if p.caughtUp(w, t) {
							consider(w)
						}
					}
				}
				if best < 0 {
					for _, e := range p.lags[t] {
						if e.lag <= arl {
							consider(e.w)
						}
					}
				}
			case p.pinned[t]:
				best = p.prevA[t]
			case p.minLag[t] == infLag:
				if h == nil {
					h = newWorkerHeap(p.nW, lighter)
				}
				best = h.top()
			default:
				for _, e := range p.lags[t] {
					if e.lag == p.minLag[t] {
						consider(e.w)
					}
				}
			}
		}
		p.a0[t] = best
		p.cntA[best] += p.wa[t]
		if h != nil {
			h.fix(best)
		}
	}
}

// staysActive reports whether the previous active of t on worker a keeps
// running where it is before any balancing: a is caught up (a live
// worker is, an away one never), or the placement is frozen and a is
// neither gone nor drained. A frozen drained worker's caught-up active
// still moves to a caught-up copy elsewhere: draining and leaving go on.
func (p *planner) staysActive(t, a int) bool {
	switch {
	case p.away[a]:
		return false
	case p.frozen:
		return !p.drained[a]
	}
	return p.caughtUp(a, t)
}

// needsWarmup reports whether the active of t may move to x only after a
// warm-up: x is not caught up, not an equally caught-up free choice, and
// holds no standby of t that could restore in its place.
func (p *planner) needsWarmup(t, x int) bool {
	return x != p.a0[t] && !p.caughtUp(x, t) && !p.free(t, x) && !slices.Contains(p.prevS[t], x)
}

// activeCounter is the counter of the actives' class: by weight over
// capacity, or under BalanceLoad by reported load within the tolerance.
func (p *planner) activeCounter() *counter {
	if p.tolerance > 0 {
		return newToleranceCounter(p.cntA, p.sumA, p.weight, p.totalW, p.tolerance)
	}
	return newCounter(p.cntA, p.sumA, p.weight, p.totalW, p.maxWA)
}

// balanceActives computes the target actives: the state-preserving placement
// moved into the balance band with the fewest moves, preferring for each
// receiver the tasks it can take at once. A move onto a worker that must
// warm up first takes a warm-up slot; without one it is not planned.
func (p *planner) balanceActives() {
	p.astar = slices.Clone(p.a0)
	p.paid = make([]bool, p.nT)
	m := &activeMoves{p: p, c: p.activeCounter(),
		act: make([][]int, p.nW), unstated: make([][]int, p.nW)}
	for _, t := range p.stateful {
		m.act[p.a0[t]] = append(m.act[p.a0[t]], t)
		if m.isUnstated(t) {
			m.unstated[p.a0[t]] = append(m.unstated[p.a0[t]], t)
		}
	}
	for progress := true; progress; {
		progress = false
		for phase := 1; phase <= 3; phase++ {
			if !m.c.needed(phase) {
				continue
			}
			if m.byCategory(phase) {
				progress = true
			}
			if m.anything(phase) {
				progress = true
			}
		}
	}
}

// activeMoves is balanceActives' working state: the counts it balances,
// each worker's target actives (act), and the subset of them nobody has
// any state for (unstated), which may go anywhere without waiting.
type activeMoves struct {
	p        *planner
	c        *counter
	act      [][]int
	unstated [][]int
}

func (m *activeMoves) isUnstated(t int) bool { return m.p.minLag[t] == infLag && !m.p.pinned[t] }

// try moves the target active of t from v to u, paying a warm-up slot if
// u must warm up first (and giving back one t no longer needs); without a
// slot it moves nothing and reports false.
func (m *activeMoves) try(t, v, u int) bool {
	p := m.p
	if !m.c.fits(v, u, p.wa[t]) {
		return false
	}
	if p.moveLeft == 0 && !p.moved[t] {
		p.blocked = true
		return false
	}
	switch need := p.needsWarmup(t, u); {
	case need && !p.paid[t]:
		if p.budget == 0 {
			p.blocked = true
			return false
		}
		p.budget--
		p.paid[t] = true
	case !need && p.paid[t]:
		p.budget++
		p.paid[t] = false
	}
	if p.moveLeft > 0 && !p.moved[t] {
		p.moveLeft--
		p.moved[t] = true
	}
	p.astar[t] = u
	m.c.cnt[v] -= p.wa[t]
	m.c.cnt[u] += p.wa[t]
	m.act[v] = removeSorted(m.act[v], t)
	m.act[u] = insertSorted(m.act[u], t)
	if m.isUnstated(t) {
		m.unstated[v] = removeSorted(m.unstated[v], t)
		m.unstated[u] = insertSorted(m.unstated[u], t)
	}
	return true
}

// byCategory moves actives to receivers that hold state for them, by
// receiver category, best first: a caught-up standby (swap), a caught-up
// warm-up (its restoration was for this), any caught-up worker, a
// most-caught-up worker when nobody is caught up, a warm-up in progress, a
// lagging standby. It reports whether it moved any.
func (m *activeMoves) byCategory(phase int) (moved bool) {
	p, c := m.p, m.c
	for cat := range 6 {
		for u := range p.nW {
			var list []int
			switch cat {
			case 0, 5:
				list = p.sbList[u]
			case 1, 4:
				list = p.wuList[u]
			case 2:
				list = p.cuList[u]
			case 3:
				list = p.minList[u]
			}
			for i := len(list) - 1; i >= 0 && c.receiver(phase, u); i-- {
				t := list[i]
				v := p.astar[t]
				if v == u || !c.donor(phase, v) {
					continue
				}
				if cu := p.caughtUp(u, t); (cat <= 1 && !cu) || (cat >= 4 && cu) {
					continue
				}
				if m.try(t, v, u) {
					moved = true
				}
			}
		}
	}
	return moved
}

// anything has the least loaded receiver take from the most loaded donor a
// task nobody has state for, else (with a warm-up slot) its highest task.
// It reports whether it moved any.
func (m *activeMoves) anything(phase int) (progress bool) {
	p, c := m.p, m.c
	recv, don := c.receivers(phase), c.donors(phase, nil)
	for recv.len() > 0 && don.len() > 0 {
		u := recv.top()
		if !c.receiver(phase, u) {
			recv.pop()
			continue
		}
		tried := p.scratch[:0]
		moved := false
		for don.len() > 0 && !moved {
			v := don.pop()
			if !c.donor(phase, v) {
				continue // for good: donors only shrink within a phase
			}
			tried = append(tried, v)
			t := -1
			if l := m.unstated[v]; len(l) > 0 {
				t = l[len(l)-1]
			} else if p.budget > 0 {
				t = m.act[v][len(m.act[v])-1]
			}
			moved = t >= 0 && m.try(t, v, u)
		}
		for _, v := range tried {
			don.push(v)
		}
		p.scratch = tried
		if moved {
			recv.fix(u)
			progress = true
			continue
		}
		// No donor could serve u; whether one can does not depend on the
		// receiver, so no other receiver will be served.
		if p.budget == 0 {
			p.blocked = true
		}
		break
	}
	return progress
}

// partner is the worker that should take the standby slot of t when its
// active moves: the previous active's worker, else the state-preserving one.
func (p *planner) partner(t int) int {
	if a := p.prevA[t]; a >= 0 && a != p.astar[t] {
		return a
	}
	if a := p.a0[t]; a != p.astar[t] {
		return a
	}
	return -1
}

// activeWaits reports whether the target active of t must wait for its
// worker to catch up: the active then stays where it can run now.
func (p *planner) activeWaits(t int) bool {
	a := p.astar[t]
	return a != p.a0[t] && !p.caughtUp(a, t) && !p.free(t, a)
}

// valuable reports whether w runs a caught-up copy of t now (active,
// standby or warm-up): moving a target standby away from it to a worker
// that is not caught up waits for a warm-up.
func (p *planner) valuable(t, w int) bool {
	return p.caughtUp(w, t) && (p.prevA[t] == w || slices.Contains(p.prevS[t], w) || slices.Contains(p.prevW[t], w))
}

// placeStandbys computes the target standbys: previous standbys stay, a
// promoted standby swaps roles with the old active, surplus standbys go
// (lagging and loaded ones first), missing ones go to workers with state
// before empty ones, and then the copies are balanced.
func (p *planner) placeStandbys() {
	p.sstar = make([][]int, p.nT)
	p.extra = make([][]int, p.nT)
	p.reserved = make([][]int, p.nT)
	p.need = make([]int, p.nT)
	p.pend = make([][]pendingMove, p.nT)
	p.copies = make([]int, p.nW)
	for _, t := range p.stateful {
		p.copies[p.astar[t]] += p.wt[t]
	}
	p.keepStandbys()
	n := 0
	for _, t := range p.stateful {
		n += (1 + p.need[t]) * p.wt[t]
	}
	c := newCounter(p.copies, n, p.weight, p.totalW, p.maxWC)
	p.dropSurplus()
	p.fillStandbys(c)
	if p.frozen {
		return
	}
	p.respread(c)
	p.balanceCopies(c)
	p.preferCaughtUp(c)
}

// keepStandbys starts the target standbys from the previous ones: they
// stay, a promoted standby's slot goes to the old active's worker (a swap),
// a drained worker's stay as extras and an away worker's are reserved for
// it. It sets need, the standbys each task gets on live workers: its
// standby count less those reserved, but enough for Config.MinCopies.
func (p *planner) keepStandbys() {
	// The standby lists share one buffer (one allocation instead of one per
	// task); a list that outgrows its share is reallocated by append.
	size := 0
	for _, t := range p.stateful {
		size += max(p.kt[t], len(p.prevS[t])) + 1
	}
	buf := make([]int, size)
	for _, t := range p.stateful {
		a := p.astar[t]
		n := max(p.kt[t], len(p.prevS[t])) + 1
		s := buf[:0:n]
		buf = buf[n:]
		var extra, reserved []int
		for _, w := range p.prevS[t] {
			switch {
			case w == a:
			case p.away[w]:
				reserved = append(reserved, w)
			case p.drained[w]:
				extra = append(extra, w)
			default:
				s = append(s, w)
			}
		}
		if len(s)+len(extra)+len(reserved) < len(p.prevS[t]) {
			if w := p.partner(t); w >= 0 && !slices.Contains(s, w) && !slices.Contains(extra, w) && !slices.Contains(reserved, w) {
				switch {
				case p.away[w]:
					reserved = insertSorted(reserved, w)
				case p.drained[w]:
					extra = insertSorted(extra, w)
				default:
					s = insertSorted(s, w)
				}
			}
		}
		reserved = reserved[:min(len(reserved), p.kt[t])]
		p.need[t] = max(p.kt[t]-len(reserved), min(p.kt[t], p.cfg.MinCopies-1))
		p.extra[t], p.reserved[t] = extra, reserved
		p.sstar[t] = s
		for _, w := range s {
			p.copies[w] += p.wt[t]
		}
	}
}

// dropSurplus removes target standbys beyond need, those adding the
// fewest spread values first, then lagging, then loaded ones.
func (p *planner) dropSurplus() {
	for _, t := range p.stateful {
		for len(p.sstar[t]) > p.need[t] {
			s := p.sstar[t]
			vi := 0
			for i := 1; i < len(s); i++ {
				if p.dropFirst(t, s[i], s[vi]) {
					vi = i
				}
			}
			p.copies[s[vi]] -= p.wt[t]
			p.sstar[t] = slices.Delete(s, vi, vi+1)
		}
	}
}

// fillStandbys adds the missing target standbys (fillCandidate).
func (p *planner) fillStandbys(c *counter) {
	lighter := func(a, b int) bool {
		c := cmpLoad(p.copies[a]+1, p.weight[a], p.copies[b]+1, p.weight[b])
		return c < 0 || (c == 0 && a < b)
	}
	var h *workerHeap
	for _, t := range p.stateful {
		for len(p.sstar[t]) < p.need[t] {
			if h == nil {
				h = newWorkerHeap(p.nW, lighter)
			}
			w := p.fillCandidate(t, c.hi, lighter, h)
			if w < 0 {
				break
			}
			p.sstar[t] = insertSorted(p.sstar[t], w)
			p.copies[w] += p.wt[t]
			h.fix(w)
		}
	}
}

// preferCaughtUp moves each new target copy on a worker that is not caught
// up (it would restore from scratch or from far behind) to the most caught-up
// eligible worker, as long as both workers stay inside their bands in every
// class the copy counts in (actives for an active, stateful copies for
// both): the balancing steps pick receivers by load, and among equally
// balanced placements the one with the least to restore is cheapest, as in
// Kafka Streams. New means that the worker held no copy of the task in
// Previous; a copy a worker already runs or restores stays, so that a plan
// fed its own output does not move it again. A class with a worker outside
// its band is left alone: a move there could open a balancing move that the
// balancing steps did not consider. Every move lowers one copy's lag and
// raises none, so the loop ends.
func (p *planner) preferCaughtUp(copies *counter) {
	acts := p.activeCounter()
	if !copies.inBand() {
		return
	}
	actsOK := acts.inBand()
	held := func(t, w int) bool {
		return p.origA[t] == w || slices.Contains(p.origS[t], w) || slices.Contains(p.origW[t], w)
	}
	for changed := true; changed; {
		changed = false
		for _, t := range p.stateful {
			if w := p.astar[t]; actsOK && !held(t, w) && !p.caughtUp(w, t) {
				u := p.moreCaughtUp(t, w, acts, func(u int) bool {
					return acts.fits(w, u, p.wa[t]) && copies.fits(w, u, p.wt[t]) && p.spreadKeeps(t, w, u)
				})
				if u >= 0 && p.retargetActive(t, w, u) {
					acts.cnt[w] -= p.wa[t]
					acts.cnt[u] += p.wa[t]
					copies.cnt[w] -= p.wt[t]
					copies.cnt[u] += p.wt[t]
					changed = true
				}
			}
			// Iterate over a copy: a move reorders the list.
			p.scratch = append(p.scratch[:0], p.sstar[t]...)
			for _, w := range p.scratch {
				if held(t, w) || p.caughtUp(w, t) {
					continue
				}
				if u := p.moreCaughtUp(t, w, copies, func(u int) bool { return copies.fits(w, u, p.wt[t]) && p.spreadKeeps(t, w, u) }); u >= 0 {
					p.retargetStandby(t, w, u)
					copies.cnt[w] -= p.wt[t]
					copies.cnt[u] += p.wt[t]
					changed = true
				}
			}
		}
	}
}

// effLag is the lag of w on t for ranking destinations: every caught-up
// worker counts as fully caught up, as in the rest of the planner.
func (p *planner) effLag(w, t int) int64 {
	if l := p.lag(w, t); l > p.cfg.AcceptableRecoveryLag {
		return l
	}
	return 0
}

// moreCaughtUp returns the eligible worker (capacity above 0, holding no
// target copy of t, accepted by ok) that is strictly more caught up on t
// than w, the most caught up first, then the least loaded in class c, then
// by id; -1 when there is none. Only a worker with state can be more caught
// up than w, which is not caught up.
func (p *planner) moreCaughtUp(t, w int, c *counter, ok func(int) bool) int {
	best, bestLag, lw := -1, int64(0), p.effLag(w, t)
	for _, e := range p.lags[t] {
		u := e.w
		l := p.effLag(u, t)
		if u == w || l >= lw || p.weight[u] == 0 || p.holds(t, u) || !ok(u) {
			continue
		}
		if best < 0 || l < bestLag || (l == bestLag && cmpLoad(c.cnt[u]+1, c.weight[u], c.cnt[best]+1, c.weight[best]) < 0) {
			best, bestLag = u, l
		}
	}
	return best
}

// retargetActive moves the target active of t from w to u, taking or
// freeing a warm-up slot as u needs one or not; it reports false, changing
// nothing, when u needs a slot and none is left.
func (p *planner) retargetActive(t, w, u int) bool {
	switch need := p.needsWarmup(t, u); {
	case need && !p.paid[t]:
		if p.budget == 0 {
			return false
		}
		p.budget--
		p.paid[t] = true
	case !need && p.paid[t]:
		p.budget++
		p.paid[t] = false
	}
	p.astar[t] = u
	return true
}

// retargetStandby moves a target standby of t from w to u; a copy that
// waits on the worker for w to warm up now waits for u, or not at all when
// u is caught up.
func (p *planner) retargetStandby(t, w, u int) {
	if i := slices.IndexFunc(p.pend[t], func(m pendingMove) bool { return m.to == w }); i >= 0 {
		if p.caughtUp(u, t) {
			p.pend[t] = slices.Delete(p.pend[t], i, i+1)
			p.budget++
		} else {
			p.pend[t][i].to = u
		}
	}
	p.sstar[t] = insertSorted(removeSorted(p.sstar[t], w), u)
}

// dropFirst orders surplus standbys of t for removal: those adding fewer
// spread values first, then lagging before caught up, then more loaded,
// then higher id.
func (p *planner) dropFirst(t, a, b int) bool {
	if p.sp != nil {
		if ma, mb := p.newValues(t, a, a), p.newValues(t, b, b); ma != mb {
			return ma < mb
		}
	}
	ca, cb := p.caughtUp(a, t), p.caughtUp(b, t)
	if ca != cb {
		return !ca
	}
	if c := cmpLoad(p.copies[a], p.weight[a], p.copies[b], p.weight[b]); c != 0 {
		return c > 0
	}
	return a > b
}

// fillCandidate picks the worker for a missing standby of t, among those
// that spread its copies best (Config.SpreadBy): one that held
// the active (kept even above its ceiling when caught up, since its state is
// worth keeping and balancing may still move it), then the least loaded
// caught-up worker, then the most caught-up worker with state, then the
// least loaded warm-up holder (each only while below its ceiling), else the
// least loaded worker that does not hold t.
func (p *planner) fillCandidate(t int, hi []int, lighter func(a, b int) bool, h *workerHeap) int {
	spreads := func(int) bool { return true }
	if p.sp != nil {
		best := p.bestNewValues(t)
		spreads = func(w int) bool { return p.newValues(t, w, -1) == best }
	}
	ok := func(w int) bool {
		return w >= 0 && p.weight[w] > 0 && p.copies[w]+p.wt[t] <= hi[w] && !p.holds(t, w) && spreads(w)
	}
	for _, w := range [...]int{p.partner(t), p.prevA[t], p.a0[t]} {
		if w >= 0 && p.weight[w] > 0 && !p.holds(t, w) && spreads(w) && (p.caughtUp(w, t) || p.copies[w]+p.wt[t] <= hi[w]) {
			return w
		}
	}
	best := -1
	for _, e := range p.lags[t] {
		if e.lag <= p.cfg.AcceptableRecoveryLag && ok(e.w) && (best < 0 || lighter(e.w, best)) {
			best = e.w
		}
	}
	if best >= 0 {
		return best
	}
	// Nobody free is caught up: the most caught up has the least to restore.
	bestLag := int64(0)
	for _, e := range p.lags[t] {
		if ok(e.w) && (best < 0 || e.lag < bestLag || (e.lag == bestLag && lighter(e.w, best))) {
			best, bestLag = e.w, e.lag
		}
	}
	if best >= 0 {
		return best
	}
	for _, w := range p.prevW[t] {
		if ok(w) && (best < 0 || lighter(w, best)) {
			best = w
		}
	}
	if best >= 0 {
		return best
	}
	best, p.scratch = h.minExcluding(func(w int) bool { return p.weight[w] == 0 || p.holds(t, w) || !spreads(w) }, p.scratch)
	return best
}

// balanceCopies moves target standbys until the stateful copies are balanced
// or no allowed move remains, preferring receivers that are caught up on the
// task, then receivers warming it up, and standbys whose move loses nothing.
// Moving a caught-up running copy to a worker that is not caught up takes a
// warm-up slot and is recorded in pend (reconcile keeps the copy in place
// until the warm-up has caught up).
func (p *planner) balanceCopies(c *counter) {
	m := &copyMoves{p: p, c: c}
	m.sb[0], m.sb[1] = make([][]int, p.nW), make([][]int, p.nW)
	// The standbys of a task whose active move waits stay put: the target
	// worker of the active takes one of their slots in the output, so moving
	// them would make the output flap between rounds.
	for _, t := range p.stateful {
		if p.activeWaits(t) {
			continue
		}
		for _, w := range p.sstar[t] {
			l := m.class(t, w)
			m.sb[l][w] = append(m.sb[l][w], t)
		}
	}
	for progress := true; progress; {
		progress = false
		for phase := 1; phase <= 3; phase++ {
			if !c.needed(phase) {
				continue
			}
			if m.byCategory(phase) {
				progress = true
			}
			if m.anything(phase) {
				progress = true
			}
		}
	}
}

// copyMoves is balanceCopies' working state: the counts it balances and
// each worker's target standbys, split by whether moving them away costs
// a warm-up slot (sb[1]) or not (sb[0]).
type copyMoves struct {
	p  *planner
	c  *counter
	sb [2][][]int
}

// class is the sb list a standby of t on w belongs in.
func (m *copyMoves) class(t, w int) int {
	if m.p.valuable(t, w) {
		return 1
	}
	return 0
}

// try moves a target standby of t from v to u. Moving a valuable copy to a
// worker that is not caught up pays a warm-up slot and is recorded as a
// pending move; without a slot it moves nothing and reports false.
func (m *copyMoves) try(t, v, u int) bool {
	p := m.p
	if !m.c.fits(v, u, p.wt[t]) || !p.spreadKeeps(t, v, u) {
		return false
	}
	cu := p.caughtUp(u, t)
	i := slices.IndexFunc(p.pend[t], func(pm pendingMove) bool { return pm.to == v })
	switch {
	case i >= 0 && cu: // the waiting move can now happen at once
		p.pend[t] = slices.Delete(p.pend[t], i, i+1)
		p.budget++
	case i >= 0:
		p.pend[t][i].to = u
	case !cu && p.valuable(t, v):
		if p.budget == 0 {
			p.blocked = true
			return false
		}
		p.budget--
		p.pend[t] = append(p.pend[t], pendingMove{from: v, to: u})
	}
	s := removeSorted(p.sstar[t], v)
	p.sstar[t] = insertSorted(s, u)
	m.c.cnt[v] -= p.wt[t]
	m.c.cnt[u] += p.wt[t]
	l := m.class(t, v)
	m.sb[l][v] = removeSorted(m.sb[l][v], t)
	l = m.class(t, u)
	m.sb[l][u] = insertSorted(m.sb[l][u], t)
	return true
}

// byCategory moves standbys to receivers by category, best first: a
// caught-up warm-up, any caught-up worker, a warm-up in progress; each
// from the most loaded donor holding one. It reports whether it moved any.
func (m *copyMoves) byCategory(phase int) (moved bool) {
	p, c := m.p, m.c
	for cat := range 3 {
		for u := range p.nW {
			list := p.wuList[u]
			if cat == 1 {
				list = p.cuList[u]
			}
			for i := len(list) - 1; i >= 0 && c.receiver(phase, u); i-- {
				t := list[i]
				if cu := p.caughtUp(u, t); (cat == 0 && !cu) || (cat == 2 && cu) || p.holds(t, u) || p.activeWaits(t) {
					continue
				}
				v := -1
				for _, w := range p.sstar[t] {
					if c.donor(phase, w) && (v < 0 || cmpLoad(c.cnt[w], c.weight[w], c.cnt[v], c.weight[v]) > 0) {
						v = w
					}
				}
				if v >= 0 && m.try(t, v, u) {
					moved = true
				}
			}
		}
	}
	return moved
}

// canServe reports whether donor v has a standby it may give: any when a
// warm-up slot is left, else only one whose move loses nothing. Without
// slots only donors with cheap standbys can serve anyone; dropping the
// others keeps failures cheap.
func (m *copyMoves) canServe(v int) bool {
	if m.p.budget > 0 || len(m.sb[0][v]) > 0 {
		return true
	}
	if len(m.sb[1][v]) > 0 {
		m.p.blocked = true
	}
	return false
}

// anything has the least loaded receiver take a standby from the most
// loaded donor that has one it may hold. A receiver no donor can serve is
// dropped for the phase: donors only lose standbys, so it will not be
// served later either. It reports whether it moved any.
func (m *copyMoves) anything(phase int) (progress bool) {
	p, c := m.p, m.c
	recv, don := c.receivers(phase), c.donors(phase, m.canServe)
	hadBudget := p.budget > 0
	for recv.len() > 0 && don.len() > 0 {
		if hadBudget && p.budget == 0 {
			hadBudget = false
			don = c.donors(phase, m.canServe)
			continue
		}
		u := recv.top()
		if !c.receiver(phase, u) {
			recv.pop()
			continue
		}
		tried := p.scratch[:0]
		moved := false
		for don.len() > 0 && !moved {
			v := don.pop()
			if !c.donor(phase, v) || !m.canServe(v) {
				continue // for good: donors only shrink within a phase
			}
			tried = append(tried, v)
			if t := p.pickStandby(m.sb[0][v], m.sb[1][v], v, u); t >= 0 {
				moved = m.try(t, v, u)
			}
		}
		for _, v := range tried {
			don.push(v)
		}
		p.scratch = tried
		if moved {
			recv.fix(u)
			progress = true
		} else {
			recv.pop()
		}
	}
	return progress
}

// pickStandby chooses which standby of a donor moves to u: one whose move
// loses nothing first, then (with a warm-up slot left) a running caught-up
// one, the highest id first; never one u holds or whose move spreads the
// task's copies worse.
func (p *planner) pickStandby(cheap, valuable []int, v, u int) int {
	for i := len(cheap) - 1; i >= 0; i-- {
		if t := cheap[i]; !p.holds(t, u) && p.spreadKeeps(t, v, u) {
			return t
		}
	}
	for i := len(valuable) - 1; i >= 0; i-- {
		if t := valuable[i]; !p.holds(t, u) && p.spreadKeeps(t, v, u) {
			if p.budget == 0 {
				p.blocked = true
				return -1
			}
			return t
		}
	}
	return -1
}

// warmupRequest asks for a warm-up of task t on worker w because a target
// move onto w waits for w to catch up.
type warmupRequest struct {
	t, w    int
	paid    bool // the target reserved a slot for it
	resume  bool // w already warms t up
	standby bool // for a standby move rather than an active move
}

// reconcile turns the target into what can run now: moves onto workers that
// are not caught up wait (the copy stays where it holds state) and the
// destination warms up, as a warm-up or, when a standby slot is free for
// it, as a standby.
func (p *planner) reconcile() {
	p.aOut = make([]int, p.nT)
	p.sOut = make([][]int, p.nT)
	p.wOut = make([][]int, p.nT)
	var reqs []warmupRequest
	buf := make([]int, p.nCopies)
	for _, t := range p.stateful {
		a := p.astar[t]
		k := p.kt[t]
		s := append(buf[:0:k+1], p.sstar[t]...)
		buf = buf[k+1:]
		out := a
		if p.activeWaits(t) {
			out = p.a0[t]
			if i := slices.Index(s, out); i >= 0 {
				s[i] = a // the target made the old active a standby: swap back
			} else {
				s = append(s, a)
			}
			if len(s) > p.need[t] {
				di := 0
				for i := 1; i < len(s); i++ {
					if vi, vd := p.keepValue(t, s[i], a), p.keepValue(t, s[di], a); vi < vd || (vi == vd && s[i] > s[di]) {
						di = i
					}
				}
				if s[di] == a {
					reqs = append(reqs, warmupRequest{t: t, w: a, paid: p.paid[t], resume: slices.Contains(p.prevW[t], a)})
				}
				s = slices.Delete(s, di, di+1)
			}
		}
		for _, m := range p.pend[t] {
			i := slices.Index(s, m.to)
			if i < 0 || m.from == out || slices.Contains(s, m.from) {
				continue
			}
			s[i] = m.from
			reqs = append(reqs, warmupRequest{t: t, w: m.to, paid: true, resume: slices.Contains(p.prevW[t], m.to), standby: true})
		}
		slices.Sort(s)
		if out != a || !slices.Equal(s, p.sstar[t]) {
			p.followup = true
		}
		// A drained worker's standbys stay beside the others, unless it
		// keeps the active while its move waits.
		for _, w := range p.extra[t] {
			if w != out {
				s = insertSorted(s, w)
			}
		}
		// So do the standbys kept for away workers.
		for _, w := range p.reserved[t] {
			s = insertSorted(s, w)
		}
		p.aOut[t], p.sOut[t] = out, s
		if p.frozen {
			// Warm-ups in progress go on (no new one starts) on workers
			// that may still take a copy.
			for _, w := range p.prevW[t] {
				if p.weight[w] > 0 && w != out && !slices.Contains(s, w) {
					p.wOut[t] = append(p.wOut[t], w)
				}
			}
		}
	}
	if p.blocked {
		p.followup = true
	}
	// Reserved slots first, then warm-ups in progress (so restoration is not
	// thrown away), then actives before standbys, then by id.
	slices.SortFunc(reqs, func(x, y warmupRequest) int {
		return cmp.Or(cmpTrueFirst(x.paid, y.paid), cmpTrueFirst(x.resume, y.resume), cmpTrueFirst(!x.standby, !y.standby),
			cmp.Compare(x.t, y.t), cmp.Compare(x.w, y.w))
	})
	for _, r := range reqs[:min(len(reqs), p.cfg.MaxWarmupReplicas)] {
		p.wOut[r.t] = insertSorted(p.wOut[r.t], r.w)
	}
}

// keepValue ranks the candidate standbys of a task whose active move waits,
// when one must go: caught-up copies are kept first, then previous standbys
// and the previous active, then the waiting target (which then warms up as
// a warm-up rather than displacing a standby), then new ones.
func (p *planner) keepValue(t, w, target int) int {
	switch {
	case p.caughtUp(w, t):
		return 3
	case p.prevA[t] == w || slices.Contains(p.prevS[t], w):
		return 2
	case w == target:
		return 1
	}
	return 0
}

func cmpTrueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// placeStateless keeps stateless tasks where they ran, places new ones on the
// least loaded workers and then moves them to balance the total load (every
// active and standby), since they cost nothing to move.
func (p *planner) placeStateless() {
	if len(p.stateless) == 0 {
		return
	}
	load := make([]int, p.nW)
	n := 0
	for _, t := range p.stateless {
		n += p.wt[t]
	}
	for _, t := range p.stateful {
		load[p.aOut[t]] += p.wt[t]
		for _, w := range p.sOut[t] {
			load[w] += p.wt[t]
		}
		n += (1 + len(p.sOut[t])) * p.wt[t]
	}
	sl := make([][]int, p.nW)
	var unplaced []int
	for _, t := range p.stateless {
		if a := p.prevA[t]; a >= 0 && !p.away[a] {
			p.aOut[t] = a
			load[a] += p.wt[t]
			sl[a] = append(sl[a], t)
		} else {
			unplaced = append(unplaced, t)
		}
	}
	if len(unplaced) > 0 {
		h := newWorkerHeap(p.nW, func(a, b int) bool {
			c := cmpLoad(load[a]+1, p.weight[a], load[b]+1, p.weight[b])
			return c < 0 || (c == 0 && a < b)
		})
		for _, t := range unplaced {
			w := h.top()
			p.aOut[t] = w
			load[w] += p.wt[t]
			sl[w] = insertSorted(sl[w], t)
			h.fix(w)
		}
	}
	if !p.frozen {
		p.balanceStateless(newCounter(load, n, p.weight, p.totalW, p.maxWT), sl)
	}
}

// balanceStateless moves stateless tasks (sl: each worker's, sorted) until
// the total load is balanced or no task fits anywhere.
func (p *planner) balanceStateless(c *counter, sl [][]int) {
	hasItems := func(w int) bool { return len(sl[w]) > 0 }
	for progress := true; progress; {
		progress = false
		for phase := 1; phase <= 3; phase++ {
			recv, don := c.receivers(phase), c.donors(phase, hasItems)
			for recv.len() > 0 && don.len() > 0 {
				u, v := recv.top(), don.top()
				if !c.receiver(phase, u) {
					recv.pop()
					continue
				}
				if !c.donor(phase, v) || !hasItems(v) {
					don.pop()
					continue
				}
				// The donor's highest task that fits; with weights the
				// highest may not, and a donor with none that fits is done.
				i := len(sl[v]) - 1
				for i >= 0 && !c.fits(v, u, p.wt[sl[v][i]]) {
					i--
				}
				if i < 0 {
					don.pop()
					continue
				}
				t := sl[v][i]
				sl[v] = slices.Delete(sl[v], i, i+1)
				sl[u] = insertSorted(sl[u], t)
				p.aOut[t] = u
				c.cnt[v] -= p.wt[t]
				c.cnt[u] += p.wt[t]
				recv.fix(u)
				don.fix(v)
				progress = true
			}
		}
	}
}

var kindOrder = map[string]int{KindActive: 0, KindStandby: 1, KindWarmup: 2}

// result converts indices back to ids and lists the moves.
func (p *planner) result() Result {
	res := Result{Assignment: make(Assignment, p.nT), Followup: p.followup, Unspread: p.shortfalls()}
	name := func(w int) string {
		if w < 0 {
			return ""
		}
		return p.workers[w].ID
	}
	total := 0
	for _, t := range p.stateful {
		total += len(p.sOut[t]) + len(p.wOut[t])
	}
	buf := make([]string, 0, total)
	names := func(ws []int) []string {
		if len(ws) == 0 {
			return nil
		}
		start := len(buf)
		for _, w := range ws {
			buf = append(buf, p.workers[w].ID)
		}
		return buf[start:len(buf):len(buf)]
	}
	var removed, added []int
	diff := func(id string, before, after []int, kind string) {
		removed, added = removed[:0], added[:0]
		for _, w := range before {
			if !slices.Contains(after, w) {
				removed = append(removed, w)
			}
		}
		for _, w := range after {
			if !slices.Contains(before, w) {
				added = append(added, w)
			}
		}
		for i := range max(len(removed), len(added)) {
			m := Move{Task: id, Kind: kind}
			if i < len(removed) {
				m.From = name(removed[i])
			}
			if i < len(added) {
				m.To = name(added[i])
			}
			res.Moves = append(res.Moves, m)
		}
	}
	for t, task := range p.tasks {
		res.Assignment[task.ID] = Placement{
			Active:   name(p.aOut[t]),
			Standbys: names(p.sOut[t]),
			Warmups:  names(p.wOut[t]),
		}
		if p.origA[t] != p.aOut[t] {
			res.Moves = append(res.Moves, Move{Task: task.ID, From: name(p.origA[t]), To: name(p.aOut[t]), Kind: KindActive})
		}
		diff(task.ID, p.origS[t], p.sOut[t], KindStandby)
		diff(task.ID, p.origW[t], p.wOut[t], KindWarmup)
	}
	slices.SortStableFunc(res.Moves, func(x, y Move) int {
		return cmp.Or(strings.Compare(x.Task, y.Task), cmp.Compare(kindOrder[x.Kind], kindOrder[y.Kind]),
			strings.Compare(x.From, y.From), strings.Compare(x.To, y.To))
	})
	return res
}
