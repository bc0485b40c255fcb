package reference

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// maxFuncLines bounds a function's length, from its func keyword to its
// closing brace, outside tests and generated code: a longer one is split
// along its steps, each named for what it does.
const maxFuncLines = 100

// TestFunctionsAreShort checks maxFuncLines for every function and
// function literal of the repository.
func TestFunctionsAreShort(t *testing.T) {
	var n int
	walk(t, func(path string, d fs.DirEntry) {
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
		if ast.IsGenerated(f) {
			return
		}
		ast.Inspect(f, func(node ast.Node) bool {
			var body *ast.BlockStmt
			name := "a function literal"
			switch x := node.(type) {
			case *ast.FuncDecl:
				body, name = x.Body, x.Name.Name
			case *ast.FuncLit:
				body = x.Body
			}
			if body == nil {
				return true
			}
			n++
			from, to := fset.Position(node.Pos()), fset.Position(body.Rbrace)
			if lines := to.Line - from.Line + 1; lines > maxFuncLines {
				t.Errorf("%s:%d: %s is %d lines, over %d: split it along its steps", rel(path), from.Line, name, lines, maxFuncLines)
			}
			return true
		})
	})
	if n < 1000 {
		t.Fatalf("checked only %d functions: the scan is broken", n)
	}
}
