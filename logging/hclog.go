package logging

import (
	"fmt"
	"io"
	"log"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/rs/zerolog"
)

// NewHCLog adapts l to hclog.Logger so that hashicorp/raft logs into the
// node's log. hclog levels map to the zerolog levels of the same name; the
// logger's name goes into field "component" (Named joins names with ".");
// key/value args become fields (an odd trailing value goes under
// "EXTRA_VALUE_AT_END"; errors, fmt.Stringers such as time.Duration and
// hclog.Fmt/Hex/Octal/Binary/Quote values are written as strings).
//
// The level starts at l's level. SetLevel changes it for this logger and
// every logger derived from it with With/Named/ResetNamed; zerolog's global
// level still applies.
func NewHCLog(l zerolog.Logger, name string) hclog.Logger {
	lvl := new(atomic.Int32)
	lvl.Store(int32(fromZerolog(l.GetLevel())))
	return &hcLogger{zl: l.Level(zerolog.TraceLevel), level: lvl, name: name}
}

type hcLogger struct {
	zl    zerolog.Logger // filtering happens in enabled, against level
	level *atomic.Int32  // an hclog.Level, shared with derived loggers
	name  string
	args  []any // implied key/value pairs from With, keys unique
}

var _ hclog.Logger = (*hcLogger)(nil)

func fromZerolog(l zerolog.Level) hclog.Level {
	switch l {
	case zerolog.TraceLevel:
		return hclog.Trace
	case zerolog.DebugLevel:
		return hclog.Debug
	case zerolog.InfoLevel:
		return hclog.Info
	case zerolog.WarnLevel:
		return hclog.Warn
	case zerolog.ErrorLevel:
		return hclog.Error
	}
	return hclog.Off // fatal, panic, no level, disabled: hclog has nothing that maps
}

func toZerolog(l hclog.Level) zerolog.Level {
	switch l {
	case hclog.Trace:
		return zerolog.TraceLevel
	case hclog.Debug:
		return zerolog.DebugLevel
	case hclog.Warn:
		return zerolog.WarnLevel
	case hclog.Error:
		return zerolog.ErrorLevel
	}
	return zerolog.InfoLevel
}

func (h *hcLogger) enabled(l hclog.Level) bool {
	return l != hclog.Off && l >= h.GetLevel() && toZerolog(l) >= zerolog.GlobalLevel()
}

func (h *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if !h.enabled(level) {
		return
	}
	e := h.zl.WithLevel(toZerolog(level))
	if h.name != "" {
		e = e.Str("component", h.name)
	}
	for _, kv := range [][]any{h.args, pairs(args)} {
		for i := 0; i+1 < len(kv); i += 2 {
			e = field(e, kv[i].(string), kv[i+1])
		}
	}
	e.Msg(msg)
}

// pairs normalizes hclog args: keys become strings and an odd trailing value
// goes under hclog.MissingKey.
func pairs(args []any) []any {
	out := make([]any, 0, len(args)+1)
	for i := 0; i < len(args); i += 2 {
		if i+1 == len(args) {
			return append(out, hclog.MissingKey, args[i])
		}
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		out = append(out, key, args[i+1])
	}
	return out
}

func field(e *zerolog.Event, key string, v any) *zerolog.Event {
	switch v := v.(type) {
	case error, fmt.Stringer: // includes time.Duration; fmt survives nil receivers and panics
		return e.Str(key, fmt.Sprint(v))
	case hclog.Format:
		if f, ok := firstString(v); ok {
			return e.Str(key, fmt.Sprintf(f, v[1:]...))
		}
		return e.Str(key, fmt.Sprint(v...))
	case hclog.Hex:
		return e.Str(key, fmt.Sprintf("0x%x", int(v)))
	case hclog.Octal:
		return e.Str(key, fmt.Sprintf("0%o", int(v)))
	case hclog.Binary:
		return e.Str(key, fmt.Sprintf("0b%b", int(v)))
	case hclog.Quote:
		return e.Str(key, fmt.Sprintf("%q", string(v)))
	}
	return e.Interface(key, v)
}

func firstString(f hclog.Format) (string, bool) {
	if len(f) == 0 {
		return "", false
	}
	s, ok := f[0].(string)
	return s, ok
}

func (h *hcLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hcLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hcLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hcLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hcLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hcLogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hcLogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hcLogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hcLogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hcLogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hcLogger) ImpliedArgs() []any { return append([]any(nil), h.args...) }

// With returns a logger that adds args to every line; a key given again
// replaces the earlier value.
func (h *hcLogger) With(args ...any) hclog.Logger {
	n := *h
	n.args = append([]any(nil), h.args...)
	kv := pairs(args)
next:
	for i := 0; i < len(kv); i += 2 {
		for j := 0; j < len(n.args); j += 2 {
			if n.args[j] == kv[i] {
				n.args[j+1] = kv[i+1]
				continue next
			}
		}
		n.args = append(n.args, kv[i], kv[i+1])
	}
	return &n
}

func (h *hcLogger) Name() string { return h.name }

func (h *hcLogger) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

func (h *hcLogger) ResetNamed(name string) hclog.Logger {
	n := *h
	n.name = name
	return &n
}

func (h *hcLogger) SetLevel(level hclog.Level) { h.level.Store(int32(level)) }
func (h *hcLogger) GetLevel() hclog.Level      { return hclog.Level(h.level.Load()) }

func (h *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer that logs each write as one line, at info
// unless opts asks to force or infer ("[WARN] ...") the level.
func (h *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	w := &stdWriter{h: h}
	if opts != nil {
		w.opts = *opts
	}
	return w
}

type stdWriter struct {
	h    *hcLogger
	opts hclog.StandardLoggerOptions
}

var leadingTimestamp = regexp.MustCompile(`^[\d\s:/.+TZ-]*`)

func (w *stdWriter) Write(p []byte) (int, error) {
	s := strings.TrimRight(string(p), " \t\n")
	level := hclog.Info
	switch {
	case w.opts.ForceLevel != hclog.NoLevel:
		_, s = pickLevel(s)
		level = w.opts.ForceLevel
	case w.opts.InferLevels:
		if w.opts.InferLevelsWithTimestamp {
			s = leadingTimestamp.ReplaceAllString(s, "")
		}
		level, s = pickLevel(s)
	}
	w.h.Log(level, s)
	return len(p), nil
}

func pickLevel(s string) (hclog.Level, string) {
	for _, p := range []struct {
		prefix string
		level  hclog.Level
	}{{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info}, {"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error}} {
		if rest, ok := strings.CutPrefix(s, p.prefix); ok {
			return p.level, strings.TrimSpace(rest)
		}
	}
	return hclog.Info, s
}
