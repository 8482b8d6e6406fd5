package lua

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.Contains(MultiWindow(), "\n-- multi_window.lua") || !strings.Contains(MultiWindow(), "\nreturn reply\n") {
		t.Fatalf("MultiWindow() does not hold the script: %.60q", MultiWindow())
	}
}

func TestEmbeddedRenew(t *testing.T) {
	if !strings.Contains(Renew(), "\n-- renew.lua") || !strings.Contains(Renew(), "return reply") {
		t.Fatalf("Renew() does not hold the script: %.60q", Renew())
	}
}

func TestNumberPrecedesScripts(t *testing.T) {
	for name, src := range map[string]string{"MultiWindow": MultiWindow(), "Renew": Renew()} {
		if !strings.HasPrefix(src, "-- number.lua") {
			t.Errorf("%s does not start with number.lua: %.60q", name, src)
		}
	}
}

func TestEmbeddedRules(t *testing.T) {
	for name, src := range map[string]string{"SetRules": SetRules(), "LoadRules": LoadRules()} {
		if !strings.HasPrefix(src, "-- ") || !strings.Contains(src, "KEYS[2]") {
			t.Errorf("%s does not hold its script: %.60q", name, src)
		}
	}
}

// TestNoExportedVariables: an importer cannot change a script's text, so
// the text the engine sends is the one its SHA1 was computed from.
func TestNoExportedVariables(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					if n.IsExported() {
						t.Errorf("%s: exported variable %s", fset.Position(n.Pos()), n.Name)
					}
				}
			}
		}
	}
}
