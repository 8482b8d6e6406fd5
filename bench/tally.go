package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/access"
)

// slidelimitNT is the 2-window group with the denial tallies off
// (internal/access.EngineTallies(false), the engine option that internal/access keeps): beside "slidelimit 2-window", whose tallies
// are on (the default), its deny-hot row shows what counting every cached
// denial for the operator's view costs.
const slidelimitNT = "slidelimit 2-window no tallies"

func init() {
	slidelimitLibraries = append(slidelimitLibraries, library{Name: slidelimitNT,
		Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			setup := setupSlidelimit(rdb, access.EngineTallies(false).(engine.Option))
			if c.Deny {
				return setup(w(1, time.Minute), w(10, time.Hour))
			}
			return setup(w(unreachable, time.Second), w(unreachable, time.Minute))
		}})
}
