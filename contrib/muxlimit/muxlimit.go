// Package muxlimit rate-limits gorilla/mux routes with slidelimit.
//
// The windows' scope is the request's method and the route's path template
// ("GET /files/{id}"), so every path of a route shares its windows; mux
// variables are copied into http.Request.SetPathValue, so param(name)
// rules count them. Add the middleware with Router.Use or Route.Use, which
// gorilla/mux runs after matching.
package muxlimit

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/adapt"
	"github.com/slidelimit/slidelimit/middleware"
)

// New returns gorilla/mux middleware enforcing the rule group rulesText
// with lim. opts are added to lim's middleware options (a WithScope or
// WithScopeFunc there, or a scope: statement, replaces the route scope).
// It fails as slidelimit.Limiter.Middleware does.
func New(lim *slidelimit.Limiter, rulesText string, opts ...middleware.Option) (mux.MiddlewareFunc, error) {
	mw, err := adapt.Middleware(lim, rulesText, opts)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range mux.Vars(r) {
				r.SetPathValue(k, v)
			}
			adapt.Serve(mw, w, adapt.WithScope(r, Template(r)), next.ServeHTTP)
		})
	}, nil
}

// Template returns the path template of the route r matched, or "".
func Template(r *http.Request) string {
	if rt := mux.CurrentRoute(r); rt != nil {
		if t, err := rt.GetPathTemplate(); err == nil {
			return t
		}
	}
	return ""
}
