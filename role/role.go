// Package role carries who made a request — a user id and roles, as
// established by the service's own authentication — and resolves which
// rules of a rule group apply to that identity.
//
// Identity enters a request only through NewContext, called by the
// service's authentication code; slidelimit never reads roles or users from
// client-supplied headers.
//
// # Precedence
//
// For a group g and an identity holding several roles, Policy.Resolve
// decides in this order:
//
//  1. If the identity holds any role listed in g.Exempt, the request is
//     exempt: no rule applies and Redis is never called.
//  2. Otherwise, if the identity holds the role of one or more of g's
//     role(...)= statements, the first such role's rules in the group's
//     declaration order replace the default rules.
//  3. Otherwise the group's default rules apply.
//
// Then, if the identity holds a role in Policy.ByIP (an account shared by
// several people), the user rules chosen in 2 or 3 count the client IP
// instead of the user id, unless the chosen rules are that very role's:
// role(admin)=user:5/min on a route says how admins are counted there.
//
// A request without identity gets the default rules; the middleware counts
// its user rules by client IP.
package role

import (
	"context"
	"slices"

	"github.com/slidelimit/slidelimit/rules"
)

// Role is an authorization role such as "admin", as named in the rule
// language's exempt: and role(...)= statements.
type Role string

// Identity is the authenticated caller of a request. The zero value is an
// anonymous caller.
type Identity struct {
	// User is the stable user id; empty for a caller without one.
	User string
	// Roles are the caller's roles, in no particular order.
	Roles []Role
}

// Has reports whether id holds role r.
func (id Identity) Has(r Role) bool { return slices.Contains(id.Roles, r) }

type ctxKey struct{}

// NewContext returns a copy of ctx carrying id. Authentication middleware
// calls it once the caller is known.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the identity stored in ctx by NewContext and whether
// there was one.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(ctxKey{}).(Identity)
	return id, ok
}

// Policy holds the service-wide role rules that complement each route's
// group. The zero value adds nothing to the groups and checks no role
// names. A Policy must not be
// modified while Resolve runs.
type Policy struct {
	// ByIP lists roles whose accounts are shared by several people, such as
	// an admin account: for their requests the user rules of a group
	// count the client IP rather than the user id, so that one person's
	// bursts do not lock out the others. A route's own role(...)= rules
	// for the role take precedence.
	ByIP []Role
	// Roles declares the roles that exist. When it is not empty, a group
	// that names any other role in exempt: or role(...)= is an error (see
	// Check), reported by every transport when it builds the group: struct
	// tags, Handle, Middleware, SetRules and grpclimit. When it is empty,
	// role names are not checked, and a misspelt one is a role nobody
	// holds: exempt:superadmn exempts no one.
	Roles []Role
}

// Check returns an error when p declares Roles and g names a role that is
// not among them; the error is a *rules.Error at the role's offset in
// g.String() (package slidelimit reports it in the text as written),
// naming the role and listing the declared ones. It returns nil when p
// declares no roles.
func (p Policy) Check(g rules.Group) error {
	if len(p.Roles) == 0 {
		return nil
	}
	declared := make([]string, len(p.Roles))
	for i, r := range p.Roles {
		declared[i] = string(r)
	}
	return g.CheckRoles(declared)
}

// Resolution is the outcome of Policy.Resolve for one request.
type Resolution struct {
	// Exempt reports that no rule applies.
	Exempt bool
	// Role is the role whose rules were chosen; empty when the group's
	// defaults apply.
	Role Role
	// Rules are the rules to apply; they are shared with the group
	// and must not be modified.
	Rules []rules.Rule
	// ByIP reports that user rules count the client IP instead of the
	// user id.
	ByIP bool
}

// Resolve returns the rules of g that apply to a request by id, following
// the precedence in the package documentation. It does not allocate.
func (p Policy) Resolve(g rules.Group, id Identity) Resolution {
	for _, r := range id.Roles {
		if slices.Contains(g.Exempt, string(r)) {
			return Resolution{Exempt: true}
		}
	}
	res := Resolution{Rules: g.Rules}
	for _, rr := range g.RoleRules {
		if id.Has(Role(rr.Role)) {
			res = Resolution{Role: Role(rr.Role), Rules: rr.Rules}
			break
		}
	}
	for _, r := range p.ByIP {
		// A route's rules for the shared role itself say how that role
		// is counted on this route; any other choice of rules still
		// belongs to a shared account.
		if r != res.Role && id.Has(r) {
			res.ByIP = true
			break
		}
	}
	return res
}
