package lua

import (
	"crypto/sha1"
	"encoding/hex"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbedded(t *testing.T) {
	if !strings.Contains(Script("multi_window"), "\n-- multi_window.lua") || !strings.HasSuffix(Script("multi_window"), "\nreturn run(KEYS, ARGV)\n") {
		t.Fatalf(`Script("multi_window") does not hold the script: %.60q`, Script("multi_window"))
	}
}

// TestLibrary: the Function form is the EVAL form's text, named by the
// EVALSHA hash, with run registered instead of called.
func TestLibrary(t *testing.T) {
	h := sha1.Sum([]byte(Script("multi_window")))
	name := "slidelimit_" + hex.EncodeToString(h[:])
	fn, lib := Library()
	if fn != name {
		t.Fatalf("Library() names %q, want %q", fn, name)
	}
	head := "#!lua name=" + name + "\n"
	tail := "redis.register_function('" + name + "', run)\n"
	if !strings.HasPrefix(lib, head) || !strings.HasSuffix(lib, tail) {
		t.Fatalf("Library() lacks its shebang or registration: %.80q ... %q", lib, lib[max(0, len(lib)-80):])
	}
	body := strings.TrimSuffix(strings.TrimPrefix(lib, head), tail)
	if body+"return run(KEYS, ARGV)\n" != Script("multi_window") {
		t.Fatal(`Library() and Script("multi_window") hold different scripts`)
	}
}

func TestEmbeddedRenew(t *testing.T) {
	if !strings.Contains(Script("renew"), "\n-- renew.lua") || !strings.Contains(Script("renew"), "return reply") {
		t.Fatalf(`Script("renew") does not hold the script: %.60q`, Script("renew"))
	}
}

func TestNumberPrecedesScripts(t *testing.T) {
	for name, src := range map[string]string{"multi_window": Script("multi_window"), "renew": Script("renew")} {
		if !strings.HasPrefix(src, "-- number.lua") {
			t.Errorf("%s does not start with number.lua: %.60q", name, src)
		}
	}
}

// TestUnknownScript: a name that is no script's gives no source.
func TestUnknownScript(t *testing.T) {
	for _, name := range []string{"", "number", "multi_window.lua", "mw_op"} {
		if src := Script(name); src != "" {
			t.Errorf("Script(%q) = %.40q, want \"\"", name, src)
		}
	}
}

func TestEmbeddedRules(t *testing.T) {
	for name, src := range map[string]string{"set_rules": Script("set_rules"), "load_rules": Script("load_rules")} {
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

// TestJoined: the multi-window script is number.lua, multi_window.lua and
// every mw_*.lua file once, in the order its header lists them, with every
// constant's placeholder replaced.
func TestJoined(t *testing.T) {
	src := Script("multi_window")
	if i := strings.Index(src, "${"); i >= 0 {
		t.Errorf("placeholder left in the joined script: %q", src[i:min(len(src), i+24)])
	}
	files, err := filepath.Glob("mw_*.lua")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(multiWindowParts) {
		t.Errorf("lua/ has %d parts %v, lua.go joins %d %v", len(files), files, len(multiWindowParts), multiWindowParts)
	}
	header, err := os.ReadFile("multi_window.lua")
	if err != nil {
		t.Fatal(err)
	}
	last := 0
	for _, name := range append([]string{"number.lua", "multi_window.lua"}, files...) {
		head := "-- " + name + ":"
		if n := strings.Count(src, "\n"+head) + boolInt(strings.HasPrefix(src, head)); n != 1 {
			t.Errorf("%s is in the joined script %d times, want once", name, n)
		}
	}
	for _, name := range multiWindowParts {
		i := strings.Index(string(header), "--   "+name+" ")
		if i < last {
			t.Errorf("multi_window.lua's header does not list %s in the order lua.go joins it", name)
		}
		last = i
		if !strings.Contains(src, "\n-- "+name+":") {
			t.Errorf("%s is not in the joined script", name)
		}
	}
	for name := range scriptConstants {
		if !strings.Contains(string(header), name) {
			t.Errorf("multi_window.lua's header does not name the constant %s", name)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLuaFunctionLength: no function of the scripts is over 80 lines,
// counted from a line starting with "function" or "local function" to the
// next line that is "end", as written at column 0.
func TestLuaFunctionLength(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		start, fn := 0, ""
		for i, line := range strings.Split(string(src), "\n") {
			switch {
			case strings.HasPrefix(line, "function ") || strings.HasPrefix(line, "local function "):
				start, fn = i+1, line
			case line == "end" && start > 0:
				if n := i + 1 - start; n > 80 {
					t.Errorf("%s:%d: %s is %d lines, over 80", name, start, fn, n)
				}
				start = 0
			}
		}
	}
}
