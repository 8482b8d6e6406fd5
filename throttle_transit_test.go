package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// exactUpstream counts calls when they arrive, in exact sliding windows
// of period, and answers 429 to a call that would pass limit.
type exactUpstream struct {
	period time.Duration
	limit  int

	mu      sync.Mutex
	arrived []time.Time // accepted calls, in arrival order
	refused int
	late    time.Duration // the longest a call took from its admission (X-Admitted) to here
}

func (u *exactUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	if ns, err := strconv.ParseInt(r.Header.Get("X-Admitted"), 10, 64); err == nil {
		u.late = max(u.late, now.Sub(time.Unix(0, ns)))
	}
	n := 0
	for i := len(u.arrived) - 1; i >= 0 && now.Sub(u.arrived[i]) < u.period; i-- {
		n++
	}
	if n >= u.limit {
		u.refused++
		w.WriteHeader(http.StatusTooManyRequests) // no Retry-After: no learned block
		return
	}
	u.arrived = append(u.arrived, now)
}

// busiest returns the most accepted calls in any window of u's period.
func (u *exactUpstream) busiest() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	most, j := 0, 0
	for i, at := range u.arrived {
		for at.Sub(u.arrived[j]) >= u.period {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// delayed sends each request after a random delay in [0, most]: its
// transit time.
type delayed struct {
	base http.RoundTripper
	most time.Duration
}

func (d delayed) RoundTrip(r *http.Request) (*http.Response, error) {
	time.Sleep(rand.N(d.most + 1))
	return d.base.RoundTrip(r)
}

// TestThrottleTransitBound: a throttle declared with an upstream's own
// limit (20/s, exact, counting at arrival) draws no 429 from it while
// every call arrives within the transit bound of its admission; the same
// throttle with a transit bound of 0 does, which shows the test can fail.
// Each call carries its admission's time (Decision.Time, Redis's clock),
// so the upstream knows how late it arrived.
func TestThrottleTransitBound(t *testing.T) {
	backends := []struct {
		name   string
		client func(t *testing.T) engine.Client
	}{
		{"miniredis", func(t *testing.T) engine.Client { return miniClient(t) }},
		{"redis", func(t *testing.T) engine.Client {
			srv := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		}},
		{"cluster", func(t *testing.T) engine.Client { return redistest.StartCluster(t).Client(t) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel() // each backend its own server and upstream
			t.Run("bound", func(t *testing.T) {
				// A call later than the bound voids the guarantee: a run
				// with one (a stall of the loaded machine) proves
				// nothing, and runs again. 200 ms leaves 160 ms over
				// the injected delay for Redis's reply and the loopback.
				const bound = 200 * time.Millisecond
				for try := 1; ; try++ {
					up := transitRun(t, b.client(t), []slidelimit.Option{slidelimit.WithTransitBound(bound)})
					if up.late > bound && try < 3 {
						t.Logf("run %d: a call arrived %v after its admission, beyond the bound; running again", try, up.late)
						continue
					}
					if up.late > bound {
						t.Fatalf("three runs each had a call arrive beyond the %v bound (last %v): the machine is too slow to tell", bound, up.late)
					}
					if up.refused > 0 {
						t.Errorf("the upstream answered %d 429s to a throttle whose calls all arrived within its bound", up.refused)
					}
					if most := up.busiest(); most > up.limit {
						t.Errorf("the upstream accepted %d calls in one window of %v, limit %d", most, up.period, up.limit)
					}
					return
				}
			})
			t.Run("none", func(t *testing.T) {
				// The control: without the bound the same load draws a
				// 429, so the test can tell. Whether a run does depends
				// on the delays drawn and the machine's pace: one of
				// three runs must.
				for try := 1; try <= 3; try++ {
					up := transitRun(t, b.client(t), []slidelimit.Option{slidelimit.WithTransitBound(0)})
					if up.refused > 0 {
						return
					}
					t.Logf("run %d: no 429 without a transit bound", try)
				}
				t.Error("no 429 without a transit bound in three runs: the test cannot tell")
			})
		})
	}
}

// transitRun calls an exact upstream of 20/s through a throttle of the
// same limit from 8 goroutines for 3.1 s, each call delayed 0–40 ms on
// its way after its admission, and returns the upstream. The run holds three refills of the
// window without the bound.
func transitRun(t *testing.T, client engine.Client, opts []slidelimit.Option) *exactUpstream {
	const (
		workers = 8
		run     = 3100 * time.Millisecond
	)
	up := &exactUpstream{period: time.Second, limit: 20}
	srv := httptest.NewServer(up)
	defer srv.Close()
	lim := throttleLimiter(t, client, randomPrefix(t), opts...)
	th, err := lim.Throttle("upstream", fmt.Sprintf("global:%d/1s", up.limit))
	if err != nil {
		t.Fatal(err)
	}
	// Wait, send, Finish: what Transport does, with the admission's time
	// on the request.
	hc := &http.Client{Transport: delayed{base: srv.Client().Transport, most: 40 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p, err := th.Wait(ctx, slidelimit.Call{})
				if err != nil {
					if ctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("X-Admitted", strconv.FormatInt(p.Decision().Time.UnixNano(), 10))
				resp, err := hc.Do(req)
				p.Finish(nil)
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Errorf("%d calls failed before the end of the run", n)
	}
	up.mu.Lock()
	accepted, refill := len(up.arrived), time.Duration(0)
	if k := (accepted - 1) / up.limit; k > 0 {
		// The throttle admits a window's limit at once, then the next as
		// the first calls leave its window: the limit every refill.
		refill = up.arrived[k*up.limit].Sub(up.arrived[0]) / time.Duration(k)
	}
	up.mu.Unlock()
	t.Logf("accepted %d in %v, busiest window of %v %d (limit %d), the limit every %v (%.1f%% of the limit), 429s %d, latest arrival %v after admission",
		accepted, elapsed.Round(time.Millisecond), up.period, up.busiest(), up.limit, refill.Round(time.Millisecond),
		100*float64(up.period)/float64(refill), up.refused, up.late.Round(time.Millisecond))
	return up
}

// TestThrottleTransitBoundOption: a negative transit bound is a
// *ConfigError of kind "option"; 0 is accepted.
func TestThrottleTransitBoundOption(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	_, err := slidelimit.New(c, slidelimit.WithTransitBound(-time.Millisecond))
	var ce *slidelimit.ConfigError
	if !errors.As(err, &ce) || ce.Kind != "option" || !strings.Contains(err.Error(), "transit bound") {
		t.Errorf("WithTransitBound(-1ms): %v, want a *ConfigError of kind option", err)
	}
	lim, err := slidelimit.New(c, slidelimit.WithTransitBound(0))
	if err != nil {
		t.Fatalf("WithTransitBound(0): %v", err)
	}
	lim.Close()
}
