package placement

import (
	"container/heap"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// The timing model of "at most one active" (docs/design.md, "At most one
// active"): random schedules of workers, heartbeats and primaries, run
// against the primary's real grant bookkeeping (grantBook) and the
// worker's lease rule, checking that no two workers ever may run one task
// at overlapping times.
//
// Real time is float64 milliseconds. Every node has its own monotonic
// clock, off by an offset and running at a rate within 1 ± modelDrift.
//
// A worker:
//   - sends a heartbeat every H on its clock while not paused, listing as
//     running every active it may run or stopped less than J ago (an active
//     counts as running until its Run returned);
//   - waits for one answer at a time: sending the next heartbeat abandons
//     the previous one, whose answer it then ignores;
//   - on an answer, takes its actives as granted and the heartbeat's send
//     time as the start of its lease;
//   - may run (take an externally visible action on) an active at real time
//     τ only when not paused and its clock at τ is less than lease start +
//     active_lease: it checks the lease immediately before each action.
//     An action takes effect within J of its check, so what it may run is
//     each allowed interval extended by J;
//   - sends an extra (urgent) heartbeat, abandoning the outstanding one, as
//     soon as an active it stopped no longer counts as running (J after it
//     stopped: its Run has returned);
//   - may start leaving at a random time: from then on it starts no active
//     (it keeps running those it runs until told otherwise, its lease ends
//     or it is paused) and its heartbeats say leaving; once it runs nothing it either sends
//     leave_now and is gone, or keeps sending until an answer says it left,
//     and is gone then. A worker that is gone never sends again and ignores
//     answers.
//
// Heartbeats and answers are delayed by random amounts (some longer than
// the session timeout) or lost. A primary serves from its term start to
// its failover; it processes a heartbeat delivered while it serves, unless
// it already processed a later one of that worker (the ordering the design
// assumes), and answers only heartbeats of workers with a session (others
// register). It may hold a heartbeat: having recorded its report on
// arrival, it answers at a random later wake within the heartbeat interval,
// deciding the grants again at the wake with the assignment then, if it
// still serves, the session still exists and no later heartbeat of the
// worker was processed meanwhile (else the held heartbeat gets no answer).
// It ends a leaving worker's session (grantBook.leave) on leave_now, or on
// a leaving heartbeat that reports nothing running when the worker is
// assigned no active, and then hands the worker's actives to other workers
// soon after its leaving heartbeats. A failover stops the primary at once;
// the next starts after a random gap with no sessions, moves nothing before
// its settle period (the session timeout) and runs the same code.
// Assignment moves pick a random task and give it a random worker (or
// none), never one the primary knows to be leaving.

var (
	modelSeed = flag.Uint64("model.seed", 0, "run only this timing-model schedule")
	modelRuns = flag.Int("model.runs", 1000, "timing-model schedules to run")
)

const modelDrift = 1e-3

type modelParams struct {
	T, M, H, J     float64 // session timeout, grant margin, heartbeat interval, action-to-effect bound
	Dmax, Loss     float64 // message delay bound and loss probability
	IgnoreLease    bool    // negative control: the worker never checks its lease
	Reorder        bool    // negative control: heartbeats are processed in any order
	LeaveRunning   bool    // negative control: a leaving worker's session ends while it reports actives running
	HoldProb       float64 // the chance the primary holds a heartbeat
	LeaveProb      float64 // the chance a worker starts leaving at some time
	Workers, Tasks int
	Duration       float64
}

type modelClock struct{ off, rate float64 }

func (c modelClock) at(real float64) float64      { return c.off + c.rate*real }
func (c modelClock) realAt(local float64) float64 { return (local - c.off) / c.rate }

type modelEvent struct {
	at   float64
	seq  int
	kind int
	w    int // worker
	hb   *modelBeat
	task int
	to   int // for moves: worker index, -1 (none), or handover (chosen then)
	term int // for wakes: the term that held the heartbeat
}

// handover, as a move's target: a worker with a session that is not
// leaving, chosen when the move happens; the move is off a worker that is
// leaving or has no session, and none if the task moved already.
const handover = -2

const (
	evSend = iota
	evBeatArrives
	evAnswerArrives
	evLeaseEnds
	evPause
	evResume
	evMove
	evFailover
	evTermStart
	evUrgent // an urgent heartbeat: it does not move the periodic ones
	evWake   // a held heartbeat is answered
	evLeave  // a worker starts leaving
)

type modelBeat struct {
	w        int
	seq      int
	sentReal float64
	sentLoc  float64
	running  []string
	granted  []string // the answer's actives
	term     int
	leaving  bool
	leaveNow bool
	left     bool // the answer: the session ended
}

type modelQueue []*modelEvent

func (q modelQueue) Len() int { return len(q) }
func (q modelQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q modelQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *modelQueue) Push(x any)   { *q = append(*q, x.(*modelEvent)) }
func (q *modelQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type modelWorker struct {
	id          string
	clock       modelClock
	paused      bool
	seq         int        // last heartbeat sent
	outstanding *modelBeat // the heartbeat it waits for
	leaseFrom   float64    // local send time of the last acknowledged heartbeat
	leaseEnd    float64    // real time its clock reads leaseFrom + lease
	acked       bool
	actives     map[string]bool
	open        map[string]float64 // task -> start of the interval it may run it in
	lastEnd     map[string]float64 // task -> end of its last interval
	pendingAns  []*modelBeat       // answers that arrived while paused
	idx         int
	leaving     bool
	leaveNow    bool            // once it runs nothing, it leaves without waiting for the primary
	keep        map[string]bool // while leaving: the actives it still runs
	gone        bool
}

type modelPrimary struct {
	term      int
	clock     modelClock
	start     float64 // real
	serving   bool
	book      *grantBook
	sessions  map[string]float64 // worker -> last heard (local)
	processed map[string]int     // worker -> last heartbeat seq processed
	leaving   map[string]bool    // sessions that said they are leaving
}

type modelInterval struct {
	w          string
	start, end float64
}

// modelStats counts what the schedules exercised, so that the test shows
// the paths it covers.
type modelStats struct {
	Schedules, Terms, Pauses, Handovers int
	// Waits counts pending answers by reason.
	Waits map[string]int
	// LeaseEnds counts actives stopped by the lease rather than an answer.
	LeaseEnds int
	// Holds counts held heartbeats, HeldAnswers those answered at their
	// wake, and Urgent the urgent heartbeats sent.
	Holds, HeldAnswers, Urgent int
	// LeftNow and LeftGraceful count sessions ended by leave_now and by a
	// leaving heartbeat; LeaveReleases those ends that let a task go.
	LeftNow, LeftGraceful, LeaveReleases int
}

type modelSim struct {
	p         modelParams
	rng       *rand.Rand
	q         modelQueue
	seq       int
	now       float64
	workers   []*modelWorker
	primary   *modelPrimary
	terms     int
	assign    map[string]string // task -> active worker id
	tasks     []string
	intervals map[string][]modelInterval
	lease     float64
	stats     *modelStats
	trace     []string
	tracing   bool
}

func (s *modelSim) push(e *modelEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *modelSim) logf(format string, args ...any) {
	if s.tracing {
		s.trace = append(s.trace, fmt.Sprintf("%10.1f ", s.now)+fmt.Sprintf(format, args...))
	}
}

func (s *modelSim) clock() modelClock {
	return modelClock{off: s.rng.Float64() * 1e6, rate: 1 + (2*s.rng.Float64()-1)*modelDrift}
}

func (s *modelSim) delay() (float64, bool) {
	if s.rng.Float64() < s.p.Loss {
		return 0, false
	}
	if s.rng.Float64() < 0.05 {
		return s.rng.Float64() * 2 * s.p.T, true // a long stall
	}
	return s.rng.Float64() * s.p.Dmax, true
}

// allowed reports whether worker w may run task t now.
func (s *modelSim) allowed(w *modelWorker, t string) bool {
	if w.paused || w.gone || !w.actives[t] || !w.acked || w.leaving && !w.keep[t] {
		return false
	}
	// The worker's clock reads leaseFrom + lease at real time leaseEnd;
	// comparing real times keeps the check exact at the lease's end.
	return s.p.IgnoreLease || s.now < w.leaseEnd
}

// update opens and closes worker w's intervals after a change.
func (s *modelSim) update(w *modelWorker) {
	for _, t := range s.tasks {
		_, isOpen := w.open[t]
		ok := s.allowed(w, t)
		switch {
		case ok && !isOpen:
			w.open[t] = s.now
			if iv := s.intervals[t]; len(iv) > 0 && iv[len(iv)-1].w != w.id {
				s.stats.Handovers++
			}
			s.logf("%s starts %s", w.id, t)
		case !ok && isOpen:
			s.intervals[t] = append(s.intervals[t], modelInterval{w.id, w.open[t], s.now + s.p.J})
			delete(w.open, t)
			delete(w.keep, t)
			w.lastEnd[t] = s.now
			s.logf("%s stops %s", w.id, t)
			// Once its Run returned, the worker says so at once.
			s.push(&modelEvent{at: s.now + s.p.J, kind: evUrgent, w: w.idx})
		}
	}
}

func (s *modelSim) running(w *modelWorker) []string {
	var r []string
	for _, t := range s.tasks {
		if _, ok := w.open[t]; ok {
			r = append(r, t)
		} else if end, ok := w.lastEnd[t]; ok && s.now < end+s.p.J {
			r = append(r, t)
		}
	}
	return r
}

func (s *modelSim) toTime(local float64) time.Time {
	return time.Unix(0, 0).Add(time.Duration(local * float64(time.Millisecond)))
}

func (s *modelSim) startTerm() {
	s.terms++
	s.stats.Terms++
	p := &modelPrimary{term: s.terms, clock: s.clock(), start: s.now, serving: true,
		sessions: map[string]float64{}, processed: map[string]int{}, leaving: map[string]bool{}}
	fresh := s.terms == 1
	p.book = newGrantBook(s.toTime(p.clock.at(s.now)), fresh,
		time.Duration(s.p.T*float64(time.Millisecond)), time.Duration(s.p.M*float64(time.Millisecond)))
	s.primary = p
	s.logf("term %d starts", p.term)
}

func (s *modelSim) step(e *modelEvent) {
	switch e.kind {
	case evSend:
		w := s.workers[e.w]
		if w.paused || w.gone {
			return // the resume schedules the next send
		}
		s.send(w)
		s.push(&modelEvent{at: w.clock.realAt(w.clock.at(s.now) + s.p.H), kind: evSend, w: e.w})
	case evUrgent:
		if w := s.workers[e.w]; !w.paused && !w.gone {
			s.stats.Urgent++
			s.send(w)
		}
	case evBeatArrives:
		s.arrive(e.hb)
	case evWake:
		s.wake(e.hb, e.term)
	case evAnswerArrives:
		w := s.workers[e.hb.w]
		if w.paused {
			w.pendingAns = append(w.pendingAns, e.hb)
			return
		}
		s.accept(w, e.hb)
	case evLeaseEnds:
		w := s.workers[e.w]
		if len(w.open) > 0 && !w.paused && s.now >= w.leaseEnd {
			s.stats.LeaseEnds++
		}
		s.update(w)
	case evPause:
		w := s.workers[e.w]
		if w.paused || w.gone {
			return
		}
		w.paused = true
		s.stats.Pauses++
		s.logf("%s paused", w.id)
		s.update(w)
	case evResume:
		w := s.workers[e.w]
		if !w.paused {
			return
		}
		w.paused = false
		s.logf("%s resumed", w.id)
		// Answers that came during the pause, and the timer abandoning the
		// heartbeat they answer, race: either may win.
		for _, a := range w.pendingAns {
			if s.rng.IntN(2) == 0 {
				s.accept(w, a)
			}
		}
		w.pendingAns = nil
		s.update(w)
		s.push(&modelEvent{at: s.now, kind: evSend, w: e.w})
	case evLeave:
		w := s.workers[e.w]
		if w.leaving || w.gone {
			return
		}
		w.leaving, w.leaveNow = true, s.rng.IntN(2) == 0
		w.keep = map[string]bool{}
		for t := range w.open {
			w.keep[t] = true
		}
		s.logf("%s starts leaving (leave_now: %v), running %v", w.id, w.leaveNow, s.running(w))
		// A worker that begins to leave says so at once.
		s.push(&modelEvent{at: s.now, kind: evUrgent, w: e.w})
	case evMove:
		p := s.primary
		if p == nil || !p.serving {
			return
		}
		if p.term > 1 && s.now-p.start < s.p.T*(1+modelDrift) {
			return // settling: a new primary moves nothing
		}
		t := s.tasks[e.task]
		to := ""
		switch {
		case e.to == handover:
			if _, live := p.sessions[s.assign[t]]; live && !p.leaving[s.assign[t]] {
				return // moved already
			}
			var ok []string
			for _, w := range s.workers {
				if _, live := p.sessions[w.id]; live && !p.leaving[w.id] && w.id != s.assign[t] {
					ok = append(ok, w.id)
				}
			}
			if len(ok) > 0 {
				to = ok[s.rng.IntN(len(ok))]
			}
		case e.to >= 0:
			to = s.workers[e.to].id
			if p.leaving[to] {
				return // planned as drained: no new active
			}
		}
		s.assign[t] = to
		s.logf("term %d moves %s to %q", p.term, t, to)
	case evFailover:
		if s.primary != nil {
			s.primary.serving = false
			s.logf("term %d ends", s.primary.term)
		}
		gap := s.rng.Float64() * 2 * s.p.T
		s.push(&modelEvent{at: s.now + gap, kind: evTermStart})
	case evTermStart:
		s.startTerm()
	}
}

// send sends worker w's next heartbeat, abandoning the outstanding one. A
// leaving worker that runs nothing and leaves without waiting says
// leave_now, and is gone.
func (s *modelSim) send(w *modelWorker) {
	w.seq++
	b := &modelBeat{w: w.idx, seq: w.seq, sentReal: s.now, sentLoc: w.clock.at(s.now), running: s.running(w), leaving: w.leaving}
	b.leaveNow = w.leaving && w.leaveNow && len(b.running) == 0
	w.outstanding = b
	if d, ok := s.delay(); ok {
		s.push(&modelEvent{at: s.now + d, kind: evBeatArrives, hb: b})
	}
	if b.leaveNow {
		w.gone = true
		s.logf("%s sends leave_now and is gone", w.id)
	}
}

// expire ends the primary's sessions silent for the session timeout and
// forgets the holds of those whose lease has surely run out, as its loop
// does every tick.
func (s *modelSim) expire(p *modelPrimary, local float64) {
	for wid, heard := range p.sessions {
		if local-heard >= s.p.T {
			delete(p.sessions, wid)
			delete(p.leaving, wid)
			p.book.expire(wid)
		}
	}
	p.book.prune(s.toTime(local))
}

// activesOf lists the tasks assigned to worker id as active.
func (s *modelSim) activesOf(id string) []string {
	var actives []string
	for _, t := range s.tasks {
		if s.assign[t] == id {
			actives = append(actives, t)
		}
	}
	return actives
}

// arrive processes heartbeat b at the primary.
func (s *modelSim) arrive(b *modelBeat) {
	p := s.primary
	if p == nil || !p.serving {
		return
	}
	if b.leaveNow && len(b.running) > 0 {
		return // invalid: refused, nothing recorded
	}
	id := s.workers[b.w].id
	if !s.p.Reorder && b.seq <= p.processed[id] {
		return
	}
	p.processed[id] = max(p.processed[id], b.seq)
	local := p.clock.at(s.now)
	s.expire(p, local)
	if _, ok := p.sessions[id]; !ok {
		// Unknown: FAILED_PRECONDITION; the worker registers, which ends
		// leaving until it says so again.
		p.sessions[id] = local
		delete(p.leaving, id)
		p.book.heard(id, s.toTime(local))
		return
	}
	p.sessions[id] = local
	p.leaving[id] = p.leaving[id] || b.leaving
	actives := s.activesOf(id)
	ran := len(b.running) > 0 && !s.p.LeaveRunning
	if b.leaving && (b.leaveNow || !ran && len(actives) == 0) {
		if p.book.leave(id, s.toTime(local)) {
			s.stats.LeaveReleases++
		}
		delete(p.sessions, id)
		delete(p.leaving, id)
		if b.leaveNow {
			s.stats.LeftNow++
		} else {
			s.stats.LeftGraceful++
		}
		s.logf("term %d: %s leaves (leave_now: %v), running %v", p.term, id, b.leaveNow, b.running)
		s.handOver(actives)
		s.answer(&modelBeat{w: b.w, seq: b.seq, sentReal: b.sentReal, sentLoc: b.sentLoc, term: p.term, left: true})
		return
	}
	if b.leaving {
		s.handOver(actives)
	}
	d, _ := p.book.report(id, s.toTime(local), b.running, actives)
	for _, why := range d.Waiting {
		s.stats.Waits[why]++
	}
	if s.rng.Float64() < s.p.HoldProb {
		s.stats.Holds++
		s.logf("term %d: %s reports %v, held (assigned %v)", p.term, id, b.running, actives)
		s.push(&modelEvent{at: s.now + s.rng.Float64()*s.p.H, kind: evWake, hb: b, term: p.term})
		return
	}
	s.logf("term %d: %s reports %v (assigned %v)", p.term, id, b.running, actives)
	s.grantAnswer(p, b, actives, d)
}

// handOver moves the actives of a worker that leaves or left to other
// workers, as the plan its heartbeat asks for does, soon.
func (s *modelSim) handOver(actives []string) {
	for _, t := range actives {
		s.push(&modelEvent{at: s.now + s.rng.Float64()*s.p.H/2, kind: evMove, task: slices.Index(s.tasks, t), to: handover})
	}
}

// wake answers the heartbeat b that term held, if it still may.
func (s *modelSim) wake(b *modelBeat, term int) {
	p := s.primary
	if p == nil || !p.serving || p.term != term {
		return
	}
	id := s.workers[b.w].id
	local := p.clock.at(s.now)
	s.expire(p, local)
	if _, ok := p.sessions[id]; !ok || p.processed[id] != b.seq {
		s.logf("term %d: %s's held heartbeat %d ends unanswered", p.term, id, b.seq)
		return
	}
	actives := s.activesOf(id)
	d, _ := p.book.decide(id, s.toTime(local), actives)
	s.stats.HeldAnswers++
	s.logf("term %d: %s's held heartbeat %d wakes (assigned %v)", p.term, id, b.seq, actives)
	s.grantAnswer(p, b, actives, d)
}

// grantAnswer answers heartbeat b with the actives of d it grants.
func (s *modelSim) grantAnswer(p *modelPrimary, b *modelBeat, actives []string, d GrantDecision) {
	ans := &modelBeat{w: b.w, seq: b.seq, sentReal: b.sentReal, sentLoc: b.sentLoc, term: p.term}
	for _, t := range actives {
		if d.Granted[t] {
			ans.granted = append(ans.granted, t)
		}
	}
	s.logf("term %d: %s answered %v", p.term, s.workers[b.w].id, ans.granted)
	s.answer(ans)
}

// answer sends an answer, which may be delayed or lost.
func (s *modelSim) answer(a *modelBeat) {
	if dl, ok := s.delay(); ok {
		s.push(&modelEvent{at: s.now + dl, kind: evAnswerArrives, hb: a})
	}
}

// accept takes an answer if the worker still waits for it.
func (s *modelSim) accept(w *modelWorker, a *modelBeat) {
	if w.gone || w.outstanding == nil || w.outstanding.seq != a.seq {
		return
	}
	w.outstanding = nil
	w.actives = map[string]bool{}
	if a.left {
		w.gone = true
		s.logf("%s takes answer %d of term %d: left", w.id, a.seq, a.term)
		s.update(w)
		return
	}
	w.acked, w.leaseFrom = true, a.sentLoc
	w.leaseEnd = w.clock.realAt(w.leaseFrom + s.lease)
	for _, t := range a.granted {
		w.actives[t] = true
	}
	s.logf("%s takes answer %d of term %d: %v", w.id, a.seq, a.term, a.granted)
	s.update(w)
	if w.leaseEnd >= s.now {
		s.push(&modelEvent{at: w.leaseEnd, kind: evLeaseEnds, w: w.idx})
	}
}

// runModel runs one schedule and returns the first overlap it finds ("" if
// none), with the trace when tracing.
func runModel(seed uint64, p modelParams, tracing bool, stats *modelStats) (string, []string) {
	if stats == nil {
		stats = &modelStats{Waits: map[string]int{}}
	}
	stats.Schedules++
	s := &modelSim{p: p, stats: stats, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), assign: map[string]string{},
		intervals: map[string][]modelInterval{}, tracing: tracing}
	s.lease = p.T - p.M
	for i := range p.Tasks {
		s.tasks = append(s.tasks, fmt.Sprintf("t%d", i))
	}
	for i := range p.Workers {
		w := &modelWorker{id: fmt.Sprintf("w%d", i), idx: i, clock: s.clock(), actives: map[string]bool{},
			open: map[string]float64{}, lastEnd: map[string]float64{}}
		s.workers = append(s.workers, w)
		s.push(&modelEvent{at: s.rng.Float64() * p.H, kind: evSend, w: i})
		if s.rng.Float64() < p.LeaveProb {
			s.push(&modelEvent{at: s.rng.Float64() * p.Duration, kind: evLeave, w: i})
		}
		for at := s.rng.Float64() * p.Duration; at < p.Duration; at += s.rng.Float64() * p.Duration {
			s.push(&modelEvent{at: at, kind: evPause, w: i})
			s.push(&modelEvent{at: at + s.rng.Float64()*3*p.T, kind: evResume, w: i})
		}
	}
	for at := s.rng.Float64() * p.T; at < p.Duration; at += s.rng.Float64() * 2 * p.T {
		to := s.rng.IntN(p.Workers+1) - 1
		s.push(&modelEvent{at: at, kind: evMove, task: s.rng.IntN(p.Tasks), to: to})
	}
	for at := p.T + s.rng.Float64()*p.Duration; at < p.Duration; at += p.T + s.rng.Float64()*p.Duration {
		s.push(&modelEvent{at: at, kind: evFailover})
	}
	s.startTerm()
	for s.q.Len() > 0 {
		e := heap.Pop(&s.q).(*modelEvent)
		if e.at > p.Duration {
			break
		}
		s.now = e.at
		s.step(e)
	}
	for _, w := range s.workers {
		for t, start := range w.open {
			s.intervals[t] = append(s.intervals[t], modelInterval{w.id, start, s.now + p.J})
		}
	}
	for _, t := range s.tasks {
		iv := s.intervals[t]
		sort.Slice(iv, func(i, j int) bool { return iv[i].start < iv[j].start })
		for i := range iv {
			for j := i + 1; j < len(iv) && iv[j].start < iv[i].end; j++ {
				if iv[j].w != iv[i].w {
					return fmt.Sprintf("%s: %s may run it in [%.1f, %.1f) and %s in [%.1f, %.1f)",
						t, iv[i].w, iv[i].start, iv[i].end, iv[j].w, iv[j].start, iv[j].end), s.trace
				}
			}
		}
	}
	return "", s.trace
}

// modelParamsFor draws a schedule's parameters from its seed: the session
// timeout, heartbeat interval, margin, action-to-effect bound J (up to the
// margin) and the network.
func modelParamsFor(seed uint64) modelParams {
	r := rand.New(rand.NewPCG(seed, 1))
	T := 1000 + r.Float64()*9000
	M := T/10 + r.Float64()*T/5
	H := T/10 + r.Float64()*(T-M)/2
	return modelParams{
		T: T, M: M, H: math.Min(H, (T-M)/2), J: r.Float64() * M,
		Dmax: r.Float64() * T / 2, Loss: r.Float64() * 0.3,
		Workers: 2 + r.IntN(3), Tasks: 1 + r.IntN(2), Duration: 20 * T,
		HoldProb: r.Float64() * 0.6, LeaveProb: r.Float64() * 0.6,
	}
}

// TestTimingModel: no two workers ever may run one task at overlapping
// times, over thousands of random schedules. A failing seed is printed
// with its trace; rerun it alone with -model.seed.
func TestTimingModel(t *testing.T) {
	seeds := make([]uint64, 0, *modelRuns)
	if *modelSeed != 0 {
		seeds = append(seeds, *modelSeed)
	} else {
		for i := range *modelRuns {
			seeds = append(seeds, uint64(i+1))
		}
	}
	stats := &modelStats{Waits: map[string]int{}}
	for _, seed := range seeds {
		p := modelParamsFor(seed)
		if bad, _ := runModel(seed, p, false, stats); bad != "" {
			_, trace := runModel(seed, p, true, nil)
			if len(trace) > 200 {
				trace = trace[len(trace)-200:]
			}
			t.Fatalf("seed %d (%+v): %s\nrerun: go test ./placement -run TestTimingModel -model.seed %d\n%s",
				seed, p, bad, seed, joinLines(trace))
		}
	}
	t.Logf("%+v", *stats)
	if *modelSeed == 0 && (stats.Handovers == 0 || stats.LeaseEnds == 0 || stats.Waits[WaitHolder] == 0 || stats.Waits[WaitTerm] == 0 ||
		stats.Holds == 0 || stats.HeldAnswers == 0 || stats.Urgent == 0 ||
		stats.LeftNow == 0 || stats.LeftGraceful == 0 || stats.LeaveReleases == 0) {
		t.Fatalf("the schedules missed a path: %+v", *stats)
	}
}

// The model finds overlaps when a rule it checks is broken, so its silence
// above means something: a worker that ignores its lease, effects that lag
// their check by more than twice the margin, heartbeats processed out of
// order, and a primary that ends a leaving worker's session while it still
// reports actives running each give overlaps in some schedules.
func TestTimingModelCatchesBrokenRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *modelParams)
	}{
		{"worker ignores its lease", func(p *modelParams) { p.IgnoreLease = true }},
		{"effects lag beyond the margins", func(p *modelParams) { p.J = 3 * p.M }},
		{"heartbeats out of order", func(p *modelParams) { p.Reorder = true }},
		{"a leaving worker's session ended while it runs actives", func(p *modelParams) { p.LeaveRunning = true }},
	} {
		found := false
		for seed := uint64(1); seed <= 3000 && !found; seed++ {
			p := modelParamsFor(seed)
			tc.edit(&p)
			bad, _ := runModel(seed, p, false, nil)
			found = bad != ""
		}
		if !found {
			t.Errorf("%s: no overlap in 3000 schedules", tc.name)
		}
	}
}

func joinLines(l []string) string {
	out := ""
	for _, s := range l {
		out += s + "\n"
	}
	return out
}
