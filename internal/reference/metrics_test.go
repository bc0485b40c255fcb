package reference

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/reference/metrics.md")

const (
	root        = "../.."
	metricsPage = "../../docs/reference/metrics.md"
)

// TestMetricsReference checks that docs/reference/metrics.md lists every
// metric the code defines. `make docs` rewrites it.
func TestMetricsReference(t *testing.T) {
	ms, err := scanMetrics(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 20 {
		t.Fatalf("found only %d metrics: the scan is broken", len(ms))
	}
	got := renderMetrics(ms)
	if *update {
		if err := os.WriteFile(metricsPage, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(metricsPage)
	if err != nil || string(want) != got {
		t.Fatalf("%s is stale (%v): run make docs", metricsPage, err)
	}
}

// TestScanFindsVectorsAndFuncs checks the scan on a known source.
func TestScanFindsVectorsAndFuncs(t *testing.T) {
	dir := t.TempDir()
	src := `package p
import "github.com/prometheus/client_golang/prometheus"
var a = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "xce_a_total", Help: "A, " + "by reason."}, []string{"reason"})
var b = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "xce_b", Help: "B."}, nil)
var c = prometheus.HistogramOpts{Name: "xce_c_seconds", Help: "C."}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := scanMetrics(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(ms)
	want := "[{xce_a_total counter [reason] A, by reason. .} {xce_b gauge [] B. .} {xce_c_seconds histogram [] C. .}]"
	if got != want {
		t.Fatalf("scan:\n got %s\nwant %s", got, want)
	}
}

type metric struct {
	Name, Kind string
	Labels     []string
	Help, Pkg  string
}

var kinds = map[string]string{
	"CounterOpts": "counter", "GaugeOpts": "gauge", "HistogramOpts": "histogram", "SummaryOpts": "summary",
}

// scanMetrics parses the non-test Go files under dir (vendored and generated
// code aside) and returns each prometheus.*Opts literal that names a metric.
func scanMetrics(dir string) ([]metric, error) {
	byName := map[string]metric{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			if rel == "third_party" || rel == "proto" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		pkg := filepath.Dir(rel)
		var scanErr error
		ast.Inspect(f, func(n ast.Node) bool {
			if scanErr != nil {
				return false
			}
			var lit *ast.CompositeLit
			var labels []string
			switch n := n.(type) {
			case *ast.CallExpr:
				if len(n.Args) == 0 {
					return true
				}
				if l, ok := n.Args[0].(*ast.CompositeLit); ok && len(n.Args) > 1 {
					lit, labels = l, stringList(n.Args[1])
				}
			case *ast.CompositeLit:
				lit = n
			}
			if lit == nil {
				return true
			}
			m, ok, err := metricOf(lit)
			if err != nil {
				scanErr = fmt.Errorf("%s: %v", fset.Position(lit.Pos()), err)
				return false
			}
			if !ok {
				return true
			}
			m.Labels, m.Pkg = labels, pkg
			if old, seen := byName[m.Name]; seen && (old.Pkg != m.Pkg || old.Kind != m.Kind) {
				scanErr = fmt.Errorf("%s: metric %s also defined in %s", fset.Position(lit.Pos()), m.Name, old.Pkg)
				return false
			}
			if old, seen := byName[m.Name]; !seen || len(old.Labels) < len(m.Labels) {
				byName[m.Name] = m
			}
			return true
		})
		return scanErr
	})
	if err != nil {
		return nil, err
	}
	ms := make([]metric, 0, len(byName))
	for _, m := range byName {
		if m.Labels == nil {
			m.Labels = []string{}
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Name < ms[j].Name })
	return ms, nil
}

func metricOf(lit *ast.CompositeLit) (metric, bool, error) {
	sel, ok := lit.Type.(*ast.SelectorExpr)
	if !ok {
		return metric{}, false, nil
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
		return metric{}, false, nil
	}
	kind, ok := kinds[sel.Sel.Name]
	if !ok {
		return metric{}, false, nil
	}
	m := metric{Kind: kind}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		key, _ := kv.Key.(*ast.Ident)
		if key == nil || key.Name != "Name" && key.Name != "Help" {
			continue
		}
		s, ok := constString(kv.Value)
		if !ok {
			// A helper that fills Name in later: documented where it is
			// filled.
			return metric{}, false, nil
		}
		if key.Name == "Name" {
			m.Name = s
		} else {
			m.Help = s
		}
	}
	if m.Name == "" {
		return metric{}, false, nil
	}
	if m.Help == "" {
		return metric{}, false, fmt.Errorf("metric %s has no help text", m.Name)
	}
	return m, true, nil
}

// constString evaluates a string literal or a sum of them.
func constString(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		a, ok1 := constString(e.X)
		b, ok2 := constString(e.Y)
		return a + b, ok1 && ok2
	case *ast.ParenExpr:
		return constString(e.X)
	}
	return "", false
}

func stringList(e ast.Expr) []string {
	lit, ok := e.(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var out []string
	for _, el := range lit.Elts {
		if s, ok := constString(el); ok {
			out = append(out, s)
		}
	}
	return out
}

func renderMetrics(ms []metric) string {
	var b strings.Builder
	b.WriteString(`# Metrics

Generated from the source by ` + "`make docs`" + `; do not edit. Every node serves these
at ` + "`/metrics`" + ` on its client port, in the Prometheus text format. A metric with
labels shows once a label value has been used, unless noted in its meaning.

| metric | type | labels | defined in | meaning |
|---|---|---|---|---|
`)
	for _, m := range ms {
		labels := ""
		if len(m.Labels) > 0 {
			labels = "`" + strings.Join(m.Labels, "`, `") + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | %s |\n", m.Name, m.Kind, labels, m.Pkg,
			strings.ReplaceAll(m.Help, "|", `\|`))
	}
	return b.String()
}
