package placement

import (
	"maps"
	"time"
)

// Grants: at most one active per task (docs/design.md, "At most one
// active"). The committed assignment says which worker should run a task
// as active; a grant says that it may run it now. A task's active moves
// from X to Y in two steps: the assignment names Y, and Y is granted only
// once nothing X was told or reported can still let it run the task.
//
// A worker W "may hold" a task when its last heartbeat listed the task in
// running or the answer to that heartbeat granted it. W's heartbeats are
// processed in the order it sent them, one answer per heartbeat, and W acts
// on an answer only while it still waits for it; so once a heartbeat that
// does not list the task is processed and its answer does not grant it, W
// holds it only if a later answer grants it again. A worker silent for a
// while may still hold what it last held until its lease runs out: it runs
// actives at most active_lease = session_timeout − margin after sending its
// last acknowledged heartbeat, and that heartbeat reached the primary no
// later than the primary last heard from it, so after lastHeard +
// session_timeout + margin it holds nothing.

// GrantInput is everything a grant depends on. Times are the primary's
// monotonic clock.
type GrantInput struct {
	Now time.Time
	// TermStart is when this primary started serving. Before TermStart +
	// SessionTimeout + Margin, a worker this primary never heard of may
	// still run a task an earlier primary granted it.
	TermStart time.Time
	// Fresh: nothing had ever been assigned when the term started, so no
	// earlier primary granted anything.
	Fresh          bool
	SessionTimeout time.Duration
	Margin         time.Duration
	// Actives are the tasks to decide, each with the worker the committed
	// assignment names as its active.
	Actives map[string]string
	// Holders lists, per task, the workers that may hold it.
	Holders map[string][]string
	// Workers are the workers Holders and Actives name: live sessions and
	// the departed ones whose lease may not have run out.
	Workers map[string]GrantWorker
}

// GrantWorker is what the primary knows of one worker for grants, whether
// its session is live or has expired: the rule is the same for both.
type GrantWorker struct {
	// Heard is when the primary last heard from it.
	Heard time.Time
	// Holds are the tasks it may hold: its last running report and the
	// grants of the answer to it.
	Holds map[string]bool
}

// GrantDecision answers a GrantInput.
type GrantDecision struct {
	// Granted are the tasks of Actives their worker may run now.
	Granted map[string]bool
	// Waiting says, for every task not granted, what it waits for.
	Waiting map[string]string
	// Next is the earliest instant at which the passing of time alone can
	// grant a task not granted now (zero: none can; only a heartbeat can).
	Next time.Time
}

// Reasons a grant waits.
const (
	WaitTerm   = "new primary: waiting for the previous workers' leases to run out"
	WaitHolder = "previous worker still holds it"
	WaitNoOne  = "no worker"
)

// grants decides, for every task in in.Actives, whether its assigned
// worker may run it now. A task is granted to its worker A when both hold:
//
//   - the term knows who runs what: the cluster was fresh at the term's
//     start, or the term has lasted SessionTimeout + Margin, or A itself
//     holds the task (it runs it under an earlier primary's grant, so
//     nobody else may);
//   - no other worker may hold it: every other worker that held it has
//     since reported it stopped, or was last heard SessionTimeout + Margin
//     ago or longer.
func grants(in GrantInput) GrantDecision {
	d := GrantDecision{Granted: map[string]bool{}, Waiting: map[string]string{}}
	expiry := in.SessionTimeout + in.Margin
	later := func(t time.Time) {
		if d.Next.IsZero() || t.Before(d.Next) {
			d.Next = t
		}
	}
	known := in.TermStart.Add(expiry)
	for task, a := range in.Actives {
		if a == "" {
			d.Waiting[task] = WaitNoOne
			continue
		}
		self := in.Workers[a].Holds[task]
		if !in.Fresh && !self && in.Now.Before(known) {
			d.Waiting[task] = WaitTerm
			later(known)
			continue
		}
		var until time.Time
		for _, h := range in.Holders[task] {
			w, ok := in.Workers[h]
			if h == a || !ok || !w.Holds[task] {
				continue
			}
			if end := w.Heard.Add(expiry); in.Now.Before(end) && end.After(until) {
				until = end
			}
		}
		if !until.IsZero() {
			d.Waiting[task] = WaitHolder
			later(until)
			continue
		}
		d.Granted[task] = true
	}
	return d
}

// grantBook is a term's record of what each worker may hold, kept from
// its heartbeats and the answers to them; it decides grants with grants.
// It reads no clock and has no lock: the Service calls it under its mutex
// with the time, and the timing model (model_test.go) drives it directly.
type grantBook struct {
	start           time.Time
	fresh           bool
	timeout, margin time.Duration
	workers         map[string]*grantRecord
	// holders indexes the records' holds by task.
	holders map[string]map[string]bool
}

// grantRecord is one worker's: live while it has a session, kept after
// the session ended until its lease has surely run out.
type grantRecord struct {
	live    bool
	heard   time.Time
	running map[string]bool
	granted map[string]bool
}

func (r *grantRecord) holds() map[string]bool {
	h := maps.Clone(r.running)
	if h == nil {
		h = map[string]bool{}
	}
	maps.Copy(h, r.granted)
	return h
}

func newGrantBook(start time.Time, fresh bool, timeout, margin time.Duration) *grantBook {
	return &grantBook{start: start, fresh: fresh, timeout: timeout, margin: margin,
		workers: map[string]*grantRecord{}, holders: map[string]map[string]bool{}}
}

// heard notes a message from worker id (a registration or a heartbeat):
// it has a session. A worker back after its session ended keeps what it
// held until it reports.
func (b *grantBook) heard(id string, now time.Time) {
	r := b.workers[id]
	if r == nil {
		r = &grantRecord{}
		b.workers[id] = r
	}
	r.live = true
	if now.After(r.heard) {
		r.heard = now
	}
}

// report records worker id's heartbeat, sent with the tasks it runs, and
// decides which of actives (the tasks assigned to it as active) it may run;
// the answer's grants count among what it may hold from then on. released
// reports whether a task lost a holder (another worker may be granted it
// now).
func (b *grantBook) report(id string, now time.Time, running, actives []string) (d GrantDecision, released bool) {
	b.heard(id, now)
	r := b.workers[id]
	rep := make(map[string]bool, len(running))
	for _, t := range running {
		rep[t] = true
	}
	before := r.holds()
	r.running = rep
	d, _ = b.decide(id, now, actives)
	return d, b.index(id, before, r.holds())
}

// decide decides, at now, which of actives worker id may run, from what
// its last report said it runs: a heartbeat the primary holds (answering
// once its answer changes) is decided again when it is answered, later
// than it was heard. The grants replace those of the worker's previous
// answer. released is as for report.
func (b *grantBook) decide(id string, now time.Time, actives []string) (d GrantDecision, released bool) {
	r := b.workers[id]
	self := r.holds()
	in := GrantInput{
		Now: now, TermStart: b.start, Fresh: b.fresh, SessionTimeout: b.timeout, Margin: b.margin,
		Actives: make(map[string]string, len(actives)),
		Holders: map[string][]string{},
		Workers: map[string]GrantWorker{id: {Heard: r.heard, Holds: self}},
	}
	for _, t := range actives {
		in.Actives[t] = id
		for h := range b.holders[t] {
			if h == id {
				continue
			}
			in.Holders[t] = append(in.Holders[t], h)
			if _, ok := in.Workers[h]; !ok {
				o := b.workers[h]
				in.Workers[h] = GrantWorker{Heard: o.heard, Holds: o.holds()}
			}
		}
	}
	d = grants(in)
	r.granted = d.Granted
	return d, b.index(id, self, r.holds())
}

// leave records that worker id stopped every active and ends its session
// at once: it holds nothing, so what it held may be granted elsewhere
// without waiting for its lease to run out. Its caller checked that it
// reported nothing running; released is as for report.
func (b *grantBook) leave(id string, now time.Time) (released bool) {
	b.heard(id, now)
	r := b.workers[id]
	before := r.holds()
	r.running, r.granted = nil, nil
	released = b.index(id, before, nil)
	delete(b.workers, id)
	return released
}

// expire notes that worker id's session ended; what it held still counts
// until prune forgets it.
func (b *grantBook) expire(id string) {
	r := b.workers[id]
	if r == nil {
		return
	}
	r.live = false
	if len(r.running) == 0 && len(r.granted) == 0 {
		delete(b.workers, id)
	}
}

// prune forgets the ended sessions whose lease has surely run out, and
// reports whether a task lost a holder.
func (b *grantBook) prune(now time.Time) (released bool) {
	for id, r := range b.workers {
		if !r.live && now.Sub(r.heard) >= b.timeout+b.margin {
			released = b.index(id, r.holds(), nil) || released
			delete(b.workers, id)
		}
	}
	return released
}

// index moves worker id's entries in holders from the tasks it held to
// those it holds now, and reports whether it dropped one.
func (b *grantBook) index(id string, before, after map[string]bool) (dropped bool) {
	for t := range before {
		if !after[t] {
			dropped = true
			delete(b.holders[t], id)
			if len(b.holders[t]) == 0 {
				delete(b.holders, t)
			}
		}
	}
	for t := range after {
		if !before[t] {
			if b.holders[t] == nil {
				b.holders[t] = map[string]bool{}
			}
			b.holders[t][id] = true
		}
	}
	return dropped
}
