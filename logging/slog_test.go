package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"testing/slogtest"
	"time"

	"github.com/rs/zerolog"
)

// stamp matches the time field the logger adds to every line.
var stamp = regexp.MustCompile(`,"time":"[^"]*"`)

// A line logged through NewSlog is the line zerolog writes for the same
// call: the same fields, in the same order, with the same level and
// encoding, only the time differing.
func TestSlogWritesAsZerolog(t *testing.T) {
	at := time.Date(2026, 12, 4, 10, 11, 12, 13_000_000, time.UTC)
	for _, tc := range []struct {
		name  string
		level string
		zl    func(l zerolog.Logger)
		sl    func(l *slog.Logger)
	}{
		{
			name:  "info with strings, numbers and durations",
			level: "info",
			zl: func(l zerolog.Logger) {
				l.Info().Strs("controllers", []string{"a:1", "b:2"}).Uint32("capacity", 3).Uint64("generation", 7).
					Int64("lag", -2).Float64("rate", 1.5).Bool("drained", true).Dur("heartbeat_interval", 1500*time.Millisecond).
					Msg("registered")
			},
			sl: func(l *slog.Logger) {
				l.Info("registered", "controllers", []string{"a:1", "b:2"}, "capacity", uint32(3), slog.Uint64("generation", 7),
					slog.Int64("lag", -2), slog.Float64("rate", 1.5), slog.Bool("drained", true),
					slog.Duration("heartbeat_interval", 1500*time.Millisecond))
			},
		},
		{
			name:  "warn with an error",
			level: "info",
			zl: func(l zerolog.Logger) {
				l.Warn().Err(errors.New("no primary")).Dur("retry_in", time.Second).Msg("register failed")
			},
			sl: func(l *slog.Logger) {
				l.Warn("register failed", "error", errors.New("no primary"), "retry_in", time.Second)
			},
		},
		{
			name:  "context fields before the event's",
			level: "info",
			zl: func(l zerolog.Logger) {
				w := l.With().Str("worker_id", "w1").Logger()
				w.Info().Str("task", "t1").Msg("caught up")
			},
			sl: func(l *slog.Logger) {
				l.With("worker_id", "w1").Info("caught up", "task", "t1")
			},
		},
		{
			name:  "time and any value",
			level: "debug",
			zl: func(l zerolog.Logger) {
				l.Debug().Time("last_acknowledged_send", at).Interface("epochs", map[string]uint64{"t1": 2}).Msg("lease")
			},
			sl: func(l *slog.Logger) {
				l.Debug("lease", slog.Time("last_acknowledged_send", at), slog.Any("epochs", map[string]uint64{"t1": 2}))
			},
		},
		{
			name:  "error and trace levels",
			level: "trace",
			zl: func(l zerolog.Logger) {
				l.Error().Msg("e")
				l.Trace().Msg("t")
			},
			sl: func(l *slog.Logger) {
				l.Error("e")
				l.Log(context.Background(), slog.LevelDebug-4, "t")
			},
		},
		{
			name:  "below the level: nothing",
			level: "info",
			zl:    func(l zerolog.Logger) { l.Debug().Msg("hidden") },
			sl:    func(l *slog.Logger) { l.Debug("hidden") },
		},
		{
			name:  "a group is an object",
			level: "info",
			zl: func(l zerolog.Logger) {
				l.Info().Dict("copy", zerolog.Dict().Str("task", "t1").Dur("age", time.Second)).Msg("m")
			},
			sl: func(l *slog.Logger) {
				l.Info("m", slog.Group("copy", "task", "t1", "age", time.Second))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zl, zbuf := newJSON(t, tc.level, "n1")
			sl, sbuf := newJSON(t, tc.level, "n1")
			tc.zl(zl)
			tc.sl(NewSlog(sl))
			want, got := stamp.ReplaceAllString(zbuf.String(), ""), stamp.ReplaceAllString(sbuf.String(), "")
			if got != want {
				t.Errorf("through slog:\n%s\nzerolog's own:\n%s", got, want)
			}
		})
	}
}

// The handler obeys slog's rules for handlers (testing/slogtest), but for
// the time: the logger stamps every line itself, as it stamps its own.
func TestSlogHandlerRules(t *testing.T) {
	var buf bytes.Buffer
	slogtest.Run(t, func(t *testing.T) slog.Handler {
		if strings.HasSuffix(t.Name(), "/zero-time") {
			t.Skip("the logger stamps every line with the time it writes it, not the record's")
		}
		buf.Reset()
		l, err := New(&buf, "debug", "json", "")
		if err != nil {
			t.Fatal(err)
		}
		return NewSlog(l).Handler()
	}, func(t *testing.T) map[string]any {
		var m map[string]any
		if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
			t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
		}
		// zerolog's name for the message.
		m[slog.MessageKey] = m[zerolog.MessageFieldName]
		delete(m, zerolog.MessageFieldName)
		return m
	})
}
