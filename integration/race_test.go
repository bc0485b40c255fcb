//go:build race

package integration

// raceEnabled: the test binary runs under the race detector, so the xce
// binary is built with -race too.
const raceEnabled = true
