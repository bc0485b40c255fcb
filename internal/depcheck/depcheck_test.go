package depcheck

import (
	"bufio"
	"bytes"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// libraries are the packages other programs embed.
var libraries = []string{"github.com/xce/xce/client", "github.com/xce/xce/worker"}

// forbidden are the import path prefixes of what only the server links,
// and why.
var forbidden = []struct{ prefix, why string }{
	{"github.com/hashicorp/raft", "the Raft library"},
	{"github.com/prometheus/", "the metrics registry"},
	{"github.com/rs/zerolog", "the node's logger (the libraries log through log/slog)"},
	{"github.com/xce/xce/netio", "the server's listeners and connection limits"},
}

// The client and worker libraries link nothing of the server: none of
// forbidden is among their dependencies, direct or not.
func TestLibrariesLinkNoServerCode(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the libraries' dependencies: %v", err)
	}
	args := append([]string{"list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`}, libraries...)
	var stderr bytes.Buffer
	cmd := exec.Command(goTool, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	imports := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, lib := range libraries {
		if _, ok := imports[lib]; !ok {
			t.Fatalf("go list did not list %s", lib)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(imports)) {
		why, bad := forbiddenWhy(pkg)
		if !bad {
			continue
		}
		c := chain(imports, libraries, pkg)
		if len(c) > 1 {
			if _, via := forbiddenWhy(c[len(c)-2]); via {
				continue // named with the package that brings it in
			}
		}
		t.Errorf("the libraries link %s, %s: %s", pkg, why, strings.Join(c, " -> "))
	}
}

// forbiddenWhy says why pkg is forbidden, if it is.
func forbiddenWhy(pkg string) (string, bool) {
	for _, f := range forbidden {
		if strings.HasPrefix(pkg, f.prefix) {
			return f.why, true
		}
	}
	return "", false
}

// chain is the shortest import chain from one of roots to pkg in imports.
func chain(imports map[string][]string, roots []string, pkg string) []string {
	from := map[string]string{}
	queue := slices.Clone(roots)
	for _, r := range roots {
		from[r] = ""
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == pkg {
			var path []string
			for ; p != ""; p = from[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return path
		}
		for _, q := range imports[p] {
			if _, seen := from[q]; !seen {
				from[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{pkg}
}
