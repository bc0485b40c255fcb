package succession

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata/*.txt scripts")

// TestScripts runs the succession scenarios in testdata/*.txt. A script is a
// sequence of blocks, in the style of cockroachdb/datadriven:
//
//	# comment
//	command arg key=value
//	----
//	expected output, up to a blank line
//
// Each command has one handler in scriptCommands. Run with -rewrite to
// regenerate the expected output, then read the diff.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) { runScript(t, file) })
	}
}

type block struct {
	line    int      // of the command
	pre     []string // comments and blank lines before the command
	command string
	want    string
	got     string
}

func parseScript(t *testing.T, file string) (blocks []block, trailer []string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{line: i + 1, pre: pre, command: l}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command not followed by ----", file, i+1)
		}
		i += 2
		var out []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			out = append(out, lines[i])
		}
		i-- // the blank line that ends the output belongs to what follows
		b.want = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks, pre
}

func runScript(t *testing.T, file string) {
	blocks, trailer := parseScript(t, file)
	sc := &script{tp: newTopic("controller"), cfg: cfg}
	for i := range blocks {
		b := &blocks[i]
		name, args, err := parseCommand(b.command)
		if err == nil {
			handler, ok := scriptCommands[name]
			if !ok {
				t.Fatalf("%s:%d: unknown command %q", file, b.line, name)
			}
			b.got, err = handler(sc, args)
		}
		if err != nil {
			b.got = "error: " + err.Error()
		}
		b.got = strings.TrimRight(b.got, "\n")
		if !*rewrite && b.got != b.want {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.line, b.command, b.got, b.want)
		}
	}
	if *rewrite {
		var out strings.Builder
		for _, b := range blocks {
			for _, l := range b.pre {
				out.WriteString(l + "\n")
			}
			out.WriteString(b.command + "\n----\n")
			if b.got != "" {
				out.WriteString(b.got + "\n")
			}
		}
		for _, l := range trailer {
			out.WriteString(l + "\n")
		}
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// script is the state a script builds up: the topic and the configuration.
type script struct {
	tp  *topic
	cfg LeaseConfig
}

// args are a command's arguments: positional words and key=value pairs, whose
// values may be Go-quoted strings.
type args struct {
	words []string
	kv    map[string]string
}

func parseCommand(line string) (string, args, error) {
	a := args{kv: map[string]string{}}
	var toks []string
	for rest := strings.TrimSpace(line); rest != ""; rest = strings.TrimSpace(rest) {
		end := strings.IndexByte(rest, ' ')
		if rest[0] == '"' {
			// "quoted word"
			unq, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return "", a, fmt.Errorf("bad quoted word in %q", rest)
			}
			end = len(unq)
		} else if q := strings.Index(rest, `="`); q >= 0 && (end < 0 || q < end) {
			// key="quoted value": find the closing quote.
			unq, err := strconv.QuotedPrefix(rest[q+1:])
			if err != nil {
				return "", a, fmt.Errorf("bad quoted value in %q", rest)
			}
			end = q + 1 + len(unq)
		}
		if end < 0 {
			end = len(rest)
		}
		toks = append(toks, rest[:end])
		rest = rest[end:]
	}
	for _, tok := range toks[1:] {
		if strings.HasPrefix(tok, `"`) {
			w, err := strconv.Unquote(tok)
			if err != nil {
				return "", a, err
			}
			a.words = append(a.words, w)
			continue
		}
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			a.words = append(a.words, tok)
			continue
		}
		if strings.HasPrefix(v, `"`) {
			var err error
			if v, err = strconv.Unquote(v); err != nil {
				return "", a, err
			}
		}
		a.kv[k] = v
	}
	return toks[0], a, nil
}

func (a args) int(key string, def int64) (int64, error) {
	v, ok := a.kv[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", key, err)
	}
	return n, nil
}

func (a args) member() (MemberID, error) {
	if len(a.words) != 1 {
		return "", fmt.Errorf("want one member, got %q", a.words)
	}
	return MemberID(a.words[0]), nil
}

// appendAt appends a record at=… (default 0), at offset=… when given
// (to deliver records out of order), else at the next offset.
func (sc *script) appendAt(a args, key, value []byte) (string, error) {
	at, err := a.int("at", 0)
	if err != nil {
		return "", err
	}
	off, err := a.int("offset", sc.tp.next)
	if err != nil {
		return "", err
	}
	sc.tp.recs = append(sc.tp.recs, Record{Key: key, Value: value, Offset: off, TimestampMillis: at})
	sc.tp.next = max(sc.tp.next, off+1)
	return fmt.Sprintf("offset=%d", off), nil
}

var scriptCommands = map[string]func(*script, args) (string, error){
	// config lease=… renew=… stagger=…: set the lease configuration (fields
	// not given keep their value).
	"config": func(sc *script, a args) (string, error) {
		c := sc.cfg
		var err error
		for key, f := range map[string]*int64{"lease": &c.LeaseMillis, "renew": &c.RenewMillis, "stagger": &c.StaggerMillis} {
			if *f, err = a.int(key, *f); err != nil {
				return "", err
			}
		}
		if err := c.Validate(); err != nil {
			return "", err
		}
		sc.cfg = c
		return fmt.Sprintf("lease=%d renew=%d stagger=%d", c.LeaseMillis, c.RenewMillis, c.StaggerMillis), nil
	},
	// register <member> at=… [offset=…]: register, or register again.
	"register": func(sc *script, a args) (string, error) {
		m, err := a.member()
		if err != nil {
			return "", err
		}
		k, v := RegistrationRecord(sc.tp.role, m)
		return sc.appendAt(a, k, v)
	},
	// deregister <member> at=…: a tombstone on the member's registration.
	"deregister": func(sc *script, a args) (string, error) {
		m, err := a.member()
		if err != nil {
			return "", err
		}
		return sc.appendAt(a, DeregistrationKey(sc.tp.role, m), nil)
	},
	// grant <member> at=…: write a lease for LeaseMillis from at (a takeover,
	// a reclaim or a renewal).
	"grant": func(sc *script, a args) (string, error) {
		m, err := a.member()
		if err != nil {
			return "", err
		}
		at, err := a.int("at", 0)
		if err != nil {
			return "", err
		}
		l := sc.cfg.Grant(m, at)
		k, v := LeaseRecord(sc.tp.role, l)
		out, err := sc.appendAt(a, k, v)
		return fmt.Sprintf("%s lease %s until %d", out, l.Holder, l.DeadlineMillis), err
	},
	// lease <member> deadline=… at=…: write a lease with an explicit deadline.
	"lease": func(sc *script, a args) (string, error) {
		m, err := a.member()
		if err != nil {
			return "", err
		}
		d, err := a.int("deadline", 0)
		if err != nil {
			return "", err
		}
		k, v := LeaseRecord(sc.tp.role, Lease{Holder: m, DeadlineMillis: d})
		return sc.appendAt(a, k, v)
	},
	// release at=…: a tombstone on the lease.
	"release": func(sc *script, a args) (string, error) {
		return sc.appendAt(a, LeaseKey(sc.tp.role), nil)
	},
	// raw key=… [value=…] at=… [offset=…]: any record; no value is a tombstone.
	"raw": func(sc *script, a args) (string, error) {
		var value []byte
		if v, ok := a.kv["value"]; ok {
			value = []byte(v)
		}
		return sc.appendAt(a, []byte(a.kv["key"]), value)
	},
	// state: the folded roster and lease, and every member's rank.
	"state": func(sc *script, a args) (string, error) {
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
	"eval": func(sc *script, a args) (string, error) {
		now, err := a.int("now", 0)
		if err != nil {
			return "", err
		}
		s := sc.tp.state()
		members := a.words
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
