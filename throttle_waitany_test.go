package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// waitAnyRules holds one call per key at a time and counts every call of
// a key in a minute's window, so that what a race counted shows there.
const waitAnyRules = "key(apikey):1 concurrent; key(apikey):100/min"

func keyCall(k string) slidelimit.Call {
	return slidelimit.Call{Keys: map[string]string{"apikey": k}}
}

func keyCalls(keys ...string) []slidelimit.Call {
	cs := make([]slidelimit.Call, len(keys))
	for i, k := range keys {
		cs[i] = keyCall(k)
	}
	return cs
}

// keyUsed returns what the windows of key k hold in th: its calls in
// flight and its calls of the last minute.
func keyUsed(t *testing.T, lim *slidelimit.Limiter, th *slidelimit.Throttle, k string) (inFlight, minute int64) {
	t.Helper()
	req, err := slidelimit.ThrottleRequest(th, keyCall(k))
	if err != nil {
		t.Fatal(err)
	}
	d, err := enginePeek(engineOf(lim), context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ws := range d.Windows {
		if ws.Window.Concurrent {
			inFlight = ws.Used
		} else {
			minute = ws.Used
		}
	}
	return inFlight, minute
}

// TestThrottleWaitAny runs the WaitAny scenarios on miniredis, Redis and
// Cluster.
func TestThrottleWaitAny(t *testing.T) {
	// Each backend its own server: they run side by side.
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		c := miniClient(t)
		waitAnyScenarios(t, func() engine.Client { return c })
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		waitAnyScenarios(t, func() engine.Client {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		waitAnyScenarios(t, func() engine.Client { return cl.Client(t) })
	})
}

func waitAnyScenarios(t *testing.T, client func() engine.Client) {
	setup := func(t *testing.T) (*slidelimit.Limiter, *slidelimit.Throttle) {
		lim := throttleLimiter(t, client(), randomPrefix(t))
		th, err := lim.Throttle("llm", waitAnyRules)
		if err != nil {
			t.Fatal(err)
		}
		return lim, th
	}
	hold := func(t *testing.T, th *slidelimit.Throttle, k string) *slidelimit.Permit {
		t.Helper()
		p, err := th.Wait(context.Background(), keyCall(k))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("FirstFitWins", func(t *testing.T) {
		lim, th := setup(t)
		defer hold(t, th, "k0").Finish(nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		p, i, err := th.WaitAny(ctx, keyCalls("k0", "k1")...)
		if err != nil || i != 1 {
			t.Fatalf("WaitAny(k0 full, k1 free) = %d, %v; want 1", i, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("WaitAny took %v with k1 free", took)
		}
		defer p.Finish(nil)
		if f, m := keyUsed(t, lim, th, "k0"); f != 1 || m != 1 {
			t.Errorf("k0 holds %d in flight, %d this minute; want 1, 1 (its held call only)", f, m)
		}
		if f, m := keyUsed(t, lim, th, "k1"); f != 1 || m != 1 {
			t.Errorf("k1 holds %d in flight, %d this minute; want 1, 1", f, m)
		}
	})

	t.Run("LosersCountNothing", func(t *testing.T) {
		// Every key is free: each call is admitted in the race, and only
		// the winner may stay counted.
		lim, th := setup(t)
		var keys []string
		for i := range 8 {
			keys = append(keys, fmt.Sprintf("k%d", i))
		}
		for round := range 5 {
			p, i, err := th.WaitAny(context.Background(), keyCalls(keys...)...)
			if err != nil || i < 0 || i >= len(keys) {
				t.Fatalf("round %d: WaitAny = %d, %v", round, i, err)
			}
			var inFlight, minute int64
			for _, k := range keys {
				f, m := keyUsed(t, lim, th, k)
				inFlight += f
				minute += m
			}
			if f, _ := keyUsed(t, lim, th, keys[i]); f != 1 {
				t.Errorf("round %d: the winner %s holds %d in flight, want 1", round, keys[i], f)
			}
			if inFlight != 1 || minute != int64(round+1) {
				t.Errorf("round %d: the keys hold %d in flight and %d this minute, want 1 and %d",
					round, inFlight, minute, round+1)
			}
			p.Finish(nil)
		}
	})

	t.Run("FirstToFreeWins", func(t *testing.T) {
		lim, th := setup(t)
		held := []*slidelimit.Permit{hold(t, th, "k0"), hold(t, th, "k1"), hold(t, th, "k2")}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		type result struct {
			p   *slidelimit.Permit
			i   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			p, i, err := th.WaitAny(ctx, keyCalls("k0", "k1", "k2")...)
			done <- result{p, i, err}
		}()
		select {
		case r := <-done:
			t.Fatalf("WaitAny returned %d, %v with every key full", r.i, r.err)
		case <-time.After(200 * time.Millisecond):
		}
		held[2].Finish(nil)
		r := <-done
		if r.err != nil || r.i != 2 {
			t.Fatalf("WaitAny = %d, %v; want 2, the key freed", r.i, r.err)
		}
		if ctx.Err() != nil {
			t.Fatal("WaitAny returned after its context ended")
		}
		r.p.Finish(nil)
		held[0].Finish(nil)
		held[1].Finish(nil)
		for k, want := range map[string]int64{"k0": 1, "k1": 1, "k2": 2} {
			if _, m := keyUsed(t, lim, th, k); m != want {
				t.Errorf("%s counted %d calls this minute, want %d", k, m, want)
			}
		}
	})

	t.Run("CancelCountsNothing", func(t *testing.T) {
		lim, th := setup(t)
		held := []*slidelimit.Permit{hold(t, th, "k0"), hold(t, th, "k1")}
		// A first WaitAny grows the client's pool of connections (and a
		// miniredis's goroutines per connection); the second must leave
		// nothing more behind.
		warm, cancelWarm := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancelWarm()
		if _, _, err := th.WaitAny(warm, keyCalls("k0", "k1")...); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitAny with every key full = %v, want the context's error", err)
		}
		before := runtime.NumGoroutine()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		p, i, err := th.WaitAny(ctx, keyCalls("k0", "k1")...)
		if !errors.Is(err, context.DeadlineExceeded) || i != -1 || p != nil {
			t.Fatalf("WaitAny with every key full = %v, %d, %v; want nil, -1, the context's error", p, i, err)
		}
		for _, k := range []string{"k0", "k1"} {
			if f, m := keyUsed(t, lim, th, k); f != 1 || m != 1 {
				t.Errorf("%s holds %d in flight, %d this minute; want 1, 1 (its held call only)", k, f, m)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutines after WaitAny ended, %d before\n%s", n, before, buf[:runtime.Stack(buf, true)])
		}
		for _, p := range held {
			p.Finish(nil)
		}
	})

	t.Run("Errors", func(t *testing.T) {
		lim, th := setup(t)
		ctx := context.Background()
		if p, i, err := th.WaitAny(ctx); !isKind(err, "call") || i != -1 || p != nil {
			t.Errorf("WaitAny() = %v, %d, %v; want a ConfigError of kind call and -1", p, i, err)
		}
		bad := []slidelimit.Call{keyCall("k0"), {Keys: map[string]string{"other": "x"}}}
		if p, i, err := th.WaitAny(ctx, bad...); !isKind(err, "call") || i != 1 || p != nil {
			t.Errorf("WaitAny(good, bad) = %v, %d, %v; want a ConfigError of kind call and 1", p, i, err)
		}
		if f, m := keyUsed(t, lim, th, "k0"); f != 0 || m != 0 {
			t.Errorf("k0 holds %d in flight, %d this minute after a call's error; want nothing", f, m)
		}
	})

	t.Run("LearnedBlockSkipped", func(t *testing.T) {
		_, th := setup(t)
		// The upstream blocks each key for the seconds its request names.
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", r.URL.Query().Get("s"))
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		defer up.Close()
		hc := &http.Client{Transport: th.Transport(nil, slidelimit.WithCall(func(r *http.Request) (slidelimit.Call, error) {
			return keyCall(r.URL.Query().Get("k")), nil
		}))}
		block := func(k string, secs int) {
			resp, err := hc.Get(fmt.Sprintf("%s/?k=%s&s=%d", up.URL, k, secs))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		block("k0", 3600)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		p, i, err := th.WaitAny(ctx, keyCalls("k0", "k1")...)
		if err != nil || i != 1 {
			t.Fatalf("WaitAny(k0 blocked, k1 free) = %d, %v; want 1", i, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("WaitAny took %v with k1 free", took)
		}
		p.Finish(nil)

		// Every key blocked: the first block to end decides.
		block("k2", 1)
		block("k3", 3600)
		start = time.Now()
		p, i, err = th.WaitAny(ctx, keyCalls("k0", "k3", "k2")...)
		if err != nil || i != 2 {
			t.Fatalf("WaitAny(all blocked, k2 for 1 s) = %d, %v; want 2", i, err)
		}
		if took := time.Since(start); took < 500*time.Millisecond {
			t.Errorf("WaitAny took %v, under k2's block of 1 s", took)
		}
		p.Finish(nil)
	})
}
