package main

import "testing"

// Bad --prefill and --prefill-clients values are usage errors before
// anything starts.
func TestBenchPrefillFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--local", "1", "--prefill", "-1"},
		{"--local", "1", "--prefill", "10", "--prefill-clients", "0"},
		{"--local", "1", "--prefill", "x"},
	} {
		if _, code := runCmd(t, benchCmd(), args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
