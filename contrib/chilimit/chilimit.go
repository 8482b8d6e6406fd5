// Package chilimit gives slidelimit the route template of go-chi/chi as
// the windows' scope. chi (v5.1 and later) sets http.Request path values
// itself, so param(name) rules need nothing more.
//
// Use the middleware inline, after chi has matched the route, so that the
// template is complete:
//
//	mw, err := lim.Middleware("param(id):10/min", middleware.WithScopeFunc(chilimit.Scope))
//	r.With(mw).Get("/files/{id}", files)
//
// In a router-wide r.Use, before routing, chi knows only the part of the
// template matched so far.
package chilimit

import (
	"net/http"

	"github.com/go-chi/chi/v5"
)

// Scope is a scope function for middleware.WithScopeFunc: the request's
// method and chi route template, "GET /files/{id}", or "" outside a chi router.
func Scope(r *http.Request) string {
	rc := chi.RouteContext(r.Context())
	if rc == nil {
		return ""
	}
	return r.Method + " " + rc.RoutePattern()
}
