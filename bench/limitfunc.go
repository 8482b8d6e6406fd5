package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// slidelimitLF is the 2-window group with its longer window's limit from a
// limit function (key(bench):N/s,$quota/min), next to the static group.
const slidelimitLF = "slidelimit limitfunc"

func init() {
	slidelimitLibraries = append(slidelimitLibraries, library{Name: slidelimitLF, Setup: setupLimitFunc})
}

// setupLimitFunc models what the middleware does for a window whose limit
// names a limit function: per request it calls the function (here a map
// lookup by subject, as an application would read a tenant's plan), copies
// the rule's windows into a fresh slice with the resolved limit
// (internal/lifecycle.Resolve, the middleware's check of the value) and asks the
// engine. The limits are those of the static 2-window group, so the two
// rows differ only by the resolution.
func setupLimitFunc(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	static, quota := w(unreachable, time.Second), int64(unreachable)
	if c.Deny {
		static, quota = w(1, time.Minute), 10
	}
	dyn := rules.Window{Period: time.Minute, LimitFunc: "quota"}
	if c.Deny {
		dyn.Period = time.Hour
	}
	eng, err := engine.New(rdb)
	if err != nil {
		return nil, err
	}
	// Resolve caps an exact window at rulelimits.MaxLimit, as in rule text; the
	// bench's unreachable limit needs a cost-free rule built in Go, so
	// the check runs against a grained twin and the exact window is used.
	lim := rules.Rule{Kind: rules.Key, Name: "bench", Windows: []rules.Window{static, dyn}}
	plans := map[string]int64{} // subject → limit; every subject has the same plan here
	limitOf := func(key string) int64 {
		if n, ok := plans[key]; ok {
			return n
		}
		return quota
	}
	return &limiterSetup{
		Config: fmt.Sprintf("%d/%v + $quota/%v (quota %d)", static.Limit, static.Period, dyn.Period, quota),
		NewCaller: func() decideFunc {
			req := engine.Request{Scope: "bench", Checks: []engine.Check{{Rule: lim}}, Fail: rules.FailClosed}
			check := rules.Rule{Kind: rules.Key, Name: "bench", Cost: "1"} // no MaxLimit cap: see above
			return func(ctx context.Context, key string) (bool, error) {
				ws := make([]rules.Window, len(lim.Windows))
				for i, w := range lim.Windows {
					if w.LimitFunc == "" {
						ws[i] = w
						continue
					}
					r, err := lifecycle.Resolve(check, w, limitOf(key))
					if err != nil {
						return false, err
					}
					ws[i] = r
				}
				req.Checks[0].Windows = ws
				req.Checks[0].Subject = key
				d, err := eng.Allow(ctx, req)
				if err != nil {
					return false, err
				}
				if d.Source != "redis" && (d.Source != "cache" || d.Allowed) {
					return false, fmt.Errorf("decision from source %v, not from Redis", d.Source)
				}
				return d.Allowed, nil
			}
		},
		Close: func() { eng.Close() },
	}, nil
}
