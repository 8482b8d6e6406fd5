package slidelimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/muxpattern"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Register registers on mux every handler declared by the struct tags of
// handlers (see rules.Routes), each wrapped in middleware enforcing its
// limit tag, with the route pattern as its scope unless the group declares
// one. A route without rules is tagged limit:"none"; a route tag without
// a limit tag is a *ConfigError naming the field. It reports every problem
// at once, as *ConfigError values joined with errors.Join, and then
// registers nothing, except that a conflict with a route registered on mux
// before is found while registering. It never panics. Each handler follows
// its scope's overrides (SetRules).
func (l *Limiter) Register(mux *http.ServeMux, handlers any) error {
	if mux == nil {
		return configError("", "", "", errNilMux)
	}
	routes, err := rules.Routes(handlers)
	var errs []error
	if err != nil {
		errs = append(errs, configErrors("", "", "", err))
	}
	wrapped := make([]http.Handler, len(routes))
	// A scratch mux finds bad and mutually conflicting patterns without
	// touching mux, which cannot unregister.
	scratch := http.NewServeMux()
	for i, r := range routes {
		h, err := l.route(r.Pattern, r.Group, r.Handler)
		if err != nil {
			err = lifecycle.Relocate(err, lifecycle.LimitTag(handlers, r.Pattern))
		} else {
			err = handle(scratch, r.Pattern, h)
		}
		if err != nil {
			errs = append(errs, configErrors(r.Pattern, r.Field, lifecycle.LimitTag(handlers, r.Pattern), err))
			continue
		}
		wrapped[i] = h
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for i, r := range routes {
		if err := handle(mux, r.Pattern, l.identify(wrapped[i])); err != nil {
			errs = append(errs, configError(r.Pattern, r.Field, "", err))
			continue
		}
		l.rememberRoute(r.Pattern, r.Group)
		l.join(wrapped[i])
	}
	return errors.Join(errs...)
}

// Handle registers handler on mux under pattern, wrapped in middleware
// enforcing the rule group rulesText, as Register does for one tagged
// field:
//
//	err := lim.Handle(mux, "GET /files/{id}", files, "user:10/min; ip:30/min")
//
// It fails with a *ConfigError, registering nothing, when the pattern, the
// rules or the middleware are invalid or mux rejects the pattern.
func (l *Limiter) Handle(mux *http.ServeMux, pattern string, handler http.Handler, rulesText string) error {
	if mux == nil {
		return configError(pattern, "", "", errNilMux)
	}
	fail := func(err error) error { return configErrors(pattern, "", rulesText, err) }
	if handler == nil {
		return fail(errNilHandler)
	}
	// The pattern is checked first, and on its own, so that its error
	// wraps errPattern as the ServeMux's own rejections do.
	if _, off, reason := muxpattern.Parse(pattern); reason != "" {
		return fail(fmt.Errorf("%w: %w", errPattern, &rules.Error{Input: pattern, Offset: off, Reason: reason}))
	}
	g, err := rules.ParseRoute(pattern, rulesText)
	if err != nil {
		return fail(err)
	}
	h, err := l.route(pattern, g, handler)
	if err != nil {
		return fail(lifecycle.Relocate(err, rulesText))
	}
	if err := handle(mux, pattern, l.identify(h)); err != nil {
		return fail(err)
	}
	l.rememberRoute(pattern, g)
	l.join(h)
	return nil
}

// route wraps h for group g served under pattern. The zero group, from a
// field tagged limit:"none", leaves h as it is, until a rule override of
// the pattern gives it one.
func (l *Limiter) route(pattern string, g rules.Group, h http.Handler) (http.Handler, error) {
	wrapped := h
	if !isZero(g) {
		mw, err := l.wrapper(g, middleware.WithScope(pattern))
		if err != nil {
			return nil, err
		}
		wrapped = mw(h)
	}
	if l.ov == nil {
		return wrapped, nil
	}
	scope := g.Scope
	if scope == "" {
		scope = pattern
	}
	// Joined to the scope's overrides once registered (join), so that a
	// route that fails to register never takes part.
	return l.newSwitch(scope, wrapped, h, []middleware.Option{middleware.WithScope(pattern)}), nil
}

func isZero(g rules.Group) bool {
	return len(g.Rules) == 0 && len(g.RoleRules) == 0 && len(g.Exempt) == 0 &&
		g.Scope == "" && g.Mode == rules.Enforce && g.Fail == rules.FailDefault
}

// handle registers h on mux, turning the panic of an invalid or conflicting
// pattern into an error.
func handle(mux *http.ServeMux, pattern string, h http.Handler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: %v", errPattern, v)
		}
	}()
	mux.Handle(pattern, h)
	return nil
}
