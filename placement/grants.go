package placement

import (
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
