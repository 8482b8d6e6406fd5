package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// Names of the slidelimit configurations.
const (
	slidelimit2W = "slidelimit 2-window"
	slidelimit1W = "slidelimit 1-window"
	slidelimitNC = "slidelimit 2-window uncached"
)

// slidelimitLibraries are the slidelimit configurations under test: the
// 2-window group of GitHub issue #3 and a 1-window variant with the same
// longest window, which shows what the second window costs.
var slidelimitLibraries = []library{
	{Name: slidelimit2W, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		if c.Deny {
			return setupSlidelimit(rdb)(w(1, time.Minute), w(10, time.Hour))
		}
		return setupSlidelimit(rdb)(w(100_000, time.Second), w(1_000_000, time.Minute))
	}},
	// The same group with cached denials off: every denial asks Redis.
	{Name: slidelimitNC, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		setup := setupSlidelimit(rdb, engine.WithCachedDenials(false))
		if c.Deny {
			return setup(w(1, time.Minute), w(10, time.Hour))
		}
		return setup(w(100_000, time.Second), w(1_000_000, time.Minute))
	}},
	{Name: slidelimit1W, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		if c.Deny {
			return setupSlidelimit(rdb)(w(1, time.Hour))
		}
		return setupSlidelimit(rdb)(w(1_000_000, time.Minute))
	}},
}

func w(limit int64, period time.Duration) rules.Window {
	return rules.Window{Limit: limit, Period: period}
}

// setupSlidelimit configures a slidelimit engine with default options
// (and opts) on rdb and one limiter of kind key with the given windows.
// Each caller reuses one Request and only changes its subject, so the
// caller itself allocates nothing. Requests fail closed, and a decision not
// made by Redis (or, for a denial, by the cache of Redis's answers) counts
// as an error, so that a fallback decision can never pass for a measured
// one.
func setupSlidelimit(rdb *redis.Client, opts ...engine.Option) func(windows ...rules.Window) (*limiterSetup, error) {
	return func(windows ...rules.Window) (*limiterSetup, error) { return newSlidelimit(rdb, opts, windows) }
}

func newSlidelimit(rdb *redis.Client, opts []engine.Option, windows []rules.Window) (*limiterSetup, error) {
	eng, err := engine.New(rdb, opts...)
	if err != nil {
		return nil, err
	}
	lim := rules.Limiter{Kind: rules.Key, Name: "bench", Windows: windows}
	var desc []string
	for _, w := range windows {
		desc = append(desc, fmt.Sprintf("%d/%v", w.Limit, w.Period))
	}
	return &limiterSetup{
		Config: strings.Join(desc, " + "),
		NewCaller: func() decideFunc {
			req := engine.Request{
				Scope:  "bench",
				Checks: []engine.Check{{Limiter: lim}},
				Fail:   rules.FailClosed,
			}
			return func(ctx context.Context, key string) (bool, error) {
				req.Checks[0].Subject = key
				d, err := eng.Allow(ctx, req)
				if err != nil {
					return false, err
				}
				if d.Source != engine.FromRedis && (d.Source != engine.FromCache || d.Allowed) {
					return false, fmt.Errorf("decision from source %v, not from Redis", d.Source)
				}
				return d.Allowed, nil
			}
		},
		Close: func() { eng.Close() },
	}, nil
}
