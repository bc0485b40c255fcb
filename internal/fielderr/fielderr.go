// Package fielderr reports an invalid setting as a value: the field that
// holds it and what is wrong with it. A package's Validate names its own
// fields by their Go names and so knows nothing of where its Config came
// from; whoever built the Config names them the way its user wrote them
// (package configs by their YAML keys, docs/design.md, "Adding a setting").
// Read as plain errors they name the fields in snake case.
package fielderr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Error is one invalid setting.
type Error struct {
	// Field is the setting's path in the Config that was validated: its Go
	// field names joined by dots, "HeartbeatTimeout" or "SASL.Username".
	Field string
	// Problem says what is wrong and, where it helps, what would be valid:
	// "must be positive (got 0s)". Another setting it mentions is written
	// as its path in braces, "{HeartbeatTimeout}", and is named the way
	// Field is; "{.TLS.Files.Key}" names it by its last name only, for a
	// setting that sits beside Field.
	Problem string
}

// Errorf returns the Error of field with the problem that format and args
// describe.
func Errorf(field, format string, args ...any) *Error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Error renders e with its fields in snake case (see Snake):
// "election_timeout: must not be less than heartbeat_timeout (200ms < 300ms)".
func (e *Error) Error() string { return e.Text(Snake) }

// Text renders e as "field: problem", each setting named by name.
func (e *Error) Text(name func(path string) string) string {
	return name(e.Field) + ": " + e.Describe(name)
}

// mention is a setting named in a Problem: "{Path}" or "{.Path}".
var mention = regexp.MustCompile(`\{(\.?)([A-Z][A-Za-z0-9]*(?:\.[A-Z][A-Za-z0-9]*)*)\}`)

// Describe renders e's problem alone, each setting it mentions named by
// name.
func (e *Error) Describe(name func(path string) string) string {
	return mention.ReplaceAllStringFunc(e.Problem, func(m string) string {
		sub := mention.FindStringSubmatch(m)
		n := name(sub[2])
		if sub[1] == "." {
			n = n[strings.LastIndex(n, ".")+1:]
		}
		return n
	})
}

// under returns e as a setting of the struct at prefix, the settings its
// problem mentions with it.
func (e *Error) under(prefix string) *Error {
	return &Error{
		Field: prefix + "." + e.Field,
		Problem: mention.ReplaceAllStringFunc(e.Problem, func(m string) string {
			sub := mention.FindStringSubmatch(m)
			return "{" + sub[1] + prefix + "." + sub[2] + "}"
		}),
	}
}

// List collects the invalid settings of one Config. The zero List holds
// none.
type List []*Error

// Add adds the Error of field with the problem that format and args
// describe.
func (l *List) Add(field, format string, args ...any) {
	*l = append(*l, Errorf(field, format, args...))
}

// AddUnder adds what the Validate of a Config nested at prefix returned,
// each setting named as one of the outer Config's ("Assign" and
// "MaxWarmupReplicas" make "Assign.MaxWarmupReplicas"). An error that holds
// no Error becomes the problem of prefix itself.
func (l *List) AddUnder(prefix string, err error) {
	if err == nil {
		return
	}
	all := All(err)
	if len(all) == 0 {
		l.Add(prefix, "%s", err)
		return
	}
	for _, e := range all {
		*l = append(*l, e.under(prefix))
	}
}

// Err returns l as an error, or nil when it holds none.
func (l List) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// Error renders each setting on its own line, as errors.Join does.
func (l List) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the Errors, for errors.Is and errors.As.
func (l List) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// All returns the Errors in err, in order: err itself, what it wraps, and
// what an errors.Join or a List holds. Whatever else err says (a sentinel
// it wraps beside them, a prefix) is left out.
func All(err error) []*Error {
	switch e := err.(type) {
	case nil:
		return nil
	case *Error:
		return []*Error{e}
	case List:
		return e
	case interface{ Unwrap() []error }:
		var all []*Error
		for _, w := range e.Unwrap() {
			all = append(all, All(w)...)
		}
		return all
	}
	return All(errors.Unwrap(err))
}

// Snake names a path in snake case, each of its names apart:
// "SASL.PasswordFile" is "sasl.password_file", "MaxRPCSize" "max_rpc_size".
func Snake(path string) string {
	var b strings.Builder
	rs := []rune(path)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && rs[i-1] != '.' {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || unicode.IsUpper(prev) && nextLower {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
