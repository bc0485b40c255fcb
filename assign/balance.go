package assign

import (
	"cmp"
	"math/bits"
	"slices"
)

// cmpLoad compares the loads a/wa and b/wb exactly (128-bit cross products,
// no floating point, so every node rounds the same way). A weight of 0 is an
// infinite load, so drained workers sort after every weighted one.
func cmpLoad(a int, wa uint64, b int, wb uint64) int {
	if wa == 0 || wb == 0 {
		switch {
		case wa == 0 && wb == 0:
			return cmp.Compare(a, b)
		case wa == 0:
			return 1
		default:
			return -1
		}
	}
	h1, l1 := bits.Mul64(uint64(a), wb)
	h2, l2 := bits.Mul64(uint64(b), wa)
	if c := cmp.Compare(h1, h2); c != 0 {
		return c
	}
	return cmp.Compare(l1, l2)
}

// band returns floor and ceil of n·w/total, the balanced range of one worker
// (see the package doc); total is never 0.
func band(n int, w, total uint64) (lo, hi int) {
	h, l := bits.Mul64(uint64(n), w)
	q, r := bits.Div64(h, l, total)
	if r != 0 {
		return int(q), int(q) + 1
	}
	return int(q), int(q)
}

// counter tracks the weighted counts of one balanced class against its bands and
// answers the donor/receiver questions of the three balancing phases:
//
//	phase 1: above ceiling -> below floor (each move fixes two violations)
//	phase 2: above ceiling -> below ceiling
//	phase 3: above floor   -> below floor
//
// Running phase 1 first gives the fewest moves: max(total excess over the
// ceilings, total deficit under the floors).
type counter struct {
	cnt    []int
	lo, hi []int
	weight []uint64
}

// newCounter makes the counter of a class whose items weigh at most maxW
// and n in all: each band widens by maxW−1 on both sides (so that with
// unit weights it is exactly [floor, ceil]), since a worker can come no
// closer to its ideal than the weight of the items it holds.
func newCounter(cnt []int, n int, weight []uint64, total uint64, maxW int) *counter {
	c := &counter{cnt: cnt, lo: make([]int, len(cnt)), hi: make([]int, len(cnt)), weight: weight}
	slack := max(maxW-1, 0)
	for w := range cnt {
		if weight[w] == 0 {
			continue // drained or away: [0, 0] whatever the weights
		}
		lo, hi := band(n, weight[w], total)
		c.lo[w], c.hi[w] = max(lo-slack, 0), hi+slack
	}
	return c
}

// newToleranceCounter makes a counter whose bands are the ideal ± tol
// percent (BalanceLoad), and at least [floor, ceil] of it.
func newToleranceCounter(cnt []int, n int, weight []uint64, total uint64, tol int) *counter {
	c := &counter{cnt: cnt, lo: make([]int, len(cnt)), hi: make([]int, len(cnt)), weight: weight}
	for w := range cnt {
		lo, hi := band(n, weight[w], total)
		// n·weight fits 64 bits (n is bounded by tasks × MaxWeight and
		// weight by MaxCapacity); the product with the percentage may not.
		nw := uint64(n) * weight[w]
		h, l := bits.Mul64(nw, uint64(100-tol))
		q, _ := bits.Div64(h, l, 100*total)
		c.lo[w] = min(lo, int(q))
		h, l = bits.Mul64(nw, uint64(100+tol))
		q, r := bits.Div64(h, l, 100*total)
		if r != 0 {
			q++
		}
		c.hi[w] = max(hi, int(q))
	}
	return c
}

// fits reports whether moving an item of weight x from v to u leaves v at
// or above its floor and u at or below its ceiling. With unit weights
// every donor-to-receiver move of the three phases fits; with weights the
// check keeps each move from overshooting, so every move strictly lowers
// the total distance to the bands and the phases end.
func (c *counter) fits(v, u, x int) bool {
	return c.cnt[v]-x >= c.lo[v] && c.cnt[u]+x <= c.hi[u]
}

func (c *counter) donor(phase, v int) bool {
	if phase == 3 {
		return c.cnt[v] > c.lo[v]
	}
	return c.cnt[v] > c.hi[v]
}

func (c *counter) receiver(phase, u int) bool {
	if phase == 2 {
		return c.cnt[u] < c.hi[u]
	}
	return c.cnt[u] < c.lo[u]
}

// inBand reports whether every worker is inside its band.
func (c *counter) inBand() bool {
	for w := range c.cnt {
		if c.cnt[w] < c.lo[w] || c.cnt[w] > c.hi[w] {
			return false
		}
	}
	return true
}

// needed reports whether a phase has both a donor and a receiver, so that
// balanced classes cost one scan.
func (c *counter) needed(phase int) bool {
	d, r := false, false
	for w := range c.cnt {
		d = d || c.donor(phase, w)
		r = r || c.receiver(phase, w)
		if d && r {
			return true
		}
	}
	return false
}

// receivers returns a heap of the phase's receivers, least loaded after
// taking one more item ((cnt+1)/weight) first, ties by id. Within a phase
// counts only move towards the band, so a worker that stops being a
// receiver never becomes one again: callers drop it when it surfaces.
func (c *counter) receivers(phase int) *workerHeap {
	var ws []int
	for u := range c.cnt {
		if c.receiver(phase, u) {
			ws = append(ws, u)
		}
	}
	return newWorkerHeapOf(ws, len(c.cnt), func(a, b int) bool {
		x := cmpLoad(c.cnt[a]+1, c.weight[a], c.cnt[b]+1, c.weight[b])
		return x < 0 || (x == 0 && a < b)
	})
}

// donors returns a heap of the phase's donors accepted by ok (nil: all),
// most loaded (cnt/weight) first, ties by id.
func (c *counter) donors(phase int, ok func(int) bool) *workerHeap {
	var ws []int
	for v := range c.cnt {
		if c.donor(phase, v) && (ok == nil || ok(v)) {
			ws = append(ws, v)
		}
	}
	return newWorkerHeapOf(ws, len(c.cnt), func(a, b int) bool {
		x := cmpLoad(c.cnt[a], c.weight[a], c.cnt[b], c.weight[b])
		return x > 0 || (x == 0 && a < b)
	})
}

// workerHeap is an indexed min-heap of worker indices under a caller-defined
// order that depends on mutable counts; the caller calls fix after changing a
// worker's count. It finds the least loaded worker in O(log workers).
type workerHeap struct {
	h    []int
	pos  []int
	less func(a, b int) bool
}

func newWorkerHeap(n int, less func(a, b int) bool) *workerHeap {
	ws := make([]int, n)
	for i := range n {
		ws[i] = i
	}
	return newWorkerHeapOf(ws, n, less)
}

// newWorkerHeapOf builds a heap of the given workers out of n; it takes
// ownership of ws.
func newWorkerHeapOf(ws []int, n int, less func(a, b int) bool) *workerHeap {
	x := &workerHeap{h: ws, pos: make([]int, n), less: less}
	for i, w := range ws {
		x.pos[w] = i
	}
	for i := len(ws)/2 - 1; i >= 0; i-- {
		x.down(i)
	}
	return x
}

func (x *workerHeap) len() int { return len(x.h) }

func (x *workerHeap) swap(i, j int) {
	x.h[i], x.h[j] = x.h[j], x.h[i]
	x.pos[x.h[i]], x.pos[x.h[j]] = i, j
}

func (x *workerHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !x.less(x.h[i], x.h[p]) {
			return
		}
		x.swap(i, p)
		i = p
	}
}

func (x *workerHeap) down(i int) bool {
	start, n := i, len(x.h)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && x.less(x.h[r], x.h[l]) {
			m = r
		}
		if !x.less(x.h[m], x.h[i]) {
			break
		}
		x.swap(i, m)
		i = m
	}
	return i > start
}

func (x *workerHeap) fix(w int) {
	if i := x.pos[w]; !x.down(i) {
		x.up(i)
	}
}

func (x *workerHeap) top() int { return x.h[0] }

func (x *workerHeap) pop() int {
	n := len(x.h) - 1
	w := x.h[0]
	x.swap(0, n)
	x.h = x.h[:n]
	x.down(0)
	return w
}

func (x *workerHeap) push(w int) {
	x.h = append(x.h, w)
	x.pos[w] = len(x.h) - 1
	x.up(len(x.h) - 1)
}

// minExcluding returns the least worker that excluded rejects, or -1; the
// excluded ones are few (the holders of one task), so popping them is cheap.
func (x *workerHeap) minExcluding(excluded func(int) bool, scratch []int) (int, []int) {
	scratch = scratch[:0]
	best := -1
	for len(x.h) > 0 {
		w := x.pop()
		scratch = append(scratch, w)
		if !excluded(w) {
			best = w
			break
		}
	}
	for _, w := range scratch {
		x.push(w)
	}
	return best, scratch
}

func insertSorted(s []int, x int) []int {
	i, found := slices.BinarySearch(s, x)
	if found {
		return s
	}
	return slices.Insert(s, i, x)
}

func removeSorted(s []int, x int) []int {
	if i, found := slices.BinarySearch(s, x); found {
		return slices.Delete(s, i, i+1)
	}
	return s
}
