// Command exports prints how many identifiers the public packages of
// slidelimit export, per package and in total, as issue 41 counts them:
// exported top-level names (functions, types, variables, constants),
// exported methods of exported types, and the exported methods of
// exported interfaces. Test files are not counted. The public packages
// are every package of the repository, the contrib module's included,
// that is not a command and not under an internal, testdata or hidden
// directory. Run it from the repository root:
//
//	go run ./internal/cmd/exports
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// budget is the most names one public package may export (issue 49).
const budget = 185

// list makes count print each name it counts, as package.Name or
// package.Type.Method.
var list bool

// counts is what one package exports.
type counts struct {
	TopLevel   int // functions, types, variables and constants
	Methods    int // methods of exported types
	Interfaces int // methods of exported interface types
}

func (c counts) total() int { return c.TopLevel + c.Methods + c.Interfaces }

func main() {
	root := flag.String("root", ".", "the repository root")
	flag.BoolVar(&list, "list", false, "also print every counted name")
	flag.Parse()
	if err := run(*root, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(root string, w io.Writer) error {
	pkgs, err := packages(root)
	if err != nil {
		return err
	}
	total := 0
	var over []string
	fmt.Fprintf(w, "%-20s %5s %9s %7s %10s\n", "package", "total", "top-level", "methods", "interfaces")
	for _, p := range pkgs {
		c, err := count(filepath.Join(root, p))
		if err != nil {
			return err
		}
		name := p
		if p == "." {
			name = "root"
		}
		fmt.Fprintf(w, "%-20s %5d %9d %7d %10d\n", name, c.total(), c.TopLevel, c.Methods, c.Interfaces)
		total += c.total()
		if c.total() > budget {
			over = append(over, name)
		}
	}
	fmt.Fprintf(w, "%-20s %5d\n", "total", total)
	if len(over) > 0 {
		return fmt.Errorf("exports: above the budget of %d per package: %s", budget, strings.Join(over, ", "))
	}
	return nil
}

// packages returns the directories of the public packages under root,
// "." for the root package, in lexical order: every directory with a
// non-test Go file of a package other than main, skipping internal,
// testdata, hidden and underscore directories and what they hold.
func packages(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		public, err := library(path)
		if err != nil || !public {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("exports: %w", err)
	}
	return out, nil
}

// library reports whether dir holds a non-test Go file of a package other
// than main.
func library(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly)
		if err != nil {
			return false, err
		}
		if f.Name.Name != "main" {
			return true, nil
		}
	}
	return false, nil
}

// count counts the exports of the package in dir, leaving out test files
// and files of other packages (a directory holds one package and its
// external tests).
func count(dir string) (counts, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return counts{}, fmt.Errorf("exports: %w", err)
	}
	var c counts
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return counts{}, fmt.Errorf("exports: %w", err)
		}
		if f.Name.Name == "main" || strings.HasSuffix(f.Name.Name, "_test") {
			continue
		}
		add(&c, f, func(name string) {
			if list {
				fmt.Printf("  %s.%s\n", filepath.Base(dir), name)
			}
		})
	}
	return c, nil
}

// add counts the exports of file f into c, calling seen with each name.
func add(c *counts, f *ast.File, seen func(string)) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				c.TopLevel++
				seen(d.Name.Name)
			} else if r := receiver(d.Recv); r.IsExported() {
				c.Methods++
				seen(r.Name + "." + d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							c.TopLevel++
							seen(n.Name)
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					c.TopLevel++
					seen(s.Name.Name)
					if it, ok := s.Type.(*ast.InterfaceType); ok {
						for _, m := range it.Methods.List {
							// Embedded interfaces have no names.
							for _, n := range m.Names {
								if n.IsExported() {
									c.Interfaces++
									seen(s.Name.Name + "." + n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
}

// receiver returns the name of a method's receiver type, without pointer
// or type parameters.
func receiver(fl *ast.FieldList) *ast.Ident {
	t := fl.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.Ident:
			return x
		default:
			return ast.NewIdent("")
		}
	}
}
