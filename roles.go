package slidelimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// maxUndeclaredRoles bounds the undeclared role values a Limiter logs (and
// remembers so as to log each once); maxRoleBytes bounds each, so that
// roles taken from a request cannot grow the Limiter's memory.
const (
	maxUndeclaredRoles = 64
	maxRoleBytes       = 64
)

// roleCheck holds the roles a Limiter's policy declares (WithRoles, or the
// Roles of middleware.WithPolicy) and logs, once per value, a role of a
// caller's identity that is not among them: such a caller is limited as
// one without that role, which a misspelt role in the authentication's
// output would otherwise do silently. It is safe for concurrent use.
type roleCheck struct {
	declared []role.Role // sorted
	log      *slog.Logger

	mu   sync.Mutex
	seen map[string]struct{} // the values logged, cut to maxRoleBytes
	full bool                // maxUndeclaredRoles logged, and said so
}

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
func newRoleCheck(opts []middleware.Option) *roleCheck {
	t := middlewareParts(opts)
	if len(t.Policy.Roles) == 0 {
		return nil
	}
	declared := slices.Clone(t.Policy.Roles)
	slices.Sort(declared)
	return &roleCheck{declared: slices.Compact(declared), log: t.Logger, seen: map[string]struct{}{}}
}

// list returns the declared roles as the rules' errors list them.
func (c *roleCheck) list() string {
	names := make([]string, len(c.declared))
	for i, r := range c.declared {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// undeclared returns the first of roles that c does not declare, and
// whether there is one.
func (c *roleCheck) undeclared(roles []role.Role) (role.Role, bool) {
	for _, r := range roles {
		if _, found := slices.BinarySearch(c.declared, r); !found {
			return r, true
		}
	}
	return "", false
}

// note logs the roles of id, the identity of r, that c does not declare,
// each value once.
func (c *roleCheck) note(id role.Identity, r *http.Request) {
	ctx := r.Context()
	for _, ro := range id.Roles {
		if _, found := slices.BinarySearch(c.declared, ro); found {
			continue
		}
		key := string(ro)
		if len(key) > maxRoleBytes {
			key = key[:maxRoleBytes]
		}
		const (
			quiet = iota
			logRole
			logFull
		)
		action := quiet
		c.mu.Lock()
		if _, seen := c.seen[key]; !seen && !c.full {
			if len(c.seen) < maxUndeclaredRoles {
				c.seen[strings.Clone(key)] = struct{}{} // not the caller's whole string
				action = logRole
			} else {
				c.full = true
				action = logFull
			}
		}
		c.mu.Unlock()
		switch action {
		case logRole:
			c.log.LogAttrs(ctx, slog.LevelWarn, "slidelimit: identity role not declared; the caller is limited as one without it",
				slog.String("role", key), slog.String("declared", c.list()), slog.String("method", r.Method), slog.String("path", r.URL.Path))
		case logFull:
			c.log.LogAttrs(ctx, slog.LevelWarn, fmt.Sprintf("slidelimit: more than %d undeclared identity roles; no more are logged", maxUndeclaredRoles))
		}
	}
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
				check.note(id, r)
			}
		}
		h.ServeHTTP(w, r)
	})
}
