package slidelimit

import (
	"context"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/throttle"
)

// WithRulesCheck sets how often the Limiter checks the rule overrides'
// version; <= 0 turns the overrides off.
func WithRulesCheck(d time.Duration) Option { return func(c *config) { c.rulesCheck = d } }

// WithTallyFlush sets how often the Limiter writes its denial tallies;
// <= 0 turns them off.
func WithTallyFlush(d time.Duration) Option { return func(c *config) { c.tallyFlush = d } }

// EngineOf returns lim's engine.
func EngineOf(lim *Limiter) *engine.Engine { return lim.engine }

// ThrottleRequest returns the engine request th would ask for c.
func ThrottleRequest(th *Throttle, c Call) (engine.Request, error) {
	return th.t.Request(context.Background(), throttle.Call(c))
}
