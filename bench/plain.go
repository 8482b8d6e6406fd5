package main

import (
	"context"
	"strconv"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/redis/go-redis/v9"
)

// plainScript is the seed's plain sorted-set sliding window, as the seed
// measured it against slidelimit (issue #39): one sorted set per subject,
// one EVALSHA per decision. ARGV holds the client's clock in milliseconds,
// a snowflake id as the member, then a limit and a window in milliseconds
// per window, the longest first. Each window is counted (ZCOUNT); the first
// one at its limit denies and nothing is written. An admission adds the
// entry, expires the key after the longest window and trims what the
// longest window no longer holds. It returns 1 or 0 and nothing else: no
// reset, no remaining, no server clock, no guard against two processes'
// clocks or members colliding.
var plainScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local longest = tonumber(ARGV[4])
for i = 3, #ARGV, 2 do
  local limit = tonumber(ARGV[i])
  local window = tonumber(ARGV[i + 1])
  if redis.call('ZCOUNT', KEYS[1], now - window, now) >= limit then
    return 0
  end
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('PEXPIRE', KEYS[1], longest)
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now - longest)
return 1
`)

// Names of the plain script's rows, which slidelimit's are divided by: the
// 2-window job (1e9/min + 1e9/s when allowing, like slidelimit's group) and
// one window (1e9/min), like-for-like with slidelimit's 1-window variant.
const (
	plain2W = "plain script 2-window"
	plain1W = "plain script 1-window"
)

// setupPlain runs plainScript with windows (the longest first) at the
// allowing cases' unreachable limit, or, when denying, at 1 for the first
// window and 10 for the others.
func setupPlain(windows ...time.Duration) func(context.Context, *redis.Client, benchCase) (*limiterSetup, error) {
	return func(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
		node, err := snowflake.NewNode(1)
		if err != nil {
			return nil, err
		}
		// ARGV: now, member, then (limit, window ms) per window.
		fixed := make([]any, 2, 2+2*len(windows))
		config := ""
		for i, w := range windows {
			limit := int64(unreachable)
			if c.Deny {
				limit = 1
				if i > 0 {
					limit = 10
				}
			}
			fixed = append(fixed, strconv.FormatInt(limit, 10), strconv.FormatInt(w.Milliseconds(), 10))
			if i > 0 {
				config += " + "
			}
			config += itoa(limit) + "/" + w.String()
		}
		return &limiterSetup{
			Config: config + "; sorted set, ZCOUNT per window, ZADD, PEXPIRE, ZREMRANGEBYSCORE",
			NewCaller: func() decideFunc {
				keys := []string{""}
				args := append([]any(nil), fixed...)
				return func(ctx context.Context, key string) (bool, error) {
					keys[0] = "zl:" + key
					args[0] = time.Now().UnixMilli()
					args[1] = node.Generate().String()
					v, err := plainScript.Run(ctx, rdb, keys, args...).Int64()
					return v == 1, err
				}
			},
			Close: func() {},
		}, nil
	}
}
