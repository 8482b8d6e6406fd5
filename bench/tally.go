package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/rules"
)

// slidelimitNT is the 2-window group without the denial tallies
// (no denial hook from internal/tally, as a Limiter with them off): beside "slidelimit 2-window", whose
// tallies are on (a Limiter's default), its deny-hot row shows what
// counting every cached denial for the operator's view costs.
const slidelimitNT = "slidelimit 2-window no tallies"

func init() {
	slidelimitLibraries = append(slidelimitLibraries, library{Name: slidelimitNT,
		Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			setup := func(windows ...rules.Window) (*limiterSetup, error) {
				return newSlidelimitTallies(rdb, nil, false, "", 0, windows)
			}
			if c.Deny {
				return setup(w(1, time.Minute), w(10, time.Hour))
			}
			return setup(w(unreachable, time.Second), w(unreachable, time.Minute))
		}})
}
