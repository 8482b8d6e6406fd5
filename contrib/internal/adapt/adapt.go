// Package adapt holds what the router adapters share: the route scope
// carried in the request context, and running slidelimit's net/http
// middleware inside a router's own chain.
package adapt

import (
	"context"
	"net/http"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
)

type scopeKey struct{}

// NoRoute is the route template of requests no route matched (a 404), so
// that a router-wide limit counts them together instead of failing them.
const NoRoute = "(no route)"

// WithScope returns r carrying the scope "METHOD template", which Scope
// reads back.
func WithScope(r *http.Request, template string) *http.Request {
	if template == "" {
		template = NoRoute
	}
	return r.WithContext(context.WithValue(r.Context(), scopeKey{}, r.Method+" "+template))
}

// Scope is the scope function (middleware.WithScopeFunc) of the
// adapters: the scope WithScope put in r's context.
func Scope(r *http.Request) string {
	s, _ := r.Context().Value(scopeKey{}).(string)
	return s
}

// Middleware builds slidelimit middleware for rulesText whose scope comes
// from Scope unless opts or the group say otherwise.
func Middleware(lim *slidelimit.Limiter, rulesText string, opts []middleware.Option) (func(http.Handler) http.Handler, error) {
	return lim.Middleware(rulesText, append([]middleware.Option{middleware.WithScopeFunc(Scope)}, opts...)...)
}

// Serve runs mw around next on w and r and reports whether mw passed the
// request on: false when it answered itself (429, 503 or 500), so that the
// router stops its chain. next receives the ResponseWriter it must write
// through (with a count: statement, one that records the status) and the
// request.
func Serve(mw func(http.Handler) http.Handler, w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) bool {
	passed := false
	mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		passed = true
		next(w, r)
	})).ServeHTTP(w, r)
	return passed
}
