// Package script runs scenario scripts in testdata, in the style of
// cockroachdb/datadriven: the pure decisions of xce (succession, the Kafka
// coordinator, the exit watch) are tested by text files that read as
// timelines. It is imported by tests only.
//
// A script is a sequence of blocks:
//
//	# comment
//	command word key=value key="quoted value"
//	----
//	expected output, up to a blank line
//
// Run the tests with -rewrite to regenerate the expected output, then read
// the diff.
package script

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of testdata scripts")

// Handler runs one command of a script and returns its output. An error is
// shown as the output "error: …", so a script can expect one.
type Handler func(cmd string, a Args) (string, error)

// RunDir runs every file matching pattern (e.g. "testdata/*.txt") as a
// subtest. newHandler is called once per file, so each script starts from
// fresh state.
func RunDir(t *testing.T, pattern string, newHandler func(t *testing.T) Handler) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts match %s: %v", pattern, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		t.Run(name, func(t *testing.T) { Run(t, file, newHandler(t)) })
	}
}

type block struct {
	line    int      // of the command
	pre     []string // comments and blank lines before the command
	command string
	want    string
	got     string
}

// Run runs one script file with h.
func Run(t *testing.T, file string, h Handler) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks, trailer, err := parse(file, string(data))
	if err != nil {
		t.Fatal(err)
	}
	for i := range blocks {
		b := &blocks[i]
		name, args, err := ParseCommand(b.command)
		if err == nil {
			b.got, err = h(name, args)
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

func parse(file, data string) (blocks []block, trailer []string, err error) {
	lines := strings.Split(strings.TrimRight(data, "\n"), "\n")
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
			return nil, nil, fmt.Errorf("%s:%d: command not followed by ----", file, i+1)
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
	return blocks, pre, nil
}

// Args are a command's arguments: positional words and key=value pairs,
// whose values may be Go-quoted strings.
type Args struct {
	Words []string
	KV    map[string]string
}

// ParseCommand splits a command line into its name and arguments.
func ParseCommand(line string) (string, Args, error) {
	a := Args{KV: map[string]string{}}
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
	if len(toks) == 0 {
		return "", a, fmt.Errorf("empty command")
	}
	for _, tok := range toks[1:] {
		if strings.HasPrefix(tok, `"`) {
			w, err := strconv.Unquote(tok)
			if err != nil {
				return "", a, err
			}
			a.Words = append(a.Words, w)
			continue
		}
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			a.Words = append(a.Words, tok)
			continue
		}
		if strings.HasPrefix(v, `"`) {
			var err error
			if v, err = strconv.Unquote(v); err != nil {
				return "", a, err
			}
		}
		a.KV[k] = v
	}
	return toks[0], a, nil
}

// Int returns the integer value of key, or def when it is not given.
func (a Args) Int(key string, def int64) (int64, error) {
	v, ok := a.KV[key]
	if !ok {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %v", key, err)
	}
	return n, nil
}

// Word returns the only positional word, or an error naming what it is.
func (a Args) Word(what string) (string, error) {
	if len(a.Words) != 1 {
		return "", fmt.Errorf("want one %s, got %q", what, a.Words)
	}
	return a.Words[0], nil
}
