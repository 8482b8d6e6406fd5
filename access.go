package slidelimit

import (
	"context"
	"time"

	"github.com/slidelimit/slidelimit/internal/access"
)

// The demo, the benchmarks and this package's tests reach these through
// package access, so that they are no part of the Limiter's API: the
// defaults suit every service, and a program needing the engine builds
// its own with engine.New.
func init() {
	access.LimiterEngine = func(lim any) any { return lim.(*Limiter).engine }
	access.LimiterRules = func(lim any, ctx context.Context) (int64, []access.Override, error) {
		return lim.(*Limiter).rules(ctx)
	}
	access.RulesCheck = func(d time.Duration) any { return Option(func(c *config) { c.rulesCheck = d }) }
	access.TallyFlush = func(d time.Duration) any { return Option(func(c *config) { c.tallyFlush = d }) }
}
