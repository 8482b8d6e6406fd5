package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.Contains(MultiWindow(), "\n-- multi_window.lua") || !strings.HasSuffix(MultiWindow(), "\nreturn run(KEYS, ARGV)\n") {
		t.Fatalf("MultiWindow() does not hold the script: %.60q", MultiWindow())
	}
}

// TestLibrary: the Function form is the EVAL form's text, named by the
// EVALSHA hash, with run registered instead of called.
func TestLibrary(t *testing.T) {
	h := sha1.Sum([]byte(MultiWindow()))
	name := "slidelimit_" + hex.EncodeToString(h[:])
	if MultiWindowFunction() != name {
		t.Fatalf("MultiWindowFunction() = %q, want %q", MultiWindowFunction(), name)
	}
	lib := MultiWindowLibrary()
	head := "#!lua name=" + name + "\n"
	tail := "redis.register_function('" + name + "', run)\n"
	if !strings.HasPrefix(lib, head) || !strings.HasSuffix(lib, tail) {
		t.Fatalf("MultiWindowLibrary() lacks its shebang or registration: %.80q ... %q", lib, lib[max(0, len(lib)-80):])
	}
	body := strings.TrimSuffix(strings.TrimPrefix(lib, head), tail)
	if body+"return run(KEYS, ARGV)\n" != MultiWindow() {
		t.Fatal("MultiWindowLibrary() and MultiWindow() hold different scripts")
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
