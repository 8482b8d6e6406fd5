package slidelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/keyparts"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// registered is a group wrapped by Register, Handle or Middleware.
type registered struct {
	// scope is the group's scope, or "" when it is only known per request
	// (Middleware without a scope: statement).
	scope string
	group rules.Group
	// opts are the options the middleware was built with; they decide how
	// values map to subjects (middleware.WithIPv6Prefix and WithPolicy).
	opts []middleware.Option
}

// rememberRoute records g registered under pattern by Register or Handle.
func (l *Limiter) rememberRoute(pattern string, g rules.Group) {
	if isZero(g) {
		return // registered unwrapped: nothing is counted
	}
	scope := g.Scope
	if scope == "" {
		scope = pattern
	}
	l.remember(scope, g, nil)
}

// remember records g with the options its middleware was built with: the
// Limiter's, then opts.
func (l *Limiter) remember(scope string, g rules.Group, opts []middleware.Option) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.groups = append(l.groups, registered{scope: scope, group: g, opts: append(slices.Clip(l.opts), opts...)})
}

// Peek reports, counting nothing, the windows that limiter limiterID
// ("ip", "user", "header(X-Api-Key)", ...) of scope keeps for subject: the
// raw value the limiter counts or, with byIP, the client address of the
// requests it counted by address. Input that names no windows is a
// *ConfigError; see the package documentation, Inspecting subjects.
func (l *Limiter) Peek(ctx context.Context, scope, limiterID, subject string, byIP bool) (engine.Decision, error) {
	req, err := l.inspect(scope, limiterID, subject, byIP)
	if err != nil {
		return engine.Decision{}, err
	}
	return l.peek(ctx, req)
}

// Reset forgets every request that limiter limiterID of scope counted for
// subject, in every window of every limiter with that ID in the scope, and
// lifts the subject's block. On a throttle's scope it also lifts, in every
// process within a second, the blocks learned from the upstream for calls
// with that subject (see docs/throttle.md, Learned blocks). Its arguments
// and errors are Peek's; it fails with an error matching engine.ErrBackend
// when Redis does.
func (l *Limiter) Reset(ctx context.Context, scope, limiterID, subject string, byIP bool) error {
	req, err := l.inspect(scope, limiterID, subject, byIP)
	if err != nil {
		return err
	}
	return l.resetChecks(ctx, req)
}

// resetChecks resets the subject of each check of req.
func (l *Limiter) resetChecks(ctx context.Context, req engine.Request) error {
	var errs []error
	for _, c := range req.Checks {
		var err error
		if c.Hashed {
			err = l.engine.Reset(ctx, req.Scope, c.Limiter, c.Subject, true)
		} else {
			err = l.engine.Reset(ctx, req.Scope, c.Limiter, c.Subject, false)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	// A throttle's blocks learned from its upstream, of every lane that
	// has the subject (a subject stored hashed names none).
	for _, t := range l.throttlesNamed(req.Scope) {
		for _, c := range req.Checks {
			if !c.Hashed {
				if err := t.t.LiftSubject(ctx, c.Limiter, c.Subject); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// inspect builds the engine request that Peek and Reset use: per stored
// subject, one check with the union of the windows of every limiter with
// the ID in the scope.
func (l *Limiter) inspect(scope, limiterID, value string, byIP bool) (engine.Request, error) {
	if byIP {
		if id, ok := parseLimiterID(limiterID); ok && id.Kind == rules.Global {
			return engine.Request{}, fmt.Errorf("slidelimit: %w: a global limiter never counts by client IP", lifecycle.ErrSubject)
		}
	}
	return l.inspectWith(scope, limiterID, func(kind rules.Kind, g *registered) (string, error) {
		if byIP {
			kind = rules.IP
		}
		return middleware.Subject(kind, value, g.opts...)
	})
}

// inspectStored is inspect for a subject as the engine stores it, as the
// denial tallies report it (internal/tally): the middleware's encoding of
// a value, or its stored hash (hashed). It makes one check, for that
// subject whatever the groups' options.
func (l *Limiter) inspectStored(scope, limiterID, stored string, hashed bool) (engine.Request, error) {
	if hashed && !keyparts.IsStoredHash(stored) {
		return engine.Request{}, fmt.Errorf("slidelimit: %w: %q is not a stored hash", lifecycle.ErrSubject, stored)
	}
	req, err := l.inspectWith(scope, limiterID, func(rules.Kind, *registered) (string, error) { return stored, nil })
	for i := range req.Checks {
		req.Checks[i].Hashed = hashed
	}
	return req, err
}

// inspectWith is inspect with subject, which maps the value to the stored
// subject of a group's limiter of kind.
func (l *Limiter) inspectWith(scope, limiterID string, subjectOf func(rules.Kind, *registered) (string, error)) (engine.Request, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var inScope []*registered
	for i := range l.groups {
		if g := &l.groups[i]; g.scope == scope || g.scope == "" {
			inScope = append(inScope, g)
		}
	}
	if l.ov != nil {
		// An override in force counts in the scope's keys too.
		if g, ok := l.ov.InForce(scope); ok {
			inScope = append(inScope, &registered{scope: scope, group: g, opts: l.opts})
		}
	}
	if scope == "" || len(inScope) == 0 {
		return engine.Request{}, configError("", "", "", fmt.Errorf("%w %q", errUnknownScope, scope))
	}
	id, ok := parseLimiterID(limiterID)
	kind := id.Kind
	if !ok {
		return engine.Request{}, configError("", "", "", fmt.Errorf("%w %q: not a limiter ID such as ip, user or header(X-Api-Key)", errUnknownLimiter, limiterID))
	}

	req := engine.Request{Scope: scope}
	var block time.Duration // the longest block of the groups with the limiter
	for _, g := range inScope {
		var subject string
		for _, ls := range lifecycle.Lists(&g.group) {
			for _, lim := range ls {
				if lim.Kind != kind || lim.Name != id.Name || lim.Cost != id.Cost {
					continue
				}
				if subject == "" {
					s, err := subjectOf(kind, g)
					if err != nil {
						return engine.Request{}, fmt.Errorf("slidelimit: limiter %s: %w", limiterID, err)
					}
					subject = s
				}
				req.Checks = addWindows(req.Checks, id, subject, lim.Windows)
				block = max(block, g.group.Block)
				if loc, err := ruletime.LoadZone(g.group.Calendar); err == nil && hasCalendar(g.group) {
					req.Zone = loc // scopes that share calendar windows share a zone
				}
			}
		}
	}
	for i := range req.Checks {
		// Peek reads the subject's block (a Peek never starts one).
		req.Checks[i].Block = block
	}
	if len(req.Checks) == 0 {
		return engine.Request{}, configError("", "", "", fmt.Errorf("%w %q in scope %q", errUnknownLimiter, limiterID, scope))
	}
	for _, c := range req.Checks {
		slices.SortFunc(c.Windows, func(a, b rules.Window) int {
			return cmp.Or(cmp.Compare(a.Period, b.Period), cmp.Compare(a.Limit, b.Limit))
		})
	}
	return req, nil
}

// addWindows adds to the check of subject the windows it does not have yet.
// Windows equal in period but not in limit are both kept: each is what some
// caller is limited by, and the engine counts them over the same entries.
func addWindows(checks []engine.Check, id rules.Limiter, subject string, ws []rules.Window) []engine.Check {
	i := slices.IndexFunc(checks, func(c engine.Check) bool { return c.Subject == subject })
	if i < 0 {
		checks = append(checks, engine.Check{Limiter: rules.Limiter{Kind: id.Kind, Name: id.Name, Cost: id.Cost}, Subject: subject})
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

// parseLimiterID returns the kind, name and cost of a limiter ID
// (user, header(X-Api-Key), user[bytes]), canonicalized as the rule
// language does (header names), by parsing it as a limiter with a
// placeholder window; text with anything but an ID in it is rejected
// before it could parse as more than one statement or window.
func parseLimiterID(id string) (rules.Limiter, bool) {
	if id == "" || strings.ContainsAny(id, ";:,=&/ \t") {
		return rules.Limiter{}, false
	}
	g, err := rules.Parse(id + ":100000/s") // room for a constant cost
	if err != nil || len(g.Limiters) != 1 {
		return rules.Limiter{}, false
	}
	l := g.Limiters[0]
	return rules.Limiter{Kind: l.Kind, Name: l.Name, Cost: l.Cost}, true
}

// peek is the engine's Peek: what Allow would decide, counting nothing.
func (l *Limiter) peek(ctx context.Context, req engine.Request) (engine.Decision, error) {
	return l.engine.Peek(ctx, req)
}

// hasCalendar reports whether some limiter of g, default or override, has
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
