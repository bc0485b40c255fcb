package assign

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Bounds of worker labels, so that a worker cannot grow the primary's
// memory or a plan's cost with its labels.
const (
	// MaxLabels bounds the labels of one worker.
	MaxLabels = 16
	// MaxLabelBytes bounds a label key and a label value.
	MaxLabelBytes = 63
)

// ValidLabelKey reports whether k may name a label: 1 to MaxLabelBytes
// bytes of ASCII letters, digits, '.', '-', '_' and '/' (so that
// Kubernetes' topology.kubernetes.io/zone is one).
func ValidLabelKey(k string) bool {
	if k == "" || len(k) > MaxLabelBytes {
		return false
	}
	for _, c := range []byte(k) {
		if !labelByte(c) && c != '/' {
			return false
		}
	}
	return true
}

// ValidLabelValue reports whether v may be a label value: at most
// MaxLabelBytes bytes of ASCII letters, digits, '.', '-' and '_' (empty
// is allowed and equals a missing label).
func ValidLabelValue(v string) bool {
	if len(v) > MaxLabelBytes {
		return false
	}
	for _, c := range []byte(v) {
		if !labelByte(c) {
			return false
		}
	}
	return true
}

func labelByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
}

// CheckLabels returns an error naming the first bad label (by key order),
// or nil.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%d labels exceed the maximum %d", len(labels), MaxLabels)
	}
	bad, found := "", false
	for k, v := range labels {
		if (!ValidLabelKey(k) || !ValidLabelValue(v)) && (!found || k < bad) {
			bad, found = k, true
		}
	}
	if found {
		if !ValidLabelKey(bad) {
			return fmt.Errorf("label key %q: want 1 to %d bytes of letters, digits, '.', '-', '_', '/'", bad, MaxLabelBytes)
		}
		return fmt.Errorf("label %q: value %q: want at most %d bytes of letters, digits, '.', '-', '_'", bad, labels[bad], MaxLabelBytes)
	}
	return nil
}

// FormatLabels writes labels as k=v pairs sorted by key and joined by
// commas ("" for none), as xce workers shows them and xce worker --label
// takes them.
func FormatLabels(labels map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}
