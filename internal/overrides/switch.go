package overrides

import (
	"net/http"
	"sync/atomic"

	"github.com/slidelimit/slidelimit/rules"
)

// Switch holds what a scope switches to, a T built from its rule group
// (a route's handler, a throttle's plan), which an override may replace
// while it serves: a reader loads the current T with one atomic load.
type Switch[T any] struct {
	scope string
	code  T // built from the group the code declared
	cur   atomic.Pointer[T]
	build func(g rules.Group) (T, error)
}

// NewSwitch returns a Switch of scope holding code until an override of
// scope makes build build the T of the override's group.
func NewSwitch[T any](scope string, code T, build func(g rules.Group) (T, error)) *Switch[T] {
	s := &Switch[T]{scope: scope, code: code, build: build}
	s.cur.Store(&code)
	return s
}

// Current returns what s holds now: the code's, or an override's.
func (s *Switch[T]) Current() T { return *s.cur.Load() }

// Check builds what s would hold under an override with group g, without
// installing it, and returns the error of building it.
func (s *Switch[T]) Check(g rules.Group) error {
	_, err := s.build(g)
	return err
}

// Scope returns the scope s follows.
func (s *Switch[T]) Scope() string { return s.scope }

// apply builds and installs the T of g.
func (s *Switch[T]) apply(g rules.Group) error {
	v, err := s.build(g)
	if err != nil {
		return err
	}
	s.cur.Store(&v)
	return nil
}

// reset installs the code's T again.
func (s *Switch[T]) reset() { s.cur.Store(&s.code) }

// A Follower follows the overrides of its scope: a Switch of any T. The
// Store holds Followers.
type Follower interface {
	Scope() string
	Check(g rules.Group) error
	apply(g rules.Group) error
	reset()
}

// Route is a Switch of a route's handlers: it serves each request with
// the current one.
type Route struct{ *Switch[http.Handler] }

// ServeHTTP serves r with the current handler.
func (r Route) ServeHTTP(w http.ResponseWriter, req *http.Request) { (*r.cur.Load()).ServeHTTP(w, req) }
