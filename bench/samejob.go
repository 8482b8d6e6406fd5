package main

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// The same job as slidelimit's 2-window group (a limit per second and one
// per minute for each key), done by each peer its own way: one call per
// window, in turn, the second skipped when the first denies. Neither peer
// is atomic across the two calls: a request the minute window denies has
// already been counted in the second window, which slidelimit never does.

// setupRedisRate2W runs redis_rate with two limits per key: 1e6/s and 6e7/min
// when allowing (never reached; GCRA still writes at that rate), 1/h twice
// when denying.
func setupRedisRate2W(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	lim := redis_rate.NewLimiter(rdb)
	sec := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	minute := redis_rate.Limit{Rate: 60_000_000, Burst: 60_000_000, Period: time.Minute}
	if c.Deny {
		sec = redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Hour}
		minute = sec
	}
	return &limiterSetup{
		Config: sec.String() + " + " + minute.String(),
		NewCaller: func() decideFunc {
			return func(ctx context.Context, key string) (bool, error) {
				res, err := lim.Allow(ctx, key+":s", sec)
				if err != nil || res.Allowed == 0 {
					return false, err
				}
				res, err = lim.Allow(ctx, key+":m", minute)
				if err != nil {
					return false, err
				}
				return res.Allowed > 0, nil
			}
		},
		Close: func() {},
	}, nil
}

// setupUlule2W runs two ulule limiters per key, a fixed window of a second
// and one of a minute (never reached when allowing, 1/h when denying).
func setupUlule2W(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	rates := [2]limiter.Rate{{Period: time.Second, Limit: 1_000_000}, {Period: time.Minute, Limit: 60_000_000}}
	if c.Deny {
		rates = [2]limiter.Rate{{Period: time.Hour, Limit: 1}, {Period: time.Hour, Limit: 1}}
	}
	var ls [2]*limiter.Limiter
	for i, prefix := range []string{"ulule-s", "ulule-m"} {
		store, err := ululeredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: prefix, MaxRetry: limiter.DefaultMaxRetry})
		if err != nil {
			return nil, err
		}
		ls[i] = limiter.New(store, rates[i])
	}
	return &limiterSetup{
		Config: itoa(rates[0].Limit) + "/" + rates[0].Period.String() + " + " + itoa(rates[1].Limit) + "/" + rates[1].Period.String(),
		NewCaller: func() decideFunc {
			return func(ctx context.Context, key string) (bool, error) {
				for _, l := range ls {
					res, err := l.Get(ctx, key)
					if err != nil || res.Reached {
						return false, err
					}
				}
				return true, nil
			}
		},
		Close: func() {},
	}, nil
}
