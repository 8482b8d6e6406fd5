package slidelimit

import (
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// WithRulesCheck sets how often the Limiter checks the rule overrides'
// version; <= 0 turns the overrides off.
func WithRulesCheck(d time.Duration) Option { return func(c *config) { c.rulesCheck = d } }

// WithTallyFlush sets how often the Limiter writes its denial tallies;
// <= 0 turns them off.
func WithTallyFlush(d time.Duration) Option { return func(c *config) { c.tallyFlush = d } }

// EngineOf returns lim's engine.
func EngineOf(lim *Limiter) *engine.Engine { return lim.engine }
