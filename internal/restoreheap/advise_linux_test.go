//go:build linux

package restoreheap

import "testing"

// Pieces that follow one another in memory are one run, in address order.
func TestAdjacent(t *testing.T) {
	big := make([]byte, 64)
	a, b, c, d := big[0:16:16], big[16:32:32], big[40:48:48], big[48:64:64]
	runs := adjacent([][]byte{c, a, d, b})
	if len(runs) != 2 || len(runs[0]) != 2 || len(runs[1]) != 2 ||
		&runs[0][0][0] != &a[0] || &runs[0][1][0] != &b[0] || &runs[1][0][0] != &c[0] || &runs[1][1][0] != &d[0] {
		t.Fatalf("runs %v", runs)
	}
}
