package main

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/httprate"
	httprateredis "github.com/go-chi/httprate-redis"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// decideFunc makes one rate-limit decision for key. It is used by one
// goroutine only.
type decideFunc func(ctx context.Context, key string) (allowed bool, err error)

// limiterSetup is a limiter configured for one case: NewCaller returns a
// decideFunc for one caller goroutine, Close releases what the limiter
// holds (never the shared Redis client).
type limiterSetup struct {
	NewCaller func() decideFunc
	Close     func()
	// Config describes the limits used, for the README and the results.
	Config string
}

// library is one rate limiter under test.
type library struct {
	Name string
	// Setup configures the library for case c on client rdb.
	Setup func(ctx context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error)
}

// Names of the peers slidelimit's rows are divided by (see ratioPeers).
const (
	redisRate   = "redis_rate/v10"
	ulule       = "ulule/limiter/v3"
	redisRate2W = "redis_rate/v10 2-window"
	ulule2W     = "ulule/limiter/v3 2-window"
)

// peerLibraries are the libraries slidelimit is compared with.
var peerLibraries = []library{
	{Name: redisRate, Setup: setupRedisRate},
	{Name: ulule, Setup: setupUlule},
	{Name: redisRate2W, Setup: setupRedisRate2W},
	{Name: ulule2W, Setup: setupUlule2W},
	// The seed's plain script (plain.go), 2-window and 1-window.
	{Name: plain2W, Setup: setupPlain(time.Minute, time.Second)},
	{Name: plain1W, Setup: setupPlain(time.Minute)},
	{Name: "httprate-redis", Setup: setupHTTPRate},
	{Name: "httprate-redis counter", Setup: setupHTTPRateCounter},
}

// setupRedisRate configures github.com/go-redis/redis_rate/v10 (GCRA, one
// window). The allowing limit is 1e6/s with a burst of 1e6, high enough
// never to deny, but not so high that GCRA's rounding skips the write.
func setupRedisRate(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	lim := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	if c.Deny {
		limit = redis_rate.Limit{Rate: 1, Burst: 1, Period: time.Hour}
	}
	return &limiterSetup{
		Config: limit.String(),
		NewCaller: func() decideFunc {
			return func(ctx context.Context, key string) (bool, error) {
				res, err := lim.Allow(ctx, key, limit)
				if err != nil {
					return false, err
				}
				return res.Allowed > 0, nil
			}
		},
		Close: func() {},
	}, nil
}

// setupUlule configures github.com/ulule/limiter/v3 with its go-redis v9
// store (fixed window; every call, denied or not, increments the counter).
// The allowing limit is 1e6/s expressed per minute, so that keys outlive
// the run and their memory can be measured.
func setupUlule(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	store, err := ululeredis.NewStoreWithOptions(rdb, limiter.StoreOptions{
		Prefix:   "ulule",
		MaxRetry: limiter.DefaultMaxRetry,
	})
	if err != nil {
		return nil, err
	}
	rate := limiter.Rate{Period: time.Minute, Limit: 60_000_000}
	if c.Deny {
		rate = limiter.Rate{Period: time.Hour, Limit: 1}
	}
	l := limiter.New(store, rate)
	return &limiterSetup{
		Config: itoa(rate.Limit) + "/" + rate.Period.String(),
		NewCaller: func() decideFunc {
			return func(ctx context.Context, key string) (bool, error) {
				res, err := l.Get(ctx, key)
				if err != nil {
					return false, err
				}
				return !res.Reached, nil
			}
		},
		Close: func() {},
	}, nil
}

// httprateCounter returns an httprate-redis counter with its in-memory
// fallback disabled, so that every decision is made by Redis, and the limit
// and window of case c: never reached when allowing, reached at once when
// denying.
func httprateCounter(rdb *redis.Client, c benchCase) (httprate.LimitCounter, int, time.Duration) {
	counter := httprateredis.NewCounter(&httprateredis.Config{
		Client:           rdb,
		PrefixKey:        "httprate",
		FallbackDisabled: true,
	})
	if c.Deny {
		return counter, 1, time.Hour
	}
	return counter, 60_000_000, time.Minute
}

// setupHTTPRate configures github.com/go-chi/httprate-redis (sliding window
// counter: the current and the previous fixed window, weighted) behind
// httprate.RateLimiter. Decisions go through RateLimiter.OnLimit, the
// function its HTTP middleware calls, with a reused request and a response
// writer that discards what it is given: no HTTP server or handler is
// involved. The local in-memory fallback is disabled so that every decision
// is made by Redis. Note that OnLimit holds a mutex of the RateLimiter
// across its two round trips (MGET, then MULTI/INCRBY/EXPIRE/EXEC), so a
// RateLimiter makes one decision at a time per process.
func setupHTTPRate(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	counter, limit, window := httprateCounter(rdb, c)
	rl := httprate.NewRateLimiter(limit, window,
		httprate.WithLimitCounter(counter),
		httprate.WithErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
			w.(*discardWriter).err = err
		}),
	)
	return &limiterSetup{
		Config: itoa(limit) + "/" + window.String(),
		NewCaller: func() decideFunc {
			w := &discardWriter{h: make(http.Header, 8)}
			r, _ := http.NewRequest(http.MethodGet, "/", nil)
			return func(_ context.Context, key string) (bool, error) {
				w.err = nil
				limited := rl.OnLimit(w, r, key)
				return !limited, w.err
			}
		},
		// Not counter.Close: it would close the shared client.
		Close: func() {},
	}, nil
}

// setupHTTPRateCounter uses the httprate-redis counter directly, with the
// sliding-window-counter arithmetic of httprate.RateLimiter (Get the
// current and previous windows, weight the previous one, IncrementBy when
// admitted) but without the RateLimiter's mutex and response headers: the
// cost of the Redis counter itself when decisions run concurrently. The
// check and the increment are then not atomic, so concurrent callers may
// overshoot the limit; this variant only shows the cost.
func setupHTTPRateCounter(_ context.Context, rdb *redis.Client, c benchCase) (*limiterSetup, error) {
	counter, limit, window := httprateCounter(rdb, c)
	counter.Config(limit, window)
	return &limiterSetup{
		Config: itoa(limit) + "/" + window.String() + ", counter without the RateLimiter",
		NewCaller: func() decideFunc {
			return func(_ context.Context, key string) (bool, error) {
				now := time.Now().UTC()
				curr := now.Truncate(window)
				prev := curr.Add(-window)
				currCount, prevCount, err := counter.Get(key, curr, prev)
				if err != nil {
					return false, err
				}
				diff := now.Sub(curr)
				rate := float64(prevCount)*(float64(window)-float64(diff))/float64(window) + float64(currCount)
				if int(math.Round(rate))+1 > limit {
					return false, nil
				}
				return true, counter.IncrementBy(key, curr, 1)
			}
		},
		Close: func() {},
	}, nil
}

// discardWriter is an http.ResponseWriter that keeps headers (OnLimit sets
// them) and discards the rest; err receives an error reported by the
// limiter's error handler.
type discardWriter struct {
	h   http.Header
	err error
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

func itoa[T ~int | ~int64](n T) string {
	return strconv.FormatInt(int64(n), 10)
}
