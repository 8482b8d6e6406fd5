package main

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// floorScript is the Redis work an exact 2-window sliding log in one sorted
// set cannot skip in general: the server's time, a count of each window
// (1 min and 1 s) and, when both have room, one entry. It reads no
// entry's score (so it could report no reset), never trims or expires the
// key (memory grows with every admission) and does not guard against two
// requests with one member. It is not a limiter: with -floor, the bench
// runs it to show how far a script of that cost gets against the peers
// when each decision is its own script call (issue #11).
var floorScript = redis.NewScript(`
local now = redis.call('TIME')
local t = now[1] * 1000000 + now[2]
local limit = tonumber(ARGV[2])
local long = redis.call('ZCOUNT', KEYS[1], string.format('%d', t - 60000000 + 1), '+inf')
local short = redis.call('ZCOUNT', KEYS[1], string.format('%d', t - 1000000 + 1), '+inf')
if long < limit and short < limit then
  redis.call('ZADD', KEYS[1], string.format('%d', t), ARGV[1])
  return 1
end
return 0
`)

// floorLibraries are the floor script, sent as go-redis sends any script
// (one EVALSHA per decision on a pooled connection), and the same through
// go-redis's automatic pipelining (experimental since v9.22), full-duplex:
// concurrent decisions' EVALSHAs share one connection and its writes.
var floorLibraries = []library{
	{Name: "floor 2-window", Setup: setupFloor(false)},
	{Name: "floor 2-window pipelined", Setup: setupFloor(true)},
}

// floorMember numbers the floor's entries, unique within a run.
var floorMember atomic.Int64

func setupFloor(pipelined bool) func(context.Context, *redis.Client, benchCase) (*limiterSetup, error) {
	return func(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		var sc redis.Scripter = rdb
		closeFn := func() {}
		if pipelined {
			opts := redis.DefaultBlockingAutoPipelineOptions()
			opts.FullDuplex = true
			ap, err := rdb.AutoPipelineWithOptions(opts)
			if err != nil {
				return nil, err
			}
			sc, closeFn = ap, func() { _ = ap.Close() }
		}
		limit := strconv.FormatInt(unreachable, 10)
		if c.Deny {
			limit = "1"
		}
		return &limiterSetup{
			Config: "TIME, ZCOUNT 1m, ZCOUNT 1s, ZADD; limit " + limit + " in both windows",
			NewCaller: func() decideFunc {
				keys := []string{""}
				return func(ctx context.Context, key string) (bool, error) {
					keys[0] = key
					member := strconv.FormatInt(floorMember.Add(1), 10)
					v, err := floorScript.Run(ctx, sc, keys, member, limit).Int64()
					return v == 1, err
				}
			},
			Close: closeFn,
		}, nil
	}
}
