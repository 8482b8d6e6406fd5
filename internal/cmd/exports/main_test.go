package main

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCountFixture counts a package whose comments say what counts.
func TestCountFixture(t *testing.T) {
	got, err := count("testdata/p")
	if err != nil {
		t.Fatal(err)
	}
	// A, B, V, F, T, NewT, G, I; M, N, Gen2; Get, Put.
	if want := (counts{TopLevel: 8, Methods: 3, Interfaces: 2}); got != want {
		t.Errorf("count = %+v, want %+v", got, want)
	}
}

// TestCountRepository runs the command on the repository and checks each
// package's line against go/doc's view of the package, and the total
// against the sum of the lines.
func TestCountRepository(t *testing.T) {
	var out bytes.Buffer
	if err := run("../../..", &out); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	sc.Scan() // the header
	sum, lines := 0, 0
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if f[0] == "total" {
			if n != sum {
				t.Errorf("total %d, but the packages sum to %d", n, sum)
			}
			continue
		}
		lines++
		sum += n
		parts := 0
		for _, s := range f[2:] {
			v, _ := strconv.Atoi(s)
			parts += v
		}
		if parts != n {
			t.Errorf("%s: total %d, parts sum to %d", f[0], n, parts)
		}
		dir := f[0]
		if dir == "root" {
			dir = "."
		}
		if want := docCount(t, filepath.Join("../../..", dir)); n != want {
			t.Errorf("%s: %d exports, go/doc finds %d", f[0], n, want)
		}
	}
	pkgs, err := packages("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if lines != len(pkgs) {
		t.Errorf("%d package lines, want %d:\n%s", lines, len(pkgs), out.String())
	}
}

// TestPackagesAreGoList checks the packages counted against go list's view
// of both modules: every package that is not a command and not internal.
func TestPackagesAreGoList(t *testing.T) {
	got, err := packages("../../..")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range []struct{ dir, prefix string }{
		{"../../..", "github.com/slidelimit/slidelimit"},
		{"../../../contrib", "github.com/slidelimit/slidelimit"},
	} {
		cmd := exec.Command("go", "list", "-f", "{{if ne .Name \"main\"}}{{.ImportPath}}{{end}}", "./...")
		cmd.Dir = m.dir
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", m.dir, err)
		}
		for _, p := range strings.Fields(string(b)) {
			if strings.Contains(p+"/", "/internal/") {
				continue
			}
			if p = strings.TrimPrefix(strings.TrimPrefix(p, m.prefix), "/"); p == "" {
				p = "."
			}
			want = append(want, p)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("counted %q\ngo list %q", got, want)
	}
	for _, p := range []string{"lua", "contrib/chilimit", "contrib/echolimit", "contrib/ginlimit", "contrib/muxlimit", "contrib/otellimit", "contrib/promlimit"} {
		if !slices.Contains(got, p) {
			t.Errorf("%s is not counted", p)
		}
	}
}

// docCount counts the exports of the package in dir with go/doc, which
// drops what is not exported on its own.
func docCount(t *testing.T, dir string) int {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if f.Name.Name != "main" {
				files = append(files, f)
			}
		}
	}
	p, err := doc.NewFromFiles(fset, files, "example.com/p")
	if err != nil {
		t.Fatal(err)
	}
	names := func(vs []*doc.Value) (n int) {
		for _, v := range vs {
			n += len(v.Names)
		}
		return n
	}
	n := names(p.Consts) + names(p.Vars) + len(p.Funcs)
	for _, ty := range p.Types {
		n += 1 + names(ty.Consts) + names(ty.Vars) + len(ty.Funcs)
		for _, m := range ty.Methods {
			if m.Level == 0 && m.Recv != "" && !strings.Contains(m.Orig, ".") {
				n++
			}
		}
		for _, s := range ty.Decl.Specs {
			if it, ok := s.(*ast.TypeSpec).Type.(*ast.InterfaceType); ok {
				for _, m := range it.Methods.List {
					for _, id := range m.Names {
						if id.IsExported() {
							n++
						}
					}
				}
			}
		}
	}
	return n
}
