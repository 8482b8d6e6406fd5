// Package p is the fixture of TestCountFixture: the comments say what
// counts.
package p

import "io"

// Two constants of three.
const (
	A = 1
	B = 2
	c = 3
)

// One variable.
var V, w = 1, 2

// One function; f is not exported.
func F() {}

func f() {}

// T is a type with two exported methods of three.
type T struct{}

func (T) M()       {}
func (*T) N()      {}
func (T) m()       {}
func NewT() *T     { return nil }
func (g[X]) Gen()  {}
func (G[X]) Gen2() {}

type g[X any] struct{}

// G is generic, with one method.
type G[X any] struct{}

// I has two exported methods and embeds io.Reader (not counted).
type I interface {
	io.Reader
	Get() int
	Put(int)
	hidden()
}

type hiddenI interface{ Exported() }
