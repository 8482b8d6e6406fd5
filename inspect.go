package slidelimit

import (
	"context"
	"errors"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/registry"
	"github.com/slidelimit/slidelimit/rules"
)

// rememberRoute records g registered under pattern by Register or Handle.
func (l *Limiter) rememberRoute(pattern string, g rules.Group) {
	if isZero(g) {
		return // registered unwrapped: nothing is counted
	}
	scope := g.Scope
	if scope == "" {
		scope = pattern
	}
	l.reg.Add(scope, g, nil)
}

// Peek reports, counting nothing, the windows that rule ruleID
// ("ip", "user", "header(X-Api-Key)", ...) of scope keeps for subject: the
// raw value the rule counts or, with byIP, the client address of the
// requests it counted by address. Input that names no windows is a
// *ConfigError; see the package documentation, Inspecting subjects.
func (l *Limiter) Peek(ctx context.Context, scope, ruleID, subject string, byIP bool) (engine.Decision, error) {
	req, err := l.inspect(scope, ruleID, subject, byIP)
	if err != nil {
		return engine.Decision{}, err
	}
	return l.engine.Peek(ctx, req)
}

// Reset forgets every request that rule ruleID of scope counted for
// subject, in every window of every rule with that ID in the scope, and
// lifts the subject's block. On a throttle's scope it also lifts, in every
// process within a second, the blocks learned from the upstream for calls
// with that subject (see docs/throttle.md, Learned blocks). With
// WithRegions, a group that is not regions:local is reset in every region
// within the replication lag: admissions made before the reset count
// nowhere, wherever they arrive (docs/regions.md, Reset across regions).
// Its arguments and errors are Peek's; it fails with an error matching
// engine.ErrBackend when Redis does.
func (l *Limiter) Reset(ctx context.Context, scope, ruleID, subject string, byIP bool) error {
	req, err := l.inspect(scope, ruleID, subject, byIP)
	if err != nil {
		return err
	}
	return l.resetChecks(ctx, req)
}

// resetChecks resets the subject of each check of req.
func (l *Limiter) resetChecks(ctx context.Context, req engine.Request) error {
	var errs []error
	if err := l.engine.ResetRequest(ctx, req); err != nil {
		errs = append(errs, err)
	}
	// A throttle's blocks learned from its upstream, of every lane that
	// has the subject (a subject stored hashed names none).
	for _, t := range l.throttlesNamed(req.Scope) {
		for _, c := range req.Checks {
			if !c.Hashed {
				if err := t.t.LiftSubject(ctx, c.Rule, c.Subject); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// inspect builds the engine request that Peek and Reset use
// (registry.Registry.Request); input naming no windows is a *ConfigError.
func (l *Limiter) inspect(scope, ruleID, value string, byIP bool) (engine.Request, error) {
	req, err := l.reg.Request(scope, ruleID, value, byIP)
	return req, unknown(err)
}

// unknown returns err as a *ConfigError when it names no scope or no
// rule.
func unknown(err error) error {
	if errors.Is(err, registry.ErrUnknownScope) || errors.Is(err, registry.ErrUnknownRule) {
		return configError("", "", "", err)
	}
	return err
}
