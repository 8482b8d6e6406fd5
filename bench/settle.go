package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// slidelimitSettled is the byte quota of slidelimitBQ with every admitted
// request settled after its decision (engine.Engine.Finish with Outcome.Actual): admitted
// against an estimate of 1 KiB, settled to half of it, as a download the
// client abandoned half-way would be. A decision is the Allow and, for an
// admission, the Settle.
const slidelimitSettled = "slidelimit settled byte quota"

func init() {
	slidelimitLibraries = append(slidelimitLibraries, library{Name: slidelimitSettled,
		Setup: func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
			if c.Deny {
				return newSettled(rdb, []rules.Window{gw(1024, 24*time.Hour, 15*time.Minute)})
			}
			return newSettled(rdb, []rules.Window{gw(2<<30, 24*time.Hour, 15*time.Minute)})
		}})
}

// newSettled is newSlidelimit's byte quota (1 KiB per request) with each
// admission settled to 512 bytes.
func newSettled(rdb *redis.Client, windows []rules.Window) (*limiterSetup, error) {
	s, err := newSlidelimit(rdb, nil, "bytes", 1024, windows)
	if err != nil {
		return nil, err
	}
	eng, err := engine.New(rdb)
	if err != nil {
		s.Close()
		return nil, err
	}
	lim := rules.Rule{Kind: rules.Key, Name: "bench", Cost: "bytes", Windows: windows}
	s.Config = "[bytes, 1024 per request, settled to 512] " + s.Config[len("[bytes, 1024 per request] "):]
	closeFirst := s.Close
	s.Close = func() { closeFirst(); eng.Close() }
	s.NewCaller = func() decideFunc {
		req := engine.Request{
			Scope:  "bench",
			Checks: []engine.Check{{Rule: lim, Cost: 1024}},
			Fail:   rules.FailClosed,
		}
		actual := []int64{512}
		return func(ctx context.Context, key string) (bool, error) {
			req.Checks[0].Subject = key
			d, err := eng.Allow(ctx, req)
			if err != nil {
				return false, err
			}
			if d.Source != "redis" && (d.Source != "cache" || d.Allowed) {
				return false, fmt.Errorf("decision from source %v, not from Redis", d.Source)
			}
			if d.Allowed {
				if err := eng.Finish(ctx, d, engine.Outcome{Actual: actual}); err != nil {
					return false, err
				}
			}
			return d.Allowed, nil
		}
	}
	return s, nil
}
