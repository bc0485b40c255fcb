package main

import "testing"

// TestKVWorkerUsage: bad flags of `xce worker --store` are usage errors
// before anything starts.
func TestKVWorkerUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--store", dir}, // no --id
		{"--store", dir, "--id", "w1", "--brokers", " , "},     // no broker
		{"--store", dir, "--id", "w1", "--sasl-user", "u"},     // no password file
		{"--store", dir, "--id", "w1", "--tls-cert-file", "c"}, // no key
	} {
		if _, code := runCmd(t, workerCmd(), args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
