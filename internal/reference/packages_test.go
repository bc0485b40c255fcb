package reference

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	module     = "github.com/xce/xce"
	designPage = "../../docs/design.md"
)

// TestPackageTableMatchesImports checks the package table of
// docs/design.md ("The parts") against the code: every package of the
// module has a row (a subpackage without one belongs to its parent's),
// and each row's imports column lists exactly the project packages its
// non-test files import.
func TestPackageTableMatchesImports(t *testing.T) {
	rows := packageTable(t)
	if len(rows) < 20 {
		t.Fatalf("found only %d rows in the package table: the parse is broken", len(rows))
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	// owner is the row a package belongs to: its own, else the closest
	// parent's.
	owner := func(pkg string) string {
		for p := pkg; p != "."; p = filepath.Dir(p) {
			if slices.Contains(keys, p) {
				return p
			}
		}
		return ""
	}
	got := map[string]map[string]bool{}
	for _, k := range keys {
		got[k] = map[string]bool{}
	}
	walk(t, func(path string, d fs.DirEntry) {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return
		}
		pkg := rel(filepath.Dir(path))
		o := owner(pkg)
		if o == "" {
			t.Errorf("package %s has no row in docs/design.md's package table", pkg)
			return
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if p != module && !strings.HasPrefix(p, module+"/") {
				continue
			}
			if dep := owner(strings.TrimPrefix(strings.TrimPrefix(p, module), "/")); dep != o {
				got[o][dep] = true
			}
		}
	})
	for _, k := range keys {
		var want []string
		for d := range got[k] {
			want = append(want, d)
		}
		slices.Sort(want)
		if listed := rows[k]; !slices.Equal(listed, want) {
			t.Errorf("docs/design.md: the row of %s lists imports %v; its code imports %v", k, listed, want)
		}
	}
}

// packageTable reads the rows of the package table: each package and the
// project packages its imports column lists, sorted.
func packageTable(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(designPage)
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`([^`]+)`")
	rows := map[string][]string{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| package | owns | imports") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 {
			t.Fatalf("docs/design.md: a package row without three cells: %s", line)
		}
		m := code.FindStringSubmatch(cells[0])
		if m == nil {
			t.Fatalf("docs/design.md: a package row without a package: %s", line)
		}
		deps := []string{}
		for _, d := range code.FindAllStringSubmatch(cells[2], -1) {
			deps = append(deps, d[1])
		}
		slices.Sort(deps)
		rows[m[1]] = deps
	}
	return rows
}
