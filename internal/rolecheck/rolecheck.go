// Package rolecheck holds the roles a Limiter declares, checks the roles
// the operator's page is given against them, and logs an identity's
// undeclared roles once per value.
package rolecheck

import (
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/slidelimit/slidelimit/role"
)

// maxUndeclaredRoles bounds the undeclared role values a Limiter logs (and
// remembers so as to log each once); maxRoleBytes bounds each, so that
// roles taken from a request cannot grow the Limiter's memory.
const (
	maxUndeclaredRoles = 64
	maxRoleBytes       = 64
)

// Check holds the roles a Limiter's policy declares (WithRoles, or the
// Roles of middleware.WithPolicy) and logs, once per value, a role of a
// caller's identity that is not among them: such a caller is limited as
// one without that role, which a misspelt role in the authentication's
// output would otherwise do silently. It is safe for concurrent use.
type Check struct {
	declared []role.Role // sorted
	log      *slog.Logger

	mu   sync.Mutex
	seen map[string]struct{} // the values logged, cut to maxRoleBytes
	full bool                // maxUndeclaredRoles logged, and said so
}

// New returns the check of the roles declared, logging to log, or nil
// when none are.
func New(declared []role.Role, log *slog.Logger) *Check {
	if len(declared) == 0 {
		return nil
	}
	declared = slices.Clone(declared)
	slices.Sort(declared)
	return &Check{declared: slices.Compact(declared), log: log, seen: map[string]struct{}{}}
}

// List returns the declared roles as the rules' errors list them.
func (c *Check) List() string {
	names := make([]string, len(c.declared))
	for i, r := range c.declared {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}

// Undeclared returns the first of roles that c does not declare, and
// whether there is one.
func (c *Check) Undeclared(roles []role.Role) (role.Role, bool) {
	for _, r := range roles {
		if _, found := slices.BinarySearch(c.declared, r); !found {
			return r, true
		}
	}
	return "", false
}

// Note logs the roles of id, the identity of r, that c does not declare,
// each value once.
func (c *Check) Note(id role.Identity, r *http.Request) {
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
				slog.String("role", key), slog.String("declared", c.List()), slog.String("method", r.Method), slog.String("path", r.URL.Path))
		case logFull:
			c.log.LogAttrs(ctx, slog.LevelWarn, fmt.Sprintf("slidelimit: more than %d undeclared identity roles; no more are logged", maxUndeclaredRoles))
		}
	}
}
