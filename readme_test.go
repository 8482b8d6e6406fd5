package slidelimit_test

import (
	"os"
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
