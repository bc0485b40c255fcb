package succession

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xce/xce/internal/testutil/script"
)

// TestScripts runs the succession scenarios in testdata/*.txt with the shared
// script runner (internal/testutil/script). Each command has one handler in
// scriptCommands. Run with -rewrite to regenerate the expected output, then
// read the diff.
func TestScripts(t *testing.T) {
	script.RunDir(t, filepath.Join("testdata", "*.txt"), func(t *testing.T) script.Handler {
		sc := &succScript{tp: newTopic("controller"), cfg: cfg}
		return func(cmd string, a script.Args) (string, error) {
			h, ok := scriptCommands[cmd]
			if !ok {
				return "", fmt.Errorf("unknown command %q", cmd)
			}
			return h(sc, a)
		}
	})
}

// succScript is the state a script builds up: the topic and the configuration.
type succScript struct {
	tp  *topic
	cfg LeaseConfig
}

// scriptMember is the command's one member.
func scriptMember(a script.Args) (MemberID, error) {
	m, err := a.Word("member")
	return MemberID(m), err
}

// appendAt appends a record at=… (default 0), at offset=… when given
// (to deliver records out of order), else at the next offset.
func (sc *succScript) appendAt(a script.Args, key, value []byte) (string, error) {
	at, err := a.Int("at", 0)
	if err != nil {
		return "", err
	}
	off, err := a.Int("offset", sc.tp.next)
	if err != nil {
		return "", err
	}
	sc.tp.recs = append(sc.tp.recs, Record{Key: key, Value: value, Offset: off, TimestampMillis: at})
	sc.tp.next = max(sc.tp.next, off+1)
	return fmt.Sprintf("offset=%d", off), nil
}

var scriptCommands = map[string]func(*succScript, script.Args) (string, error){
	// config lease=… renew=… stagger=…: set the lease configuration (fields
	// not given keep their value).
	"config": func(sc *succScript, a script.Args) (string, error) { return configCommand(&sc.cfg, a) },
	// register <member> at=… [offset=…]: register, or register again.
	"register": func(sc *succScript, a script.Args) (string, error) {
		m, err := scriptMember(a)
		if err != nil {
			return "", err
		}
		k, v := RegistrationRecord(sc.tp.role, m)
		return sc.appendAt(a, k, v)
	},
	// deregister <member> at=…: a tombstone on the member's registration.
	"deregister": func(sc *succScript, a script.Args) (string, error) {
		m, err := scriptMember(a)
		if err != nil {
			return "", err
		}
		return sc.appendAt(a, DeregistrationKey(sc.tp.role, m), nil)
	},
	// grant <member> at=…: write a lease for LeaseMillis from at (a takeover,
	// a reclaim or a renewal).
	"grant": func(sc *succScript, a script.Args) (string, error) {
		m, err := scriptMember(a)
		if err != nil {
			return "", err
		}
		at, err := a.Int("at", 0)
		if err != nil {
			return "", err
		}
		l := sc.cfg.Grant(m, at)
		k, v := LeaseRecord(sc.tp.role, l)
		out, err := sc.appendAt(a, k, v)
		return fmt.Sprintf("%s lease %s until %d", out, l.Holder, l.DeadlineMillis), err
	},
	// lease <member> deadline=… at=…: write a lease with an explicit deadline.
	"lease": func(sc *succScript, a script.Args) (string, error) {
		m, err := scriptMember(a)
		if err != nil {
			return "", err
		}
		d, err := a.Int("deadline", 0)
		if err != nil {
			return "", err
		}
		k, v := LeaseRecord(sc.tp.role, Lease{Holder: m, DeadlineMillis: d})
		return sc.appendAt(a, k, v)
	},
	// release at=…: a tombstone on the lease.
	"release": func(sc *succScript, a script.Args) (string, error) {
		return sc.appendAt(a, LeaseKey(sc.tp.role), nil)
	},
	// raw key=… [value=…] at=… [offset=…]: any record; no value is a tombstone.
	"raw": func(sc *succScript, a script.Args) (string, error) {
		var value []byte
		if v, ok := a.KV["value"]; ok {
			value = []byte(v)
		}
		return sc.appendAt(a, []byte(a.KV["key"]), value)
	},
	// state: the folded roster and lease, and every member's rank.
	"state": func(sc *succScript, a script.Args) (string, error) {
		s := sc.tp.state()
		var ranks []string
		for _, r := range s.Roster {
			n, _ := s.RankOf(r.Member)
			ranks = append(ranks, fmt.Sprintf("%s=%d", r.Member, n))
		}
		return formatState(s) + "\nranks: " + strings.Join(ranks, " "), nil
	},
	// eval now=… [member…]: what each member (default: every registered
	// member) should do at now.
	"eval": func(sc *succScript, a script.Args) (string, error) {
		now, err := a.Int("now", 0)
		if err != nil {
			return "", err
		}
		s := sc.tp.state()
		members := a.Words
		if len(members) == 0 {
			for _, r := range s.Roster {
				members = append(members, string(r.Member))
			}
		}
		var out []string
		for _, m := range members {
			out = append(out, fmt.Sprintf("%s: %v", m, Evaluate(s, MemberID(m), now, sc.cfg)))
		}
		return strings.Join(out, "\n"), nil
	},
}

// configCommand runs "config lease=… renew=… stagger=…": it sets the lease
// configuration in *cfg (fields not given keep their value) if it is valid.
func configCommand(cfg *LeaseConfig, a script.Args) (string, error) {
	c := *cfg
	var err error
	for key, f := range map[string]*int64{"lease": &c.LeaseMillis, "renew": &c.RenewMillis, "stagger": &c.StaggerMillis} {
		if *f, err = a.Int(key, *f); err != nil {
			return "", err
		}
	}
	if err := c.Validate(); err != nil {
		return "", err
	}
	*cfg = c
	return fmt.Sprintf("lease=%d renew=%d stagger=%d", c.LeaseMillis, c.RenewMillis, c.StaggerMillis), nil
}
