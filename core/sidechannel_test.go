package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoContextValuesBelowTheGate: what a layer of the check path needs
// arrives as data (the request, the resolver's answer), never as a value
// hidden in a context.Context. Only package gate puts values into one (the
// tenant and the cost report, its API); no other non-test file of this
// module calls context.WithValue, and no package of init-time hooks
// rewires what New was given.
func TestNoContextValuesBelowTheGate(t *testing.T) {
	if _, err := os.Stat(filepath.Join("internal", "hooks")); !os.IsNotExist(err) {
		t.Errorf("core/internal/hooks exists (%v): a limiter's behaviour must come from what New is given", err)
	}
	found := contextWithValueCalls(t, ".", "gate")
	for _, at := range found {
		t.Errorf("%s: context.WithValue below the gate: pass what a layer needs as data", at)
	}
	if t.Failed() {
		return
	}
	// the check can fail: package gate does call it
	if gate := contextWithValueCalls(t, "gate"); len(gate) == 0 {
		t.Fatal("found no context.WithValue in package gate (the tenant, the cost report): the scan is blind")
	}
}

// contextWithValueCalls returns the position of every call of
// context.WithValue (under whatever name "context" is imported) in the
// non-test Go files under root, but in the directories skip (relative to
// root).
func contextWithValueCalls(t *testing.T, root string, skip ...string) []string {
	t.Helper()
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			for _, s := range skip {
				if path == filepath.Join(root, s) {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names := map[string]bool{}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "context" {
				name := "context"
				if imp.Name != nil {
					name = imp.Name.Name
				}
				names[name] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "WithValue" {
				if id, ok := sel.X.(*ast.Ident); ok && names[id.Name] {
					found = append(found, fset.Position(sel.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
