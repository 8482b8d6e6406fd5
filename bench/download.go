package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// The download group of issue #28, user:N/min,M concurrent;
// user[bytes]:100Gi/d (a rate window, an in-flight window and a byte
// quota), measured twice: its admission alone (Allow), and its whole life
// (Allow, then Finish settling to half the 1 MiB estimate and releasing
// the slot, as the middleware does after the handler). Each decision of
// the second is an Allow and, once admitted, its Finish. The slot limit is
// above the callers so that allow cases never deny (admissions alone never
// release: their slots leave with the lease); the deny case has a 1 MiB
// byte quota, which the first admission of a subject fills.
const (
	slidelimitDL       = "slidelimit download admission"
	slidelimitDLFinish = "slidelimit download admission+finish"
)

func init() {
	slidelimitLibraries = append(slidelimitLibraries,
		library{Name: slidelimitDL, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupDownload(rdb, c, false)
		}},
		library{Name: slidelimitDLFinish, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupDownload(rdb, c, true)
		}})
}

func setupDownload(rdb *redis.Client, c benchCase, finish bool) (*limiterSetup, error) {
	eng, err := engine.New(rdb)
	if err != nil {
		return nil, err
	}
	quota := int64(100 << 30)
	if c.Deny {
		quota = 1 << 20
	}
	const slots = 1024
	user := rules.Limiter{Kind: rules.Key, Name: "bench", Windows: []rules.Window{
		w(unreachable, time.Minute), {Limit: slots, Concurrent: true},
	}}
	bytes := rules.Limiter{Kind: rules.Key, Name: "bench", Cost: "bytes", Windows: []rules.Window{w(quota, 24*time.Hour)}}
	what := "acquire"
	if finish {
		what = "acquire + finish (settle to 512 KiB, release)"
	}
	return &limiterSetup{
		Config: fmt.Sprintf("%d/1m + %d concurrent; bytes %d/1d, 1 MiB per request, %s", int64(unreachable), slots, quota, what),
		NewCaller: func() decideFunc {
			req := engine.Request{Scope: "bench", Checks: []engine.Check{{Limiter: user}, {Limiter: bytes, Cost: 1 << 20}}, Fail: rules.FailClosed}
			out := engine.Outcome{Actual: []int64{-1, 512 << 10}}
			return func(ctx context.Context, key string) (bool, error) {
				req.Checks[0].Subject, req.Checks[1].Subject = key, key
				d, err := eng.Allow(ctx, req)
				if err != nil {
					return false, err
				}
				if d.Source != engine.FromRedis && (d.Source != engine.FromCache || d.Allowed) {
					return false, fmt.Errorf("decision from source %v, not from Redis", d.Source)
				}
				if finish && d.Allowed {
					if err := eng.Finish(ctx, d, out); err != nil {
						return false, err
					}
				}
				return d.Allowed, nil
			}
		},
		Close: func() { eng.Close() },
	}, nil
}
