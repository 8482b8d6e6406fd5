package slidelimit_test

import (
	"context"
	"errors"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
)

// isKind reports whether err, or one of the errors it joins, is a
// *slidelimit.ConfigError of kind.
func isKind(err error, kind string) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if isKind(e, kind) {
				return true
			}
		}
		return false
	}
	var ce *slidelimit.ConfigError
	return errors.As(err, &ce) && ce.Kind == kind
}

// The options this package keeps out of its API, for tests
// (export_test.go).
func withRulesCheck(d time.Duration) slidelimit.Option { return slidelimit.WithRulesCheck(d) }

func withTallyFlush(d time.Duration) slidelimit.Option { return slidelimit.WithTallyFlush(d) }

// engineOf returns the Limiter's engine.
func engineOf(lim *slidelimit.Limiter) *engine.Engine { return slidelimit.EngineOf(lim) }

// overridesInForce is what the Limiter lists of its rule overrides.
type overridesInForce struct {
	Version   int64
	Overrides []override
}

type override = slidelimit.RuleOverride

// rulesOf lists the rule overrides in force as lim reads them in Redis.
func rulesOf(ctx context.Context, lim *slidelimit.Limiter) (overridesInForce, error) {
	v, in, err := lim.RuleOverrides(ctx)
	return overridesInForce{v, in}, err
}

// kindErr stands, in a table of wanted errors, for a ConfigError of its
// kind.
type kindErr string

func (k kindErr) Error() string { return "a ConfigError of kind " + string(k) }
