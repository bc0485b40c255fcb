package main

import "testing"

// TestDevNodes: xce dev runs 1, 3, 5 or 7 nodes; any other count is a
// usage error before anything starts.
func TestDevNodes(t *testing.T) {
	for _, n := range []string{"0", "2", "4", "6", "8", "-1"} {
		if _, code := runCmd(t, devCmd(), "--nodes", n, "--dir", t.TempDir()); code != exitUsage {
			t.Errorf("--nodes %s: exit %d, want %d", n, code, exitUsage)
		}
	}
}
