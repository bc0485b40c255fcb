package reference

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestCitationsExist checks that every file and section the code and the
// docs cite exists: a Go comment's `docs/x.md, "Section"` (or
// `docs/x.md ("Section")`) names a heading of that page, a path a comment
// or a page names is in the repository, and a page's relative link and
// its #anchor lead somewhere.
func TestCitationsExist(t *testing.T) {
	c := newCiter(t)
	var n int
	walk(t, func(path string, d fs.DirEntry) {
		switch {
		case d.Name() == "citations_test.go": // its examples are not citations
		case strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".pb.go") && !strings.HasSuffix(path, "connect.go"):
			n += c.checkGo(path)
		case strings.HasSuffix(path, ".md"):
			n += c.checkMarkdown(path)
		}
	})
	t.Logf("checked %d citations", n)
	if n < 100 {
		t.Fatalf("checked only %d citations: the scan is broken", n)
	}
}

// walk calls f for every file of the repository outside third_party,
// testdata and hidden directories.
func walk(t *testing.T, f func(path string, d fs.DirEntry)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "third_party" || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		f(path, d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type citer struct {
	t        *testing.T
	headings map[string][]string // page (relative to root) -> heading texts
}

func newCiter(t *testing.T) *citer { return &citer{t: t, headings: map[string][]string{}} }

var (
	// A page and a quoted section: `docs/design.md, "The gate"` or
	// `docs/design.md ("The gate")`, the quote possibly on the next line.
	sectionCite = regexp.MustCompile(`((?:docs/)?[\w./-]+\.md),?\s*\(?\s*"([^"]+)"`)
	// A repository path: a directory or two and a file with a known
	// extension.
	pathCite = regexp.MustCompile("(?:^|[\\s(`'\"])((?:[a-z][\\w.-]*/)+[\\w.-]+\\.(?:go|md|yaml|proto|txt|sh|service|bin))\\b")
)

// checkGo checks the citations in the comments of a Go file.
func (c *citer) checkGo(path string) int {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		c.t.Errorf("%s: %v", path, err)
		return 0
	}
	n := 0
	for _, g := range f.Comments {
		text := strings.Join(strings.Fields(g.Text()), " ")
		at := fset.Position(g.Pos())
		where := fmt.Sprintf("%s:%d", rel(path), at.Line)
		for _, m := range sectionCite.FindAllStringSubmatch(text, -1) {
			n++
			c.section(where, "", m[1], m[2])
		}
		for _, m := range pathCite.FindAllStringSubmatch(text, -1) {
			n++
			c.path(where, filepath.Dir(path), m[1])
		}
	}
	return n
}

var (
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A path in backticks: `ha/raftha/exitwatch.go`.
	mdCode = regexp.MustCompile("`((?:[a-z][\\w.-]*/)+[\\w.-]+\\.(?:go|md|yaml|proto|txt|sh|service|bin))`")
)

// checkMarkdown checks a page's relative links and the repository paths it
// names in code spans.
func (c *citer) checkMarkdown(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	inFence := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		where := fmt.Sprintf("%s:%d", rel(path), i+1)
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			page, anchor, _ := strings.Cut(target, "#")
			if page == "" {
				page = path
			} else {
				page = filepath.Join(filepath.Dir(path), page)
			}
			if _, err := os.Stat(page); err != nil {
				c.t.Errorf("%s: link to %s: no such file", where, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(page, ".md") && !slices.Contains(c.anchors(page), anchor) {
				c.t.Errorf("%s: link to %s: %s has no heading with that anchor", where, target, rel(page))
			}
		}
		for _, m := range mdCode.FindAllStringSubmatch(line, -1) {
			n++
			c.path(where, filepath.Dir(path), m[1])
		}
		for _, m := range sectionCite.FindAllStringSubmatch(line, -1) {
			n++
			c.section(where, filepath.Dir(path), m[1], m[2])
		}
	}
	return n
}

// section checks that page (relative to root, or to dir) has a heading
// named section, or one that starts with it and a parenthesis.
func (c *citer) section(where, dir, page, section string) {
	p := filepath.Join(root, page)
	if _, err := os.Stat(p); err != nil && dir != "" {
		p = filepath.Join(dir, page)
	}
	hs := c.headingsOf(p)
	if hs == nil {
		c.t.Errorf("%s: cites %s, which does not exist", where, page)
		return
	}
	for _, h := range hs {
		if h == section || strings.HasPrefix(h, section+" (") {
			return
		}
	}
	c.t.Errorf("%s: cites %s, %q: no such heading", where, page, section)
}

// path checks that p exists relative to the root or to dir.
func (c *citer) path(where, dir, p string) {
	for _, base := range []string{root, dir} {
		if _, err := os.Stat(filepath.Join(base, p)); err == nil {
			return
		}
	}
	c.t.Errorf("%s: names %s, which does not exist", where, p)
}

// headingsOf returns the heading texts of a page, without their #s and
// backticks; nil when the page does not exist.
func (c *citer) headingsOf(page string) []string {
	key := rel(page)
	if hs, ok := c.headings[key]; ok {
		return hs
	}
	b, err := os.ReadFile(page)
	if err != nil {
		c.headings[key] = nil
		return nil
	}
	hs := []string{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		hs = append(hs, strings.ReplaceAll(h, "`", ""))
	}
	c.headings[key] = hs
	return hs
}

// anchors returns the GitHub anchors of a page's headings.
func (c *citer) anchors(page string) []string {
	var as []string
	for _, h := range c.headingsOf(page) {
		as = append(as, anchor(h))
	}
	return as
}

// anchor is GitHub's anchor for a heading: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}
