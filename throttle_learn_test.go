package slidelimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestThrottleLearn runs the learned block scenarios of Permit.Learn and
// of Transport's WithCalls on miniredis, Redis and Cluster: each has two
// Limiters on one Redis and prefix, two processes of a fleet.
func TestThrottleLearn(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) {
		c := miniClient(t)
		learnScenarios(t, func() engine.Client { return c })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		learnScenarios(t, func() engine.Client {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		learnScenarios(t, func() engine.Client { return cl.Client(t) })
	})
}

// refused is an upstream's 429 asking to wait retryAfter (Retry-After).
func refused(retryAfter string) *http.Response {
	h := http.Header{}
	h.Set("Retry-After", retryAfter)
	return &http.Response{StatusCode: http.StatusTooManyRequests, Header: h, Body: http.NoBody}
}

// learnRules never refuse a key in the scenarios: a call that waits
// waits for a learned block only.
const learnRules = "key(apikey):1000/min"

// heldWithin polls th.Allow for c until it is refused, for at most d,
// finishing what it admits meanwhile.
func heldWithin(t *testing.T, th *slidelimit.Throttle, c slidelimit.Call, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		p, ok, err := th.Allow(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		p.Finish(nil)
		if time.Now().After(deadline) {
			t.Fatalf("%v still admitted %v after the block", c.Keys, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func learnScenarios(t *testing.T, client func() engine.Client) {
	// procs returns the throttle "llm" in n processes.
	procs := func(t *testing.T, n int) []*slidelimit.Throttle {
		prefix := randomPrefix(t)
		var ths []*slidelimit.Throttle
		for range n {
			th, err := throttleLimiter(t, client(), prefix).Throttle("llm", learnRules)
			if err != nil {
				t.Fatal(err)
			}
			ths = append(ths, th)
		}
		return ths
	}
	fleet := func(t *testing.T) (a, b *slidelimit.Throttle) {
		ths := procs(t, 2)
		return ths[0], ths[1]
	}
	// picksK1 asserts that rounds of WaitAny(k0, k1) in th each admit k1
	// at once.
	picksK1 := func(t *testing.T, th *slidelimit.Throttle, rounds int) {
		t.Helper()
		for round := range rounds {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			p, i, err := th.WaitAny(ctx, keyCalls("k0", "k1")...)
			cancel()
			if err != nil || i != 1 {
				t.Fatalf("round %d: WaitAny(k0 blocked, k1 free) = %d, %v; want 1", round, i, err)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("round %d: WaitAny took %v with k1 free", round, took)
			}
			p.Finish(nil)
		}
	}

	t.Run("LearnSkipsKeyFleetWide", func(t *testing.T) {
		ths := procs(t, 3)
		a, b, c := ths[0], ths[1], ths[2]
		// b knows k0's lane before the block, as a busy process would.
		p, err := b.Wait(context.Background(), keyCall("k0"))
		if err != nil {
			t.Fatal(err)
		}
		p.Finish(nil)
		p, err = a.Wait(context.Background(), keyCall("k0"))
		if err != nil {
			t.Fatal(err)
		}
		p.Learn(refused("3600"))
		p.Learn(refused("3600")) // learned once
		p.Finish(nil)
		p.Learn(refused("3600")) // finished: nothing
		if n := a.Stats().Upstream429s; n != 1 {
			t.Errorf("Upstream429s = %d after one 429 learned, want 1", n)
		}
		// b's lane of k0 hears of the block by a message on the
		// throttle's channel, within milliseconds.
		heldWithin(t, b, keyCall("k0"), 2*time.Second)
		picksK1(t, b, 5)
		picksK1(t, a, 2)
		picksK1(t, c, 3) // c never called with k0 before
	})

	t.Run("LearnNothing", func(t *testing.T) {
		a, b := fleet(t)
		for _, resp := range []*http.Response{nil, {StatusCode: http.StatusOK, Header: http.Header{"Retry-After": {"3600"}}}} {
			p, err := a.Wait(context.Background(), keyCall("k0"))
			if err != nil {
				t.Fatal(err)
			}
			p.Learn(resp)
			p.Finish(nil)
		}
		if n := a.Stats().Upstream429s; n != 0 {
			t.Errorf("Upstream429s = %d after a 200 and nil, want 0", n)
		}
		if !admittedWithin(b, keyCall("k0"), time.Second) {
			t.Error("k0 held after a 200 with Retry-After")
		}
		var nilPermit *slidelimit.Permit
		nilPermit.Learn(refused("1"))
	})

	t.Run("TransportWithCalls", func(t *testing.T) {
		transportWithCalls(t, fleet)
	})
}

// transportWithCalls: a Transport with WithCalls in one process sends k0
// to an upstream that refuses it for an hour; the other process's
// Transport sends every request with k1 at once.
func transportWithCalls(t *testing.T, fleet func(*testing.T) (a, b *slidelimit.Throttle)) {
	var seen [2]atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Key") == "k0" {
			seen[0].Add(1)
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		seen[1].Add(1)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	// The keys a request may use are in its X-Keys header.
	calls := func(r *http.Request) ([]slidelimit.Call, error) {
		return keyCalls(strings.Split(r.Header.Get("X-Keys"), ",")...), nil
	}
	use := func(r *http.Request, i int) *http.Request {
		s := r.Clone(r.Context())
		s.Header.Set("X-Key", strings.Split(r.Header.Get("X-Keys"), ",")[i])
		return s
	}
	get := func(hc *http.Client, keys string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
		req.Header.Set("X-Keys", keys)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	a, b := fleet(t)
	ha := &http.Client{Transport: a.Transport(nil, slidelimit.WithCalls(calls, use))}
	hb := &http.Client{Transport: b.Transport(nil, slidelimit.WithCalls(calls, use))}
	defer ha.CloseIdleConnections()
	defer hb.CloseIdleConnections()
	if code := get(hb, "k1"); code != http.StatusOK { // warms b's connections
		t.Fatalf("warm-up: %d", code)
	}
	if code := get(ha, "k0"); code != http.StatusTooManyRequests {
		t.Fatalf("a's call with k0: %d, want 429", code)
	}
	before := 0
	for round := range 5 {
		if round == 1 {
			before = runtime.NumGoroutine() // b knows both lanes
		}
		start := time.Now()
		if code := get(hb, "k0,k1"); code != http.StatusOK {
			t.Fatalf("round %d: b's call: %d, want 200 (sent with k1)", round, code)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("round %d: b's call took %v with k1 free", round, took)
		}
	}
	if n := seen[0].Load(); n != 1 {
		t.Errorf("the upstream saw k0 %d times, want once (b skips the key a learned blocked)", n)
	}
	if n := a.Stats().Upstream429s; n != 1 {
		t.Errorf("a's Upstream429s = %d, want 1", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the calls, %d before\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}

	// WithCall and WithCalls together: every round trip fails, unsent.
	both := &http.Client{Transport: a.Transport(nil, slidelimit.WithCalls(calls, use),
		slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) { return keyCall("k1"), nil }))}
	req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
	req.Header.Set("X-Keys", "k1")
	if _, err := both.Do(req); !isKind(err, "call") {
		t.Errorf("WithCall and WithCalls: %v, want a ConfigError of kind call", err)
	}
	// A call lacking its key's value fails the round trip, unsent.
	req, _ = http.NewRequest(http.MethodGet, up.URL, nil)
	if _, err := hb.Do(req); !isKind(err, "call") {
		t.Errorf("no key: %v, want a ConfigError of kind call", err)
	}
	if n := seen[1].Load(); n != 6 {
		t.Errorf("the upstream saw k1 %d times, want 6", n)
	}
}

// TestThrottleLearnCapped: a Retry-After of years learned through
// Permit.Learn blocks the key for DefaultMaxUpstreamBlock at most, in
// Redis too, on miniredis and Redis.
func TestThrottleLearnCapped(t *testing.T) {
	t.Run("miniredis", func(t *testing.T) { learnCapped(t, miniClient(t)) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		learnCapped(t, c)
	})
}

func learnCapped(t *testing.T, client *redis.Client) {
	for _, v := range []string{"99999999", "999999999999999999999", fmt.Sprint(100 * 365 * 24 * 3600)} {
		t.Run(v, func(t *testing.T) {
			prefix := randomPrefix(t)
			th, err := throttleLimiter(t, client, prefix).Throttle("api", "key(k):100/s")
			if err != nil {
				t.Fatal(err)
			}
			p, err := th.Wait(context.Background(), slidelimit.Call{Keys: map[string]string{"k": "k1"}})
			if err != nil {
				t.Fatal(err)
			}
			p.Learn(refused(v))
			p.Finish(nil)
			ttls := blockTTLs(t, client, prefix)
			if len(ttls) != 1 || ttls[0] <= 0 || ttls[0] > slidelimit.DefaultMaxUpstreamBlock {
				t.Fatalf("learned block keys' time left: %v, want one of at most %v", ttls, slidelimit.DefaultMaxUpstreamBlock)
			}
		})
	}
}

// TestThrottleLearnClassStats: a 429 learned counts in the call's class
// too; a 503 without Retry-After counts and blocks nothing.
func TestThrottleLearnClassStats(t *testing.T) {
	client := miniClient(t)
	prefix := randomPrefix(t)
	th, err := throttleLimiter(t, client, prefix).Throttle("api", "key(k):100/s; share(critical):30%")
	if err != nil {
		t.Fatal(err)
	}
	call := slidelimit.Call{Keys: map[string]string{"k": "k1"}, Class: "critical"}
	learn := func(resp *http.Response) {
		p, err := th.Wait(context.Background(), call)
		if err != nil {
			t.Fatal(err)
		}
		p.Learn(resp)
		p.Finish(nil)
	}
	learn(&http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}})
	if ttls := blockTTLs(t, client, prefix); len(ttls) != 0 {
		t.Errorf("learned block keys' time left: %v, want none (the 503 asked no wait)", ttls)
	}
	if !admittedWithin(th, call, 100*time.Millisecond) {
		t.Error("k1 held after a 503 that asked no wait")
	}
	learn(refused("1"))
	if admittedWithin(th, call, 100*time.Millisecond) {
		t.Error("k1 admitted after a 429 asking 1 s")
	}
	if !admittedWithin(th, call, 3*time.Second) {
		t.Error("k1 still held 3 s after a block of 1 s")
	}
	s := th.Stats()
	if s.Upstream429s != 2 {
		t.Errorf("Upstream429s = %d, want 2", s.Upstream429s)
	}
	for _, c := range s.Classes {
		if want := map[bool]int64{true: 2}[c.Class == "critical"]; c.Upstream429s != want {
			t.Errorf("class %s: Upstream429s = %d, want %d", c.Class, c.Upstream429s, want)
		}
	}
}
