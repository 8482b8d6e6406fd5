package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/tally"
	"github.com/slidelimit/slidelimit/rules"
)

// Names of the slidelimit configurations.
const (
	slidelimit2W = "slidelimit 2-window"
	slidelimit1W = "slidelimit 1-window"
	slidelimitNC = "slidelimit 2-window uncached"
	slidelimitBQ = "slidelimit byte quota"
	slidelimitBW = "slidelimit bounded window"
)

// unreachable is the allow cases' limit, as in issue #11's setup (1e9 per
// second and per minute): no rate this machine reaches fills a window, so
// every decision is an admission. A limit of 100,000 per second was
// reached at 64 callers once a batch on a hot key read it only once.
const unreachable = 1_000_000_000 // the engine's largest limit of a count key

// slidelimitLibraries are the slidelimit configurations under test: the
// 2-window group of GitHub issue #3 and a 1-window variant with the same
// longest window, which shows what the second window costs.
var slidelimitLibraries = []library{
	{Name: slidelimit2W, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		if c.Deny {
			return setupSlidelimit(rdb)(w(1, time.Minute), w(10, time.Hour))
		}
		return setupSlidelimit(rdb)(w(unreachable, time.Second), w(unreachable, time.Minute))
	}},
	// The same group with cached denials off: every denial asks Redis.
	{Name: slidelimitNC, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		setup := setupSlidelimit(rdb, engine.WithCachedDenials(false))
		if c.Deny {
			return setup(w(1, time.Minute), w(10, time.Hour))
		}
		return setup(w(unreachable, time.Second), w(unreachable, time.Minute))
	}},
	{Name: slidelimit1W, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		if c.Deny {
			return setupSlidelimit(rdb)(w(1, time.Hour))
		}
		return setupSlidelimit(rdb)(w(unreachable, time.Minute))
	}},
	// A byte quota: each request costs 1 KiB of 2 GiB a day, merged per
	// 15 minutes (a weighted key: running totals, bounded members).
	{Name: slidelimitBQ, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		if c.Deny {
			return newSlidelimit(rdb, nil, "bytes", 1024, []rules.Window{gw(1024, 24*time.Hour, 15*time.Minute)})
		}
		return newSlidelimit(rdb, nil, "bytes", 1024, []rules.Window{gw(2<<30, 24*time.Hour, 15*time.Minute)})
	}},
	// The 2-window group with grains: about 100 merged entries for the
	// second and 60 for the minute, whatever the limits.
	{Name: slidelimitBW, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		if c.Deny {
			return newSlidelimit(rdb, nil, "", 0, []rules.Window{w(1, time.Minute), gw(10, time.Hour, time.Minute)})
		}
		return newSlidelimit(rdb, nil, "", 0, []rules.Window{gw(100_000, time.Second, 10*time.Millisecond), gw(1_000_000, time.Minute, time.Second)})
	}},
}

func gw(limit int64, period, grain time.Duration) rules.Window {
	return rules.Window{Limit: limit, Period: period, Grain: grain}
}

func w(limit int64, period time.Duration) rules.Window {
	return rules.Window{Limit: limit, Period: period}
}

// setupSlidelimit configures a slidelimit engine with default options
// (and opts) and its denial tallies, as a slidelimit.Limiter has, on rdb and one rule of kind key with the given windows.
// Each caller reuses one Request and only changes its subject, so the
// caller itself allocates nothing. Requests fail closed, and a decision not
// made by Redis (or, for a denial, by the cache of Redis's answers) counts
// as an error, so that a fallback decision can never pass for a measured
// one.
func setupSlidelimit(rdb *redis.Client, opts ...engine.Option) func(windows ...rules.Window) (*limiterSetup, error) {
	return func(windows ...rules.Window) (*limiterSetup, error) { return newSlidelimit(rdb, opts, "", 0, windows) }
}

// newSlidelimit is setupSlidelimit with a rule cost (rules.Rule.Cost)
// and the cost of each request (0: the rule's).
func newSlidelimit(rdb *redis.Client, opts []engine.Option, cost string, n int64, windows []rules.Window) (*limiterSetup, error) {
	return newSlidelimitTallies(rdb, opts, true, cost, n, windows)
}

// newSlidelimitTallies is newSlidelimit, with the denial tallies (fed by
// the engine's denial hook and written every second, as the root
// package's Limiter wires them) or without.
func newSlidelimitTallies(rdb *redis.Client, opts []engine.Option, tallies bool, cost string, n int64, windows []rules.Window) (*limiterSetup, error) {
	var tl *tally.Tallies // fed by the engine's denial hook once set
	if tallies {
		opts = append(slices.Clip(opts), engine.WithDenialHook(func(d engine.Denial) { tl.Note(d) }))
	}
	eng, err := engine.New(rdb, opts...)
	if err != nil {
		return nil, err
	}
	if tallies {
		tl = tally.New(tally.Store{Client: rdb, Prefix: eng.KeyPrefix(), Log: eng.Logger(), Down: eng.Down})
		tl.Start(tally.DefaultFlush)
	}
	lim := rules.Rule{Kind: rules.Key, Name: "bench", Cost: cost, Windows: windows}
	var desc []string
	for _, w := range windows {
		d := fmt.Sprintf("%d/%v", w.Limit, w.Period)
		if w.Calendar != "" {
			d = fmt.Sprintf("%d/calendar %s", w.Limit, w.Calendar)
		}
		if w.Grain != 0 {
			d += "~" + w.Grain.String()
		}
		desc = append(desc, d)
	}
	if cost != "" {
		desc[0] = fmt.Sprintf("[%s, %d per request] ", cost, n) + desc[0]
	}
	return &limiterSetup{
		Config: strings.Join(desc, " + "),
		NewCaller: func() decideFunc {
			req := engine.Request{
				Scope:  "bench",
				Checks: []engine.Check{{Rule: lim, Cost: n}},
				Fail:   rules.FailClosed,
			}
			return func(ctx context.Context, key string) (bool, error) {
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
		Close: func() {
			eng.Close()
			if tl != nil {
				tl.Close()
			}
		},
	}, nil
}
