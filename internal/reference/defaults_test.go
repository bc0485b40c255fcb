package reference

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	configPage     = "../../docs/reference/config.md"
	operationsPage = "../../docs/operations.md"
)

// TestOperationsDefaultsMatchTheReference checks every default that a
// table of docs/operations.md states for a config key against the
// generated config reference, which takes them from the code.
func TestOperationsDefaultsMatchTheReference(t *testing.T) {
	ref := tableDefaults(t, configPage, "| key | type | default |", 0, 2)
	if len(ref) < 50 {
		t.Fatalf("found only %d keys in the config reference: the parse is broken", len(ref))
	}
	ops := tableDefaults(t, operationsPage, "| key | default |", 0, 1)
	for k, v := range tableDefaults(t, operationsPage, "| setting | default |", 0, 1) {
		ops[k] = v
	}
	if len(ops) < 20 {
		t.Fatalf("found only %d defaults in operations.md: the parse is broken", len(ops))
	}
	for key, stated := range ops {
		full, ok := resolveKey(ref, key)
		if !ok {
			t.Errorf("operations.md states a default for %s, which is not one config key of the reference", key)
			continue
		}
		if !sameDefault(stated, ref[full]) {
			t.Errorf("operations.md gives %s the default %q; the reference (the code) says %q", key, stated, ref[full])
		}
	}
}

// tableDefaults reads the rows of every table of page whose header starts
// with header: the backticked key in cell keyCol and the value in cell
// valCol, without backticks.
func tableDefaults(t *testing.T, page, header string, keyCol, valCol int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile("^`([a-z_.\\[\\]]+)`$")
	out := map[string]string{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, header):
			in = true
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) <= valCol {
			continue
		}
		m := key.FindStringSubmatch(strings.TrimSpace(cells[keyCol]))
		if m == nil {
			continue
		}
		out[m[1]] = strings.ReplaceAll(strings.TrimSpace(cells[valCol]), "`", "")
	}
	return out
}

// resolveKey finds key among the reference's keys: itself, or the one key
// it ends (a table under a section names keys without their section).
func resolveKey(ref map[string]string, key string) (string, bool) {
	if _, ok := ref[key]; ok {
		return key, true
	}
	var found []string
	for k := range ref {
		if strings.HasSuffix(k, "."+key) {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		return "", false
	}
	return found[0], true
}

// sameDefault reports whether a default as operations.md states it is the
// reference's: the same text, duration or size, a note in parentheses
// aside.
func sameDefault(stated, ref string) bool {
	stated, ref = firstValue(stated), firstValue(ref)
	if stated == ref {
		return true
	}
	if a, err := time.ParseDuration(stated); err == nil {
		b, err := time.ParseDuration(ref)
		return err == nil && a == b
	}
	if a, ok := size(stated); ok {
		b, ok := size(ref)
		return ok && a == b
	}
	return false
}

// firstValue drops a note in parentheses after a value.
func firstValue(s string) string {
	if i := strings.Index(s, " ("); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// size reads "16 MiB", "64 KiB" or a plain number of bytes.
func size(s string) (int64, bool) {
	n, unit, _ := strings.Cut(s, " ")
	v, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return 0, false
	}
	switch unit {
	case "":
		return v, true
	case "KiB":
		return v << 10, true
	case "MiB":
		return v << 20, true
	case "GiB":
		return v << 30, true
	}
	return 0, false
}
