package succession

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xce/xce/internal/testutil/script"
)

// TestCoordinatorScripts runs the coordinator scenarios in
// testdata/coordinator: one member's Coordinator, stepped by the events its
// transport would see, with the coordination topic and the member's tenure
// simulated in memory. Times are milliseconds; nothing sleeps.
func TestCoordinatorScripts(t *testing.T) {
	script.RunDir(t, filepath.Join("testdata", "coordinator", "*.txt"), func(t *testing.T) script.Handler {
		cs := &coordScript{tp: newTopic("controller"), cfg: cfg}
		return cs.run
	})
}

// coordScript is a script's world: the topic, the records the member has
// not read yet, its coordinator and its tenure.
type coordScript struct {
	tp       *topic
	unread   []CoordRecord
	cfg      LeaseConfig
	c        *Coordinator
	tenure   Tenure
	won      Tenure
	handover int64
}

func (cs *coordScript) add(a script.Args, key, value []byte, challenge bool, yieldOf MemberID, upTo int64) (string, error) {
	at, err := a.Int("at", 0)
	if err != nil {
		return "", err
	}
	off := cs.tp.append(key, value, at)
	cs.unread = append(cs.unread, CoordRecord{Record: cs.tp.recs[len(cs.tp.recs)-1], Challenge: challenge, YieldOf: yieldOf, YieldUpTo: upTo})
	return fmt.Sprintf("offset=%d", off), nil
}

// step steps the coordinator and plays the tenure's part of the effects.
func (cs *coordScript) step(ev Event, a script.Args) (string, error) {
	if cs.c == nil {
		return "", errors.New("no member: start one")
	}
	now, err := a.Int("now", 0)
	if err != nil {
		return "", err
	}
	ev.Tenure, ev.HandoverUntilMillis = cs.tenure, cs.handover
	effs := cs.c.Step(ev, now)
	out := make([]string, len(effs))
	for i, e := range effs {
		out[i] = e.String()
		switch e.Kind {
		case DoTake:
			cs.tenure = cs.won
		case DoStepDown:
			cs.tenure = Tenure{}
		}
	}
	return strings.Join(out, "\n"), nil
}

func (cs *coordScript) run(cmd string, a script.Args) (string, error) {
	switch cmd {
	// config lease=… renew=… stagger=…
	case "config":
		return configCommand(&cs.cfg, a)

	// Records appended to the topic by anyone; the member reads them with
	// "read". register/deregister/probe <m> at=…; grant <m> at=… [challenge]
	// (a lease for LeaseMillis from at); lease <m> deadline=… at=…
	// [challenge]; yield <m> up-to=… at=….
	case "register":
		m, err := a.Word("member")
		if err != nil {
			return "", err
		}
		k, v := RegistrationRecord(cs.tp.role, MemberID(m))
		return cs.add(a, k, v, false, "", 0)
	case "deregister":
		m, err := a.Word("member")
		if err != nil {
			return "", err
		}
		return cs.add(a, DeregistrationKey(cs.tp.role, MemberID(m)), nil, false, "", 0)
	case "probe":
		m, err := a.Word("member")
		if err != nil {
			return "", err
		}
		return cs.add(a, []byte("probe/"+cs.tp.role+"/"+m), []byte("1"), false, "", 0)
	case "grant", "lease":
		if len(a.Words) == 0 {
			return "", errors.New("want a member")
		}
		m := MemberID(a.Words[0])
		challenge := len(a.Words) > 1 && a.Words[1] == "challenge"
		at, err := a.Int("at", 0)
		if err != nil {
			return "", err
		}
		l := cs.cfg.Grant(m, at)
		if cmd == "lease" {
			if l.DeadlineMillis, err = a.Int("deadline", 0); err != nil {
				return "", err
			}
		}
		k, v := LeaseRecord(cs.tp.role, l)
		out, err := cs.add(a, k, v, challenge, "", 0)
		return fmt.Sprintf("%s lease %s until %d", out, l.Holder, l.DeadlineMillis), err
	case "yield":
		m, err := a.Word("member")
		if err != nil {
			return "", err
		}
		upTo, err := a.Int("up-to", 0)
		if err != nil {
			return "", err
		}
		return cs.add(a, []byte("yield/"+cs.tp.role+"/"+m), []byte("y"), false, MemberID(m), upTo)

	// start <member> now=…: the member starts (a fresh Coordinator; a
	// tenure of an earlier run is gone).
	case "start":
		m, err := a.Word("member")
		if err != nil {
			return "", err
		}
		cs.c, cs.tenure, cs.handover = NewCoordinator(cs.tp.role, MemberID(m), cs.cfg), Tenure{}, 0
		return cs.step(Event{Kind: EventStart}, a)

	// Events, each at now=…:
	// read: the member reads every record it has not read yet.
	case "read":
		recs := cs.unread
		cs.unread = nil
		return cs.step(Event{Kind: EventRecords, Records: recs}, a)
	// timer: a timer fires (or the backend asks for an evaluation).
	case "timer":
		return cs.step(Event{Kind: EventTimer}, a)
	// registered offset=…, probed offset=… [err=…]: a write's result.
	case "registered", "probed":
		off, err := a.Int("offset", 0)
		if err != nil {
			return "", err
		}
		ev := Event{Kind: EventRegistered, Offset: off}
		if cmd == "probed" {
			ev.Kind = EventProbed
			if e, ok := a.KV["err"]; ok {
				ev.Err = errors.New(e)
			}
		}
		return cs.step(ev, a)
	// challenged term=… valid=… | err=…: the challenge's result; the
	// tenure it won begins at "take".
	case "challenged":
		ev := Event{Kind: EventChallenged}
		if e, ok := a.KV["err"]; ok {
			ev.Err = errors.New(e)
		} else {
			term, err := a.Int("term", 0)
			if err != nil {
				return "", err
			}
			valid, err := a.Int("valid", 0)
			if err != nil {
				return "", err
			}
			ev.Term, ev.ValidUntilMillis = uint64(term), valid
			cs.won = Tenure{Held: true, Term: uint64(term), ValidUntilMillis: valid}
		}
		return cs.step(ev, a)
	// renewed valid=…: the holder committed a renewal (no step).
	case "renewed":
		v, err := a.Int("valid", 0)
		if err != nil {
			return "", err
		}
		cs.tenure.ValidUntilMillis = v
		return fmt.Sprintf("valid until %d", v), nil
	// handover until=…: the holder starts handing the role over (no step).
	case "handover":
		u, err := a.Int("until", 0)
		if err != nil {
			return "", err
		}
		cs.tenure.Leaving, cs.handover = true, u
		return fmt.Sprintf("leaving; no registration before %d", u), nil
	// lose: the tenure ends outside the coordinator (fenced write, stalled
	// barrier, hand-over committed); no step.
	case "lose":
		cs.tenure = Tenure{}
		return "tenure over", nil
	// left offset=…: the backend reports the tenure that ended.
	case "left":
		off, err := a.Int("offset", 0)
		if err != nil {
			return "", err
		}
		return cs.step(Event{Kind: EventLeft, Offset: off}, a)

	// view: what the backend publishes after a step.
	case "view":
		if cs.c == nil {
			return "", errors.New("no member: start one")
		}
		held := "no"
		if cs.tenure.Held {
			held = fmt.Sprintf("term %d, valid until %d", cs.tenure.Term, cs.tenure.ValidUntilMillis)
		}
		return fmt.Sprintf("%s\nterm-offset: %d folded: %d foreign-until: %d\nholding: %s",
			formatState(cs.c.State()), cs.c.TermOffset(), cs.c.Folded(), cs.c.ForeignUntil(), held), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}
