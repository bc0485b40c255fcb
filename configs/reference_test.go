package configs

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/reference/config.md")

const referencePath = "../docs/reference/config.md"

// TestConfigReference checks that docs/reference/config.md is what the
// config structs say: every key, its type, its default and its comment.
// `make docs` (go test ./configs -run TestConfigReference -update) rewrites it.
func TestConfigReference(t *testing.T) {
	got, err := configReference("config.go")
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll("../docs/reference", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(referencePath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(referencePath)
	if err != nil {
		t.Fatalf("%v: run `make docs`", err)
	}
	if string(want) != got {
		t.Fatalf("%s is stale: run `make docs` and commit it", referencePath)
	}
}

// configReference renders the keys of Config, read from the source file
// for their comments and from Default for their defaults.
func configReference(src string) (string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, src, nil, parser.ParseComments)
	if err != nil {
		return "", err
	}
	structs := map[string]*ast.StructType{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			if ts, ok := s.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
		}
	}
	var b strings.Builder
	b.WriteString("# Configuration keys\n\n")
	b.WriteString("Generated from `configs/config.go` by `make docs`; do not edit. One YAML file per\n")
	b.WriteString("node; unknown keys are an error. A key that is absent or null keeps its default.\n")
	b.WriteString("Durations are Go durations (`200ms`, `1m`); sizes are bytes.\n\n")
	b.WriteString("| key | type | default | meaning |\n|---|---|---|---|\n")
	def := reflect.ValueOf(Default())
	walkReference(&b, structs, structs["Config"], "", def)
	return b.String(), nil
}

func walkReference(b *strings.Builder, structs map[string]*ast.StructType, st *ast.StructType, prefix string, val reflect.Value) {
	for _, fld := range st.Fields.List {
		if len(fld.Names) == 0 || fld.Tag == nil {
			continue
		}
		tag := reflect.StructTag(strings.Trim(fld.Tag.Value, "`")).Get("yaml")
		name := strings.Split(tag, ",")[0]
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		fv := val.FieldByName(fld.Names[0].Name)
		typ := exprString(fld.Type)
		if sub, ok := structs[typ]; ok && typ != "Duration" {
			walkReference(b, structs, sub, key+".", fv)
			continue
		}
		if strings.HasPrefix(typ, "[]") {
			if sub, ok := structs[strings.TrimPrefix(typ, "[]")]; ok {
				fmt.Fprintf(b, "| `%s` | list | | %s |\n", key, doc(fld))
				walkReference(b, structs, sub, key+"[].", reflect.New(fv.Type().Elem()).Elem())
				continue
			}
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", key, typeName(typ), defaultOf(fv), doc(fld))
	}
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return fmt.Sprintf("%T", e)
}

func typeName(t string) string {
	switch t {
	case "Duration":
		return "duration"
	case "int", "int64", "uint64":
		return "integer"
	case "[]string":
		return "list of strings"
	}
	return t
}

func defaultOf(v reflect.Value) string {
	if !v.IsValid() {
		return ""
	}
	if d, ok := v.Interface().(Duration); ok {
		if d.Duration == 0 {
			return ""
		}
		return "`" + d.Duration.String() + "`"
	}
	switch v.Kind() {
	case reflect.String:
		if v.String() == "" {
			return ""
		}
		return "`" + v.String() + "`"
	case reflect.Slice:
		return ""
	}
	return fmt.Sprintf("`%v`", v.Interface())
}

// doc is a field's doc comment and line comment, on one line, without the
// defaults the line comment repeats.
func doc(f *ast.Field) string {
	var parts []string
	if f.Doc != nil {
		parts = append(parts, strings.Join(strings.Fields(f.Doc.Text()), " "))
	}
	if f.Comment != nil {
		parts = append(parts, strings.Join(strings.Fields(f.Comment.Text()), " "))
	}
	s := strings.Join(parts, " ")
	return strings.ReplaceAll(s, "|", "\\|")
}
