package slidelimit_test

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestREADMEQuickstart checks that the README's first example is the
// program in cmd/quickstart, which the build compiles and vets.
func TestREADMEQuickstart(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile("cmd/quickstart/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("README has no go code block")
	}
	if block != string(prog) {
		t.Errorf("README's first go block differs from cmd/quickstart/main.go:\n%s", block)
	}
}

// TestQuickstartImports checks that the quickstart needs one package of
// this module: the root's options cover what it configures.
func TestQuickstartImports(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "cmd/quickstart/main.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(path, "github.com/slidelimit/slidelimit/") {
			t.Errorf("the quickstart imports %s; it should import only github.com/slidelimit/slidelimit", path)
		}
	}
}
