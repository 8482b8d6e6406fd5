package slidelimit

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Rule overrides replace, at run time and in every process that shares a
// Redis and a key prefix, the rule group that the code declared for a
// scope. Package internal/overrides stores and follows them in Redis; the
// Limiter builds the handlers that serve them.

// defaultRulesCheck is how often a Limiter checks the version of the rule
// overrides in Redis by default (tests change it in export_test.go).
const defaultRulesCheck = time.Second

// SetRules replaces the rule group of scope (a route pattern or a scope:
// name) with rulesText, in this process and in every process sharing the
// Redis and key prefix, within about a second; an empty rulesText removes
// the override, so that the group the code declared applies again. The
// text is checked as a limit tag is and by building every handler of the
// scope: a *ConfigError leaves everything as it was. See docs/rules.md,
// Limits that change at run time, for how the windows carry over.
func (l *Limiter) SetRules(ctx context.Context, scope, rulesText string) error {
	if l.ov == nil {
		return configError(scope, "", "", errOverridesOff)
	}
	if rulesText == "" {
		return l.clearRules(ctx, scope)
	}
	g, err := overrides.Group(scope, rulesText)
	if err != nil {
		return configError(scope, "", rulesText, err)
	}
	// Build, do not install, the scope's handlers: a group this process
	// cannot serve is refused before anything is stored.
	for _, s := range l.ov.Switches(scope) {
		if err := s.Check(g); err != nil {
			return configErrors(scope, "", rulesText, lifecycle.Relocate(err, rulesText))
		}
	}
	g.Scope = ""
	return l.ov.Write(ctx, scope, g.String())
}

// clearRules removes the override of scope (SetRules with no text).
// Removing an override that is not in force is not an error.
func (l *Limiter) clearRules(ctx context.Context, scope string) error {
	if scope == "" {
		return configError("", "", "", fmt.Errorf("%w: empty scope", overrides.ErrScope))
	}
	return l.ov.Write(ctx, scope, "")
}

// RuleOverride is a rule override in force: the rule text, in canonical
// form, that replaces the group of Scope (SetRules).
type RuleOverride struct {
	Scope string `json:"scope"`
	Rules string `json:"rules"`
}

// RuleOverrides returns the rule overrides in force as stored in Redis now,
// in scope order. Version counts the changes made under the key prefix
// since the overrides were first stored.
func (l *Limiter) RuleOverrides(ctx context.Context) (version int64, in []RuleOverride, err error) {
	if l.ov == nil {
		return 0, nil, errOverridesOff
	}
	set, err := l.ov.Load(ctx)
	if err != nil {
		return 0, nil, err
	}
	out := []RuleOverride{}
	for _, s := range set.Scopes() {
		out = append(out, RuleOverride{Scope: s, Rules: set.Texts[s]})
	}
	return set.Version, out, nil
}

// follow returns a handler serving code, the handler of the group the code
// declared for scope, until a rule override of scope replaces it with
// next wrapped in middleware for the override's group, built with the
// Limiter's options and then opts.
func (l *Limiter) follow(scope string, code, next http.Handler, opts []middleware.Option) http.Handler {
	s := l.newSwitch(scope, code, next, opts)
	l.ov.Add(s.Switch)
	return s
}

// join makes h, when route made it a Switch, follow its scope's overrides.
func (l *Limiter) join(h http.Handler) {
	if s, ok := h.(overrides.Route); ok {
		l.ov.Add(s.Switch)
	}
}

// newSwitch returns the Switch of follow, not yet following.
func (l *Limiter) newSwitch(scope string, code, next http.Handler, opts []middleware.Option) overrides.Route {
	named := scope // a scope: name, or "" for a route pattern, which opts give
	if !validScopeName(scope) {
		named = ""
	}
	return overrides.Route{Switch: overrides.NewSwitch(scope, code, func(g rules.Group) (http.Handler, error) {
		g.Scope = named
		mw, err := l.wrapper(g, opts...)
		if err != nil {
			return nil, err
		}
		return mw(next), nil
	})}
}

// validScopeName reports whether scope can be a scope: name (a route
// pattern cannot: it holds a space or a slash).
func validScopeName(scope string) bool {
	_, err := rules.Parse("global:1/s; scope:" + scope)
	return err == nil && !strings.ContainsAny(scope, ";")
}
