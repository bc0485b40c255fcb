package logging

import (
	"context"
	"log/slog"
	"slices"

	"github.com/rs/zerolog"
)

// NewSlog adapts l to a *slog.Logger, for libraries that log through the
// standard library (the worker library) so that they link no zerolog: a
// program that uses l gets their lines in the same format as its own.
// slog levels map to the zerolog levels of the same name (below debug is
// trace); attributes become fields of the same name, written by zerolog's
// own methods (a time.Duration as l's Dur, a time.Time as its Time, an
// error as its AnErr, a []string as its Strs, anything else as Interface);
// a group is a nested object. Every line is stamped by l, as l stamps its
// own: the Record's time is not written.
func NewSlog(l zerolog.Logger) *slog.Logger {
	return slog.New(&slogHandler{zl: l})
}

// slogHandler is NewSlog's slog.Handler.
type slogHandler struct {
	zl zerolog.Logger
	// attrs are the attributes given to WithAttrs before any group.
	attrs []slog.Attr
	// groups are the groups opened by WithGroup, outermost first, each
	// with the attributes given to WithAttrs within it.
	groups []slogGroup
}

type slogGroup struct {
	name  string
	attrs []slog.Attr
}

// zerologLevel is the zerolog level of the slog level l.
func zerologLevel(l slog.Level) zerolog.Level {
	switch {
	case l < slog.LevelDebug:
		return zerolog.TraceLevel
	case l < slog.LevelInfo:
		return zerolog.DebugLevel
	case l < slog.LevelWarn:
		return zerolog.InfoLevel
	case l < slog.LevelError:
		return zerolog.WarnLevel
	}
	return zerolog.ErrorLevel
}

func (h *slogHandler) Enabled(_ context.Context, l slog.Level) bool {
	zl := zerologLevel(l)
	return zl >= h.zl.GetLevel() && zl >= zerolog.GlobalLevel()
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	e := h.zl.WithLevel(zerologLevel(r.Level))
	if e == nil {
		return nil
	}
	for _, a := range h.attrs {
		addAttr(e, a)
	}
	if len(h.groups) == 0 {
		r.Attrs(func(a slog.Attr) bool {
			addAttr(e, a)
			return true
		})
		e.Msg(r.Message)
		return nil
	}
	// The innermost group holds the record's attributes; each group is a
	// field of the one around it, and a group left empty is not written.
	last := len(h.groups) - 1
	body := zerolog.Dict()
	n := addAttrs(body, h.groups[last].attrs)
	r.Attrs(func(a slog.Attr) bool {
		if addAttr(body, a) {
			n++
		}
		return true
	})
	for i := last; i > 0; i-- {
		outer := zerolog.Dict()
		m := addAttrs(outer, h.groups[i-1].attrs)
		if n > 0 {
			outer.Dict(h.groups[i].name, body)
			m++
		}
		body, n = outer, m
	}
	if n > 0 {
		e.Dict(h.groups[0].name, body)
	}
	e.Msg(r.Message)
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	c := *h
	if len(c.groups) == 0 {
		c.attrs = slices.Concat(h.attrs, attrs)
		return &c
	}
	c.groups = slices.Clone(h.groups)
	g := &c.groups[len(c.groups)-1]
	g.attrs = slices.Concat(g.attrs, attrs)
	return &c
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.groups = append(slices.Clip(h.groups), slogGroup{name: name})
	return &c
}

// addAttrs adds attrs to e and returns how many it wrote.
func addAttrs(e *zerolog.Event, attrs []slog.Attr) int {
	n := 0
	for _, a := range attrs {
		if addAttr(e, a) {
			n++
		}
	}
	return n
}

// addAttr adds a to e with zerolog's method for its kind, and reports
// whether it wrote anything (an empty attribute or group is left out).
func addAttr(e *zerolog.Event, a slog.Attr) bool {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return false
	}
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		e.Str(a.Key, v.String())
	case slog.KindInt64:
		e.Int64(a.Key, v.Int64())
	case slog.KindUint64:
		e.Uint64(a.Key, v.Uint64())
	case slog.KindFloat64:
		e.Float64(a.Key, v.Float64())
	case slog.KindBool:
		e.Bool(a.Key, v.Bool())
	case slog.KindDuration:
		e.Dur(a.Key, v.Duration())
	case slog.KindTime:
		e.Time(a.Key, v.Time())
	case slog.KindGroup:
		if a.Key == "" {
			return addAttrs(e, v.Group()) > 0
		}
		d := zerolog.Dict()
		if addAttrs(d, v.Group()) == 0 {
			return false
		}
		e.Dict(a.Key, d)
	default:
		switch x := v.Any().(type) {
		case error:
			e.AnErr(a.Key, x)
		case []string:
			e.Strs(a.Key, x)
		default:
			e.Interface(a.Key, x)
		}
	}
	return true
}
