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

// TestREADMEFirstHour checks what a new user needs from the README besides
// the quickstart: the test command CI runs, with how long it takes, and
// how to build against a local copy of the module.
func TestREADMEFirstHour(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var cmd string
	for line := range strings.Lines(string(readme)) {
		if strings.HasPrefix(line, "go test ") {
			cmd = line
			break
		}
	}
	if cmd == "" {
		t.Fatal("the README has no test command")
	}
	if !strings.Contains(cmd, "minutes on 2 cores") {
		t.Errorf("the README's test command does not say how long it takes: %s", cmd)
	}
	args, _, _ := strings.Cut(strings.TrimPrefix(cmd, "go test "), "#")
	for _, a := range strings.Fields(args) {
		if !strings.Contains(string(ci), " "+a) {
			t.Errorf("the README's test command has %s, which .ci/run does not run", a)
		}
	}
	module, _, _ := strings.Cut(strings.TrimPrefix(string(mod), "module "), "\n")
	for _, want := range []string{"go mod edit -replace " + module + "=../", "replace " + module + " => ../", "go mod tidy"} {
		if !strings.Contains(string(readme), want) {
			t.Errorf("the README does not say %q", want)
		}
	}
}
