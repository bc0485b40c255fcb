// Package logging builds the node's zerolog logger and adapts it to
// hashicorp/go-hclog for hashicorp/raft and to log/slog for the worker
// library.
package logging

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// New returns the node's logger. format is "json", "console", or "auto"/""
// (console when w is a terminal *os.File, else JSON). level is one of trace,
// debug, info, warn, error ("" means info); anything else is an error. Every
// line carries a millisecond UTC "time" and, when nodeID is not empty, "node_id".
func New(w io.Writer, level, format, nodeID string) (zerolog.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return zerolog.Nop(), err
	}
	switch format {
	case "json":
	case "console":
		w = consoleWriter(w)
	case "auto", "":
		if isTerminal(w) {
			w = consoleWriter(w)
		}
	default:
		return zerolog.Nop(), fmt.Errorf("unknown log format %q, want json, console or auto", format)
	}
	ctx := zerolog.New(w).Level(lvl).Hook(timeHook{}).With()
	if nodeID != "" {
		ctx = ctx.Str("node_id", nodeID)
	}
	return ctx.Logger(), nil
}

func parseLevel(s string) (zerolog.Level, error) {
	switch s {
	case "trace":
		return zerolog.TraceLevel, nil
	case "debug":
		return zerolog.DebugLevel, nil
	case "info", "":
		return zerolog.InfoLevel, nil
	case "warn":
		return zerolog.WarnLevel, nil
	case "error":
		return zerolog.ErrorLevel, nil
	}
	return zerolog.NoLevel, fmt.Errorf("unknown log level %q, want trace, debug, info, warn or error", s)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func consoleWriter(w io.Writer) io.Writer {
	return zerolog.ConsoleWriter{Out: w, NoColor: !isTerminal(w), TimeFormat: "15:04:05.000"}
}

// timeHook stamps each event with millisecond precision without touching
// zerolog's global TimeFieldFormat (Logger.Timestamp has second precision
// by default).
type timeHook struct{}

func (timeHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	e.Str(zerolog.TimestampFieldName, time.Now().UTC().Format("2006-01-02T15:04:05.000Z07:00"))
}
