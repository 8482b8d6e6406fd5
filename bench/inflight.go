package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// slidelimitIF is the in-flight group: the 2-window group with an
// in-flight window (N concurrent) in the same rule, each decision an
// Allow and, once admitted, the Release that frees its slot (the work a
// middleware does around a handler). Its slot limit is above the callers,
// so that allow cases never deny; the deny case keeps the first admitted
// request's slot of a 1-slot window, so every measured decision is a
// denial by it (in-flight windows make no cached denials: each asks
// Redis).
const slidelimitIF = "slidelimit inflight"

func init() {
	slidelimitLibraries = append(slidelimitLibraries, library{Name: slidelimitIF, Setup: setupInflight})
}

func setupInflight(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	eng, err := engine.New(rdb)
	if err != nil {
		return nil, err
	}
	slots := int64(1024)
	if c.Deny {
		slots = 1
	}
	lim := rules.Rule{Kind: rules.Key, Name: "bench", Windows: []rules.Window{
		w(unreachable, time.Second), w(unreachable, time.Minute), {Limit: slots, Concurrent: true},
	}}
	return &limiterSetup{
		Config: fmt.Sprintf("%d/1s + %d/1m + %d concurrent, acquire + release", int64(unreachable), int64(unreachable), slots),
		NewCaller: func() decideFunc {
			req := engine.Request{Scope: "bench", Checks: []engine.Check{{Rule: lim}}, Fail: rules.FailClosed}
			return func(ctx context.Context, key string) (bool, error) {
				req.Checks[0].Subject = key
				d, err := eng.Allow(ctx, req)
				if err != nil {
					return false, err
				}
				if d.Source != "redis" {
					return false, fmt.Errorf("decision from source %v, not from Redis", d.Source)
				}
				if d.Allowed && !c.Deny {
					if err := eng.Finish(ctx, d, engine.Outcome{}); err != nil {
						return false, err
					}
				}
				return d.Allowed, nil
			}
		},
		Close: func() { eng.Close() },
	}, nil
}
