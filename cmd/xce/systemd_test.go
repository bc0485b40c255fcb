package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit checks deploy/xce.service: the lines the upgrade relies
// on, that docs/operations.md shows the same unit, and its syntax with
// systemd-analyze verify where that tool exists.
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile("../../deploy/xce.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ExecReload=/bin/kill -HUP $MAINPID",
		"PIDFile=/run/xce/xce.pid",
		"--pid-file /run/xce/xce.pid",
	} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("deploy/xce.service lacks %q", want)
		}
	}
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var body []string
	for _, l := range strings.Split(string(unit), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			body = append(body, l)
		}
	}
	if !strings.Contains(string(readme), strings.Join(body, "\n")) {
		t.Error("docs/operations.md does not show deploy/xce.service (without its comments) verbatim")
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: unit syntax not verified")
	}
	// verify also checks that ExecStart's binary exists: point it at one.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "xce.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/xce", self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "xce.service") {
			t.Errorf("systemd-analyze verify: %s", l)
		}
	}
}
