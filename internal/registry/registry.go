// Package registry keeps the rule groups a Limiter registered, by scope,
// and builds from them the engine requests of Peek and Reset and the
// operator page's list of routes.
package registry

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Causes of input that names no windows, which the root package reports
// as ConfigErrors of kind "scope" and "limiter".
var (
	ErrUnknownScope = errors.New("slidelimit: unknown scope")
	ErrUnknownRule  = errors.New("slidelimit: unknown limiter")
)

// entry is a group wrapped by Register, Handle, Middleware or
// Limiter.Throttle.
type entry struct {
	// scope is the group's scope, or "" when it is only known per request
	// (Middleware without a scope: statement).
	scope string
	group rules.Group
	// opts are the options the middleware was built with; they decide how
	// values map to subjects (middleware.WithIPv6Prefix and WithPolicy).
	opts []middleware.Option
}

// InForce returns the group of the rule override of a scope in force, if
// any; InForceAll all of them, by scope.
type InForce interface {
	InForce(scope string) (rules.Group, bool)
	InForceAll() map[string]rules.Group
}

// Registry holds the groups of one Limiter. It is safe for concurrent use.
type Registry struct {
	opts []middleware.Option // the Limiter's middleware options
	ov   InForce             // nil with overrides off

	mu     sync.RWMutex
	groups []entry // in registration order
}

// New returns an empty Registry of a Limiter with middleware options
// opts, following the overrides of ov (nil: none).
func New(opts []middleware.Option, ov InForce) *Registry {
	return &Registry{opts: opts, ov: ov}
}

// Add records g with the options its middleware was built with: the
// Limiter's, then opts.
func (r *Registry) Add(scope string, g rules.Group, opts []middleware.Option) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = append(r.groups, entry{scope: scope, group: g, opts: append(slices.Clip(r.opts), opts...)})
}

// Request builds the engine request that Peek and Reset use: per stored
// subject, one check with the union of the windows of every rule with
// the ID in the scope. value is the raw value the rule counts or, with
// byIP, a client address.
func (r *Registry) Request(scope, ruleID, value string, byIP bool) (engine.Request, error) {
	if byIP {
		if id, ok := ParseRuleID(ruleID); ok && id.Kind == rules.Global {
			return engine.Request{}, fmt.Errorf("slidelimit: %w: a global limiter never counts by client IP", lifecycle.ErrSubject)
		}
	}
	return r.request(scope, ruleID, func(kind rules.Kind, g *entry) (string, error) {
		if byIP {
			kind = rules.IP
		}
		return middleware.Subject(kind, value, g.opts...)
	})
}

// Stored is Request for a subject as the engine stores it, as the denial
// tallies report it (internal/tally): the middleware's encoding of a
// value, or its stored hash (hashed). It makes one check, for that
// subject whatever the groups' options.
func (r *Registry) Stored(scope, ruleID, stored string, hashed bool) (engine.Request, error) {
	if hashed && !keyparts.IsStoredHash(stored) {
		return engine.Request{}, fmt.Errorf("slidelimit: %w: %q is not a stored hash", lifecycle.ErrSubject, stored)
	}
	req, err := r.request(scope, ruleID, func(rules.Kind, *entry) (string, error) { return stored, nil })
	for i := range req.Checks {
		req.Checks[i].Hashed = hashed
	}
	return req, err
}

// inScope returns the entries that may count in scope: its own, those
// whose scope is known only per request, and its override in force.
func (r *Registry) inScope(scope string) []*entry {
	var out []*entry
	for i := range r.groups {
		if g := &r.groups[i]; g.scope == scope || g.scope == "" {
			out = append(out, g)
		}
	}
	if r.ov != nil {
		// An override in force counts in the scope's keys too.
		if g, ok := r.ov.InForce(scope); ok {
			out = append(out, &entry{scope: scope, group: g, opts: r.opts})
		}
	}
	return out
}

// request is Request with subjectOf, which maps the value to the stored
// subject of a group's rule of kind.
func (r *Registry) request(scope, ruleID string, subjectOf func(rules.Kind, *entry) (string, error)) (engine.Request, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	inScope := r.inScope(scope)
	if scope == "" || len(inScope) == 0 {
		return engine.Request{}, fmt.Errorf("%w %q", ErrUnknownScope, scope)
	}
	id, ok := ParseRuleID(ruleID)
	if !ok {
		return engine.Request{}, fmt.Errorf("%w %q: not a rule ID such as ip, user or header(X-Api-Key)", ErrUnknownRule, ruleID)
	}
	req := engine.Request{Scope: scope}
	var block time.Duration // the longest block of the groups with the rule
	shared := false         // a group with the rule is shared across regions
	for _, g := range inScope {
		var subject string
		for _, ls := range lifecycle.Lists(&g.group) {
			for _, lim := range ls {
				if lim.Kind != id.Kind || lim.Name != id.Name || lim.Cost != id.Cost {
					continue
				}
				if subject == "" {
					s, err := subjectOf(id.Kind, g)
					if err != nil {
						return engine.Request{}, fmt.Errorf("slidelimit: limiter %s: %w", ruleID, err)
					}
					subject = s
				}
				req.Checks = addWindows(req.Checks, id, subject, lim.Windows)
				block = max(block, g.group.Block)
				shared = shared || !g.group.Regional
				if loc, err := ruletime.LoadZone(g.group.Calendar); err == nil && hasCalendar(g.group) {
					req.Zone = loc // scopes that share calendar windows share a zone
				}
			}
		}
	}
	if len(req.Checks) == 0 {
		return engine.Request{}, fmt.Errorf("%w %q in scope %q", ErrUnknownRule, ruleID, scope)
	}
	// Peek decides as the groups do: regional when none is shared.
	req.Regional = !shared
	for i := range req.Checks {
		// Peek reads the subject's block (a Peek never starts one).
		req.Checks[i].Block = block
		slices.SortFunc(req.Checks[i].Windows, func(a, b rules.Window) int {
			return cmp.Or(cmp.Compare(a.Period, b.Period), cmp.Compare(a.Limit, b.Limit))
		})
	}
	return req, nil
}

// addWindows adds to the check of subject the windows it does not have yet.
// Windows equal in period but not in limit are both kept: each is what some
// caller is limited by, and the engine counts them over the same entries.
func addWindows(checks []engine.Check, id rules.Rule, subject string, ws []rules.Window) []engine.Check {
	i := slices.IndexFunc(checks, func(c engine.Check) bool { return c.Subject == subject })
	if i < 0 {
		checks = append(checks, engine.Check{Rule: rules.Rule{Kind: id.Kind, Name: id.Name, Cost: id.Cost}, Subject: subject})
		i = len(checks) - 1
	}
	for _, w := range ws {
		if w.LimitFunc != "" {
			// No request, no limit: the largest one the window may have.
			w.Limit = lifecycle.LimitCap(id, w)
		}
		if !slices.Contains(checks[i].Windows, w) {
			checks[i].Windows = append(checks[i].Windows, w)
		}
	}
	return checks
}

// ParseRuleID returns the kind, name and cost of a rule ID
// (user, header(X-Api-Key), user[bytes]), canonicalized as the rule
// language does (header names), by parsing it as a rule with a
// placeholder window; text with anything but an ID in it is rejected
// before it could parse as more than one statement or window.
func ParseRuleID(id string) (rules.Rule, bool) {
	if id == "" || strings.ContainsAny(id, ";:,=&/ \t") {
		return rules.Rule{}, false
	}
	g, err := rules.Parse(id + ":100000/s") // room for a constant cost
	if err != nil || len(g.Rules) != 1 {
		return rules.Rule{}, false
	}
	l := g.Rules[0]
	return rules.Rule{Kind: l.Kind, Name: l.Name, Cost: l.Cost}, true
}

// hasCalendar reports whether some rule of g, default or a role's, has
// a calendar window.
func hasCalendar(g rules.Group) bool {
	for _, ls := range lifecycle.Lists(&g) {
		for _, l := range ls {
			for _, w := range l.Windows {
				if w.Calendar != "" {
					return true
				}
			}
		}
	}
	return false
}

// Routes lists the scopes registered with a known scope, and an
// override's scope, with the IDs of their rules in first-seen order,
// sorted by scope.
func (r *Registry) Routes() []admin.Route {
	r.mu.RLock()
	groups := slices.Clone(r.groups)
	r.mu.RUnlock()
	if r.ov != nil {
		for scope, g := range r.ov.InForceAll() {
			groups = append(groups, entry{scope: scope, group: g})
		}
	}
	var out []admin.Route
	for _, g := range groups {
		if g.scope == "" {
			continue
		}
		i := slices.IndexFunc(out, func(r admin.Route) bool { return r.Scope == g.scope })
		if i < 0 {
			out = append(out, admin.Route{Scope: g.scope})
			i = len(out) - 1
		}
		for _, ls := range lifecycle.Lists(&g.group) {
			for _, lim := range ls {
				if id := lim.ID(); !slices.Contains(out[i].Rules, id) {
					out[i].Rules = append(out[i].Rules, id)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b admin.Route) int { return strings.Compare(a.Scope, b.Scope) })
	return out
}
