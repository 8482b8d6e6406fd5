package slidelimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// upstream is a fake paid API: it enforces its own exact sliding windows on
// requests and on tokens, where a call's tokens are known only to it and
// sent back in the X-Usage-Tokens header.
type upstream struct {
	period   time.Duration
	requests int
	tokens   int64

	mu       sync.Mutex
	log      []upstreamEntry // admitted calls, oldest first
	n        int64
	refused  int
	accepted int64 // tokens
	byWorker map[string]int
	last     time.Time
}

type upstreamEntry struct {
	at     time.Time
	tokens int64
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/warm" {
		return // opens a connection, counts nowhere
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	keep := u.log[:0]
	var used int64
	for _, e := range u.log {
		if now.Sub(e.at) < u.period {
			keep = append(keep, e)
			used += e.tokens
		}
	}
	u.log = keep
	u.n++
	tokens := 50 + u.n*37%101 // 50..150, known only here
	if len(u.log)+1 > u.requests || used+tokens > u.tokens {
		u.refused++
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	u.log = append(u.log, upstreamEntry{now, tokens})
	u.accepted += tokens
	u.byWorker[r.Header.Get("X-Worker")]++
	u.last = now
	w.Header().Set("X-Usage-Tokens", strconv.FormatInt(tokens, 10))
	io.WriteString(w, "ok")
}

// TestThrottleEndToEnd: three processes (Limiters) of 8 workers each call
// an upstream through one throttle's Transport. The upstream must refuse
// nothing, its token limit must be used to at least 85%, and every worker
// must get at least half the fair share.
func TestThrottleEndToEnd(t *testing.T) {
	// Each backend its own server, upstream and prefix: they run side by
	// side, waiting on the upstream's windows.
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		c := miniClient(t)
		// miniredis runs the Lua script in a Go interpreter, many times
		// slower than redis-server (more so under the race detector).
		throttleEndToEnd(t, true, func() engine.Client { return c })
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		throttleEndToEnd(t, false, func() engine.Client {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		throttleEndToEnd(t, false, func() engine.Client { return cl.Client(t) })
	})
}

func throttleEndToEnd(t *testing.T, slow bool, client func() engine.Client) {
	const (
		processes = 3
		workers   = 24
		estimate  = 150
	)
	prefix := randomPrefix(t)
	// The upstream allows 10,000 tokens and 120 requests per 2 s, about 50
	// calls a second, for 2 windows. A slow backend (miniredis; or a
	// loaded machine: under the race detector a script call can take
	// 100 ms) gets a quarter of that rate for 3 windows: the criteria
	// stay the same.
	up := &upstream{period: 2 * time.Second, requests: 120, tokens: 10000, byWorker: map[string]int{}}
	run := 2 * up.period
	if l := medianLatency(t, throttleLimiter(t, client(), prefix)); slow || l > 3*time.Millisecond {
		up.requests, up.tokens, run = 30, 2500, 3*up.period
		t.Logf("a slow backend (%v a decision): a quarter of the rate for %v", l, run)
	}
	// The upstream's own limits, with a transit bound for a loaded
	// machine, where a decision's reply alone can take 100 ms.
	rulesText := fmt.Sprintf("global:%d/2s; global[tokens]:%d/2s", up.requests, up.tokens)
	srv := httptest.NewServer(up)
	defer srv.Close()
	var ths []*slidelimit.Throttle
	for range processes {
		lim := throttleLimiter(t, client(), prefix, slidelimit.WithTransitBound(200*time.Millisecond))
		th, err := lim.Throttle("upstream", rulesText)
		if err != nil {
			t.Fatal(err)
		}
		ths = append(ths, th)
	}
	// Enough idle connections for every worker: a request that dials
	// reaches the upstream later than one that does not.
	base := &http.Transport{MaxIdleConnsPerHost: workers}
	defer base.CloseIdleConnections()
	// Open the workers' connections first: the first requests of a cold
	// client reach the upstream much later than the throttle admitted
	// them (a dial, goroutines to start), and the windows of the next
	// period would then overlap theirs.
	var warm sync.WaitGroup
	for range workers {
		warm.Go(func() {
			if resp, err := (&http.Client{Transport: base}).Get(srv.URL + "/warm"); err == nil {
				resp.Body.Close()
			}
		})
	}
	warm.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	var errs atomic.Int64
	for i := range workers {
		th := ths[i%processes]
		hc := &http.Client{Transport: th.Transport(base,
			slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
				return slidelimit.Call{Costs: map[string]int64{"tokens": estimate}}, nil
			}),
			slidelimit.WithActual(func(r *http.Response) map[string]int64 {
				n, err := strconv.ParseInt(r.Header.Get("X-Usage-Tokens"), 10, 64)
				if err != nil {
					return nil
				}
				return map[string]int64{"tokens": n}
			}))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				req.Header.Set("X-Worker", strconv.Itoa(i))
				resp, err := hc.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	up.mu.Lock()
	defer up.mu.Unlock()
	elapsed := up.last.Sub(start)
	windows := float64((elapsed + up.period - 1) / up.period)
	util := float64(up.accepted) / (windows * float64(up.tokens))
	var total int
	least := -1
	for i := range workers {
		n := up.byWorker[strconv.Itoa(i)]
		total += n
		if least < 0 || n < least {
			least = n
		}
	}
	fair := float64(total) / workers
	var calls, admitted int64
	for _, th := range ths {
		s := th.Stats()
		calls += s.RedisCalls
		admitted += s.Admitted
	}
	t.Logf("calls %d, 429s %d, tokens %d in %v (%.0f windows): utilization %.1f%%; fair share %.1f, least %d; Redis calls per admitted call %.2f",
		total, up.refused, up.accepted, elapsed.Round(time.Millisecond), windows, 100*util, fair, least, float64(calls)/float64(max(admitted, 1)))
	if up.refused > 0 {
		t.Errorf("the upstream refused %d calls", up.refused)
	}
	if errs.Load() > 0 {
		t.Errorf("%d round trips failed", errs.Load())
	}
	if util < 0.85 {
		t.Errorf("token utilization %.1f%%, want at least 85%%", 100*util)
	}
	if float64(least) < fair/2 {
		t.Errorf("a worker made %d calls, below half the fair share %.1f", least, fair)
	}
}

// medianLatency is the median time lim's engine takes to decide, alone.
func medianLatency(t *testing.T, lim *slidelimit.Limiter) time.Duration {
	var ls []time.Duration
	for range 15 {
		start := time.Now()
		if _, err := enginePeek(engineOf(lim), context.Background(), engine.One("calibrate", rules.Global, "global",
			rules.Window{Limit: 10, Period: time.Second})); err != nil {
			t.Fatal(err)
		}
		ls = append(ls, time.Since(start))
	}
	slices.Sort(ls)
	return ls[len(ls)/2]
}
