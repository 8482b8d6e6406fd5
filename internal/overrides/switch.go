package overrides

import (
	"net/http"
	"sync/atomic"

	"github.com/slidelimit/slidelimit/rules"
)

// Switch is a handler whose rule group an override may replace while it
// serves: the request path loads the current handler with one atomic load.
type Switch struct {
	scope string
	code  http.Handler // the handler with the group the code declared
	cur   atomic.Pointer[http.Handler]
	build func(g rules.Group) (http.Handler, error)
}

// NewSwitch returns a Switch of scope serving code until an override of
// scope makes build wrap the handler for the override's group.
func NewSwitch(scope string, code http.Handler, build func(g rules.Group) (http.Handler, error)) *Switch {
	s := &Switch{scope: scope, code: code, build: build}
	s.set(code)
	return s
}

// ServeHTTP serves r with the current handler.
func (s *Switch) ServeHTTP(w http.ResponseWriter, r *http.Request) { (*s.cur.Load()).ServeHTTP(w, r) }

// Build returns the handler s would serve under an override with group g,
// without installing it.
func (s *Switch) Build(g rules.Group) (http.Handler, error) { return s.build(g) }

func (s *Switch) set(h http.Handler) { s.cur.Store(&h) }

// Current returns the handler s serves now: the code's, or an override's.
func (s *Switch) Current() http.Handler { return *s.cur.Load() }
