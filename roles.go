package slidelimit

import (
	"net/http"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/rolecheck"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// middlewareParts returns what opts, the Limiter's middleware options,
// configure for every transport; their errors are the middlewares'.
func middlewareParts(opts []middleware.Option) *lifecycle.Transport {
	var t lifecycle.Transport
	middleware.ConfigureTransport(&t, opts...)
	return &t
}

// newRoleCheck returns the check of the roles that opts, the Limiter's
// middleware options, declare, logging to their logger, or nil when they
// declare none.
func newRoleCheck(opts []middleware.Option) *rolecheck.Check {
	t := middlewareParts(opts)
	return rolecheck.New(t.Policy.Roles, t.Logger)
}

// identify wraps h so that the request carries the identity the
// WithIdentity function finds, and an identity role the Limiter's policy
// does not declare is logged (once per value). Without either it returns
// h.
func (l *Limiter) identify(h http.Handler) http.Handler {
	fn, check := l.ident, l.roles
	if fn == nil && check == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fn != nil {
			if user, names := fn(r); user != "" || len(names) > 0 {
				roles := make([]role.Role, len(names))
				for i, n := range names {
					roles[i] = role.Role(n)
				}
				r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: user, Roles: roles}))
			}
		}
		if check != nil {
			if id, ok := role.FromContext(r.Context()); ok {
				check.Note(id, r)
			}
		}
		h.ServeHTTP(w, r)
	})
}
