package kubernetes

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Dockerfile builds a static binary with the module's Go, and runs it
// as a non-root user with the data dir a volume.
func TestDockerfile(t *testing.T) {
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if goVer == nil {
		t.Fatal("go.mod names no go version")
	}
	var from []string
	var user, volume, entry string
	sc := bufio.NewScanner(bytes.NewReader(df))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "FROM":
			from = append(from, f[1])
		case "USER":
			user = f[1]
		case "VOLUME":
			volume = strings.Join(f[1:], " ")
		case "ENTRYPOINT":
			entry = strings.Join(f[1:], " ")
		}
	}
	if len(from) != 2 || !strings.HasPrefix(from[0], "golang:"+string(goVer[1])) {
		t.Errorf("stages %v: want a golang:%s builder and a runtime stage", from, goVer[1])
	}
	if len(from) == 2 && !strings.Contains(from[1], "distroless/static") {
		t.Errorf("runtime base %s: want a minimal static one", from[1])
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q: want a non-root user", user)
	}
	if !strings.Contains(volume, "/var/lib/xce") {
		t.Errorf("VOLUME %q: want the data dir", volume)
	}
	if entry != `["/xce"]` {
		t.Errorf("ENTRYPOINT %s: want /xce", entry)
	}
	if !bytes.Contains(df, []byte("CGO_ENABLED=0")) || !bytes.Contains(df, []byte("-X main.version=")) {
		t.Error("the binary is not built static with its version stamped")
	}
}

// With a container runtime, the image builds, its binary reports the
// version stamped and has pod-config; without one the test says so.
func TestImageBuilds(t *testing.T) {
	runtime := ""
	for _, r := range []string{"docker", "podman"} {
		if _, err := exec.LookPath(r); err == nil && exec.Command(r, "info").Run() == nil {
			runtime = r
			break
		}
	}
	if runtime == "" {
		t.Skip("no container runtime runs here (docker or podman, with its daemon or service up): the image is not built")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	image := "xce-test:" + strings.ToLower(t.Name())
	build := exec.Command(filepath.Join(root, "scripts", "image.sh"))
	build.Env = append(os.Environ(), "IMAGE="+image, "VERSION=test-1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	defer exec.Command(runtime, "rmi", "-f", image).Run()
	out, err := exec.Command(runtime, "run", "--rm", image, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "xce test-1 (commit ") {
		t.Fatalf("xce version in the image: %v: %s", err, out)
	}
	out, err = exec.Command(runtime, "run", "--rm", "--entrypoint", "/xce", image, "pod-config", "--help").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("StatefulSet")) {
		t.Fatalf("pod-config in the image: %v: %s", err, out)
	}
}
