package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// lines decodes every JSON line written to buf.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func one(t *testing.T, buf *bytes.Buffer) map[string]any {
	t.Helper()
	ls := lines(t, buf)
	if len(ls) != 1 {
		t.Fatalf("got %d lines, want 1: %q", len(ls), buf.String())
	}
	buf.Reset()
	return ls[0]
}

func newJSON(t *testing.T, level, nodeID string) (zerolog.Logger, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	l, err := New(&buf, level, "json", nodeID)
	if err != nil {
		t.Fatal(err)
	}
	return l, &buf
}

func TestNewJSON(t *testing.T) {
	l, buf := newJSON(t, "info", "n1")
	l.Info().Str("k", "v").Msg("hello")
	m := one(t, buf)
	if m["node_id"] != "n1" || m["level"] != "info" || m["message"] != "hello" || m["k"] != "v" {
		t.Fatalf("line = %v", m)
	}
	ts, err := time.Parse(time.RFC3339Nano, m["time"].(string))
	if err != nil || time.Since(ts) > time.Minute || !strings.Contains(m["time"].(string), ".") {
		t.Fatalf("time = %v (%v)", m["time"], err)
	}
	l.Debug().Msg("hidden")
	if buf.Len() != 0 {
		t.Fatalf("debug line at info level: %s", buf)
	}

	l, buf = newJSON(t, "", "")
	l.Info().Msg("x")
	if m := one(t, buf); m["node_id"] != nil {
		t.Fatalf("empty node_id should be omitted: %v", m)
	}
}

func TestNewLevels(t *testing.T) {
	for level, want := range map[string]zerolog.Level{
		"trace": zerolog.TraceLevel, "debug": zerolog.DebugLevel, "info": zerolog.InfoLevel,
		"warn": zerolog.WarnLevel, "error": zerolog.ErrorLevel, "": zerolog.InfoLevel,
	} {
		l, _ := newJSON(t, level, "n1")
		if l.GetLevel() != want {
			t.Errorf("level %q: got %v, want %v", level, l.GetLevel(), want)
		}
	}
	for _, bad := range []string{"verbose", "INFO", "fatal", "warning"} {
		if _, err := New(os.Stderr, bad, "json", "n1"); err == nil || !strings.Contains(err.Error(), "unknown log level") {
			t.Errorf("level %q: err = %v", bad, err)
		}
	}
	if _, err := New(os.Stderr, "info", "xml", "n1"); err == nil || !strings.Contains(err.Error(), `unknown log format "xml"`) {
		t.Errorf("format xml: err = %v", err)
	}
}

func TestNewFormats(t *testing.T) {
	for _, format := range []string{"auto", ""} { // a buffer is not a terminal: JSON
		var buf bytes.Buffer
		l, err := New(&buf, "info", format, "n1")
		if err != nil {
			t.Fatal(err)
		}
		l.Info().Msg("hi")
		if m := one(t, &buf); m["node_id"] != "n1" {
			t.Errorf("format %q: %v", format, m)
		}
	}
	f, err := os.CreateTemp(t.TempDir(), "log") // a file is not a terminal either
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("temp file reported as terminal")
	}
	var buf bytes.Buffer
	l, err := New(&buf, "info", "console", "n1")
	if err != nil {
		t.Fatal(err)
	}
	l.Warn().Int("n", 3).Msg("console line")
	out := buf.String()
	if strings.HasPrefix(out, "{") || !strings.Contains(out, "WRN") || !strings.Contains(out, "console line") ||
		!strings.Contains(out, "node_id=n1") || !strings.Contains(out, "n=3") || strings.Contains(out, "\x1b[") {
		t.Fatalf("console output %q", out)
	}
}

func TestHCLogFields(t *testing.T) {
	l, buf := newJSON(t, "trace", "n1")
	h := NewHCLog(l, "raft")
	h.Info("entering follower state", "follower", "n1", "leader-address", "127.0.0.1:7202",
		"error", errors.New("boom"), "timeout", 150*time.Millisecond, "n", 3,
		"hex", hclog.Hex(255), "fmt", hclog.Fmt("%d-%s", 7, "x"), 42, "non-string key")
	m := one(t, buf)
	want := map[string]any{
		"node_id": "n1", "component": "raft", "level": "info", "message": "entering follower state",
		"follower": "n1", "leader-address": "127.0.0.1:7202", "error": "boom", "timeout": "150ms",
		"n": float64(3), "hex": "0xff", "fmt": "7-x", "42": "non-string key",
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %#v, want %#v (line %v)", k, m[k], v, m)
		}
	}
	var nilErr *os.PathError
	h.Warn("odd", "a", 1, "dangling")
	if m := one(t, buf); m["a"] != float64(1) || m[hclog.MissingKey] != "dangling" || m["EXTRA_VALUE_AT_END"] != "dangling" {
		t.Errorf("odd args: %v", m)
	}
	h.Error("nil error", "err", error(nilErr))
	if m := one(t, buf); m["level"] != "error" {
		t.Errorf("nil error value: %v", m)
	}
}

func TestHCLogLevels(t *testing.T) {
	l, buf := newJSON(t, "trace", "n1")
	h := NewHCLog(l, "raft")
	for _, tc := range []struct {
		log  func(string, ...any)
		want string
	}{{h.Trace, "trace"}, {h.Debug, "debug"}, {h.Info, "info"}, {h.Warn, "warn"}, {h.Error, "error"}} {
		tc.log("msg")
		if m := one(t, buf); m["level"] != tc.want {
			t.Errorf("got level %v, want %s", m["level"], tc.want)
		}
	}
	for lvl, want := range map[hclog.Level]string{hclog.Trace: "trace", hclog.Debug: "debug", hclog.Info: "info", hclog.Warn: "warn", hclog.Error: "error", hclog.NoLevel: "info"} {
		h.Log(lvl, "msg")
		if m := one(t, buf); m["level"] != want {
			t.Errorf("Log(%v): got level %v, want %s", lvl, m["level"], want)
		}
	}
	h.Log(hclog.Off, "never")
	if buf.Len() != 0 {
		t.Errorf("Off logged: %s", buf)
	}
}

func TestHCLogLevelFiltering(t *testing.T) {
	l, buf := newJSON(t, "info", "n1")
	h := NewHCLog(l, "raft")
	if h.GetLevel() != hclog.Info || h.IsTrace() || h.IsDebug() || !h.IsInfo() || !h.IsWarn() || !h.IsError() {
		t.Fatalf("at info: level %v trace %v debug %v info %v", h.GetLevel(), h.IsTrace(), h.IsDebug(), h.IsInfo())
	}
	h.Debug("hidden")
	h.Trace("hidden")
	if buf.Len() != 0 {
		t.Fatalf("below-level lines written: %s", buf)
	}
	child := h.Named("transport")
	h.SetLevel(hclog.Debug) // affects derived loggers too
	if !child.IsDebug() || child.IsTrace() || child.GetLevel() != hclog.Debug {
		t.Fatalf("SetLevel did not reach child: %v", child.GetLevel())
	}
	child.Debug("shown")
	if m := one(t, buf); m["level"] != "debug" || m["component"] != "raft.transport" {
		t.Fatalf("line %v", m)
	}
	h.SetLevel(hclog.Error)
	h.Warn("hidden")
	if buf.Len() != 0 || h.IsWarn() {
		t.Fatalf("warn at error level: %s", buf)
	}
	w, _ := newJSON(t, "warn", "")
	if got := NewHCLog(w, "").GetLevel(); got != hclog.Warn {
		t.Fatalf("level from warn logger = %v", got)
	}
	if got := NewHCLog(zerolog.Nop(), ""); got.GetLevel() != hclog.Off || got.IsError() {
		t.Fatalf("Nop logger level = %v", got.GetLevel())
	}
}

func TestHCLogWithNamed(t *testing.T) {
	l, buf := newJSON(t, "trace", "n1")
	h := NewHCLog(l, "")
	h.Info("no name")
	if m := one(t, buf); m["component"] != nil {
		t.Fatalf("component without a name: %v", m)
	}
	r := h.Named("raft")
	if r.Name() != "raft" || h.Name() != "" {
		t.Fatalf("names %q %q", r.Name(), h.Name())
	}
	s := r.Named("snapshot").With("peer", "n2", "term", 4)
	s2 := s.With("term", 5, "odd")
	if s.Name() != "raft.snapshot" {
		t.Fatalf("Named: %q", s.Name())
	}
	if got := s2.ImpliedArgs(); len(got) != 6 || got[0] != "peer" || got[3] != 5 || got[4] != hclog.MissingKey || got[5] != "odd" {
		t.Fatalf("ImpliedArgs = %v", got)
	}
	if got := s.ImpliedArgs(); len(got) != 4 || got[3] != 4 {
		t.Fatalf("parent ImpliedArgs changed: %v", got)
	}
	s2.Info("snap", "index", 10)
	m := one(t, buf)
	if m["component"] != "raft.snapshot" || m["peer"] != "n2" || m["term"] != float64(5) || m["index"] != float64(10) || m[hclog.MissingKey] != "odd" || m["node_id"] != "n1" {
		t.Fatalf("With/Named line: %v", m)
	}
	s2.ResetNamed("fsm").Info("x")
	if m := one(t, buf); m["component"] != "fsm" || m["peer"] != "n2" {
		t.Fatalf("ResetNamed line: %v", m)
	}
}

func TestHCLogStandardLogger(t *testing.T) {
	l, buf := newJSON(t, "trace", "n1")
	h := NewHCLog(l, "raft")
	h.StandardLogger(nil).Printf("plain %d", 1)
	if m := one(t, buf); m["level"] != "info" || m["message"] != "plain 1" || m["node_id"] != "n1" || m["component"] != "raft" {
		t.Fatalf("standard logger line: %v", m)
	}
	infer := h.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
	for in, want := range map[string][2]string{
		"[WARN] disk slow":   {"warn", "disk slow"},
		"[ERR] broken":       {"error", "broken"},
		"[DEBUG]  spaced":    {"debug", "spaced"},
		"no prefix [WARN] x": {"info", "no prefix [WARN] x"},
	} {
		infer.Print(in)
		if m := one(t, buf); m["level"] != want[0] || m["message"] != want[1] {
			t.Errorf("%q: %v", in, m)
		}
	}
	ts := h.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true, InferLevelsWithTimestamp: true})
	if _, err := ts.Write([]byte("2024/01/02 15:04:05 [ERROR] x\n")); err != nil {
		t.Fatal(err)
	}
	if m := one(t, buf); m["level"] != "error" || m["message"] != "x" {
		t.Errorf("timestamped: %v", m)
	}
	forced := h.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})
	forced.Print("[ERROR] demoted")
	if m := one(t, buf); m["level"] != "debug" || m["message"] != "demoted" {
		t.Errorf("forced: %v", m)
	}
}

func TestHCLogConcurrent(t *testing.T) {
	l, buf := newJSON(t, "info", "n1")
	var mu sync.Mutex
	l = l.Output(zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	})))
	h := NewHCLog(l, "raft")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := h.Named("w").With("i", i)
			c.Info("x")
			h.SetLevel(hclog.Info)
			_ = c.IsDebug()
		})
	}
	wg.Wait()
	if n := len(lines(t, buf)); n != 8 {
		t.Fatalf("got %d lines", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
