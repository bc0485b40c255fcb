// Package integration holds end-to-end tests that build the xce binary,
// start real `xce server` processes on loopback, and stop, kill and restart
// them. Everything lives in the _test.go files; see harness_test.go for the
// harness (newCluster, Start/Stop/Kill/Wait, Status, WaitRoles, Metric).
//
// Run with:  go test -race -count=1 ./integration/ -v
// Set XCE_BIN to test a prebuilt binary instead of building ./cmd/xce.
package integration
