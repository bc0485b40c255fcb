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

// --restarts needs a local cluster of three or more, and its rounds and
// follower signal need --restarts and must be known; --snapshot-at must
// fall within the run: usage errors before anything starts.
func TestBenchRestartAndSnapshotFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--addr", "127.0.0.1:1", "--restarts"},
		{"--local", "1", "--restarts"},
		{"--local", "2", "--restarts"},
		{"--local", "3", "--restart-rounds", "2"},
		{"--local", "3", "--restarts", "--restart-rounds", "0"},
		{"--local", "3", "--restarts", "--restart-rounds", "21"},
		{"--local", "3", "--restarts", "--follower-signal", "hup"},
		{"--local", "3", "--follower-signal", "term"},
		{"--local", "1", "--snapshot-at", "-1s"},
		{"--local", "1", "--duration", "2s", "--snapshot-at", "2s"},
		{"--local", "1", "--snapshot-at", "x"},
	} {
		if _, code := runCmd(t, benchCmd(), args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// --watchers and --workers must not be negative, and no more watchers
// than the nodes serve (dispatch.MaxWatchers each): usage errors before
// anything starts.
func TestBenchWatchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--local", "3", "--watchers", "-1"},
		{"--local", "3", "--workers", "-1"},
		{"--local", "3", "--watchers", "30001"},
		{"--local", "1", "--watchers", "10001"},
		{"--addr", "127.0.0.1:1,127.0.0.1:2", "--watchers", "20001"},
		{"--local", "3", "--watchers", "x"},
	} {
		if _, code := runCmd(t, benchCmd(), args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
