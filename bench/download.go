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
// quota), measured three times: its admission alone (Allow), and its whole
// life (Allow, then a finish settling to half the 1 MiB estimate and
// releasing the slot), finished with Finish, which waits for Redis, and
// with FinishAsync, which queues the finish for the next script call (or
// sends it alone within 1 ms), as the middleware does after
// the handler. Each decision of the last two is an Allow and, once
// admitted, its finish. The slot limit is above the callers so that allow
// cases never deny (admissions alone never release: their slots leave
// with the lease); the deny case has a 1 MiB byte quota, which the first
// admission of a subject fills.
const (
	slidelimitDL       = "slidelimit download admission"
	slidelimitDLFinish = "slidelimit download admission+finish"
	slidelimitDLAsync  = "slidelimit download admission+finishasync"
)

// How a download case finishes an admitted request.
const (
	noFinish = iota
	syncFinish
	asyncFinish
)

func init() {
	slidelimitLibraries = append(slidelimitLibraries,
		library{Name: slidelimitDL, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupDownload(rdb, c, noFinish)
		}},
		library{Name: slidelimitDLFinish, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupDownload(rdb, c, syncFinish)
		}},
		library{Name: slidelimitDLAsync, Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			return setupDownload(rdb, c, asyncFinish)
		}})
}

func setupDownload(rdb *redis.Client, c benchCase, finish int) (*limiterSetup, error) {
	eng, err := engine.New(rdb)
	if err != nil {
		return nil, err
	}
	quota := int64(100 << 30)
	if c.Deny {
		quota = 1 << 20
	}
	const slots = 1024
	user := rules.Rule{Kind: rules.Key, Name: "bench", Windows: []rules.Window{
		w(unreachable, time.Minute), {Limit: slots, Concurrent: true},
	}}
	bytes := rules.Rule{Kind: rules.Key, Name: "bench", Cost: "bytes", Windows: []rules.Window{w(quota, 24*time.Hour)}}
	what := "acquire"
	switch finish {
	case syncFinish:
		what = "acquire + Finish (settle to 512 KiB, release)"
	case asyncFinish:
		what = "acquire + FinishAsync (settle to 512 KiB, release)"
	}
	return &limiterSetup{
		Config: fmt.Sprintf("%d/1m + %d concurrent; bytes %d/1d, 1 MiB per request, %s", int64(unreachable), slots, quota, what),
		NewCaller: func() decideFunc {
			req := engine.Request{Scope: "bench", Checks: []engine.Check{{Rule: user}, {Rule: bytes, Cost: 1 << 20}}, Fail: rules.FailClosed}
			out := engine.Outcome{Actual: []int64{-1, 512 << 10}}
			return func(ctx context.Context, key string) (bool, error) {
				req.Checks[0].Subject, req.Checks[1].Subject = key, key
				d, err := eng.Allow(ctx, req)
				if err != nil {
					return false, err
				}
				if d.Source != "redis" && (d.Source != "cache" || d.Allowed) {
					return false, fmt.Errorf("decision from source %v, not from Redis", d.Source)
				}
				switch {
				case !d.Allowed:
				case finish == syncFinish:
					if err := eng.Finish(ctx, d, out); err != nil {
						return false, err
					}
				case finish == asyncFinish:
					eng.FinishAsync(d, out)
				}
				return d.Allowed, nil
			}
		},
		Close: func() { eng.Close() },
	}, nil
}
