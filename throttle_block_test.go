package slidelimit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/role"
)

// hostileUpstream answers its first n requests 429 with header h = v, and
// the others 200.
func hostileUpstream(t *testing.T, n int64, h, v string) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= n {
			w.Header().Set(h, v)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func getThrough(t *testing.T, hc *http.Client, url string) int {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// blockTTLs returns the time left of every learned block key under
// prefix.
func blockTTLs(t *testing.T, client *redis.Client, prefix string) []time.Duration {
	t.Helper()
	ctx := context.Background()
	keys, err := client.Keys(ctx, prefix+"throttle:*:b").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for _, k := range keys {
		d, err := client.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// TestThrottleUpstreamBlockCapped: retry-after-ms of 31 years (or a
// Retry-After of 3 years) blocks the lane for one hour at most, in Redis
// too, where processes started later read it.
func TestThrottleUpstreamBlockCapped(t *testing.T) {
	for _, tc := range []struct{ header, value string }{
		{"retry-after-ms", "999999999999"},
		{"retry-after-ms", "9e11"},
		{"Retry-After", "99999999"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			client := miniClient(t)
			prefix := randomPrefix(t)
			srv, _ := hostileUpstream(t, 1, tc.header, tc.value)
			th, err := throttleLimiter(t, client, prefix).Throttle("api", "key(k):100/s")
			if err != nil {
				t.Fatal(err)
			}
			hc := &http.Client{Transport: th.Transport(nil, slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
				return slidelimit.Call{Keys: map[string]string{"k": "k1"}}, nil
			}))}
			if code := getThrough(t, hc, srv.URL); code != http.StatusTooManyRequests {
				t.Fatalf("first call: %d", code)
			}
			ttls := blockTTLs(t, client, prefix)
			if len(ttls) != 1 || ttls[0] <= 0 || ttls[0] > slidelimit.DefaultMaxUpstreamBlock {
				t.Fatalf("learned block keys' time left: %v, want one of at most %v", ttls, slidelimit.DefaultMaxUpstreamBlock)
			}
		})
	}
}

// TestThrottleMaxUpstreamBlock: with WithMaxUpstreamBlock(1s), an
// upstream asking for 31 years holds another process's calls for 1 s.
func TestThrottleMaxUpstreamBlock(t *testing.T) {
	client := miniClient(t)
	prefix := randomPrefix(t)
	srv, calls := hostileUpstream(t, 1, "retry-after-ms", "999999999999")
	var hcs []*http.Client
	for range 2 {
		th, err := throttleLimiter(t, client, prefix).Throttle("api", "global:100/s")
		if err != nil {
			t.Fatal(err)
		}
		hcs = append(hcs, &http.Client{Transport: th.Transport(nil, slidelimit.WithMaxUpstreamBlock(time.Second))})
	}
	if code := getThrough(t, hcs[0], srv.URL); code != http.StatusTooManyRequests {
		t.Fatalf("first call: %d", code)
	}
	start := time.Now()
	done := make(chan int, 1)
	go func() { done <- getThrough(t, hcs[1], srv.URL) }()
	select {
	case code := <-done:
		if held := time.Since(start); code != http.StatusOK || held < 800*time.Millisecond {
			t.Errorf("the other process's call: %d after %v, want 200 after about 1s", code, held)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the other process's call still held 20s after a block capped at 1s")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("upstream saw %d calls, want 2", n)
	}
	if ttls := blockTTLs(t, client, prefix); len(ttls) > 1 || len(ttls) == 1 && ttls[0] > time.Second {
		t.Errorf("learned block keys' time left: %v, want at most 1s", ttls)
	}
}

// twoKeyCaller makes a Transport's calls for the apikey and model in the
// request's headers.
func twoKeyCaller(r *http.Request) (slidelimit.Call, error) {
	return slidelimit.Call{Keys: map[string]string{"apikey": r.Header.Get("X-Key"), "model": r.Header.Get("X-Model")}}, nil
}

func callKM(key, model string) slidelimit.Call {
	return slidelimit.Call{Keys: map[string]string{"apikey": key, "model": model}}
}

// admittedWithin polls th.Allow for c until it admits, for at most d.
func admittedWithin(th *slidelimit.Throttle, c slidelimit.Call, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		p, ok, err := th.Allow(context.Background(), c)
		if err == nil && ok {
			p.Finish(nil)
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestThrottleResetLiftsLearnedBlock: on real Redis, with two processes
// (Limiters), Limiter.Reset of a throttle's key lifts the blocks learned
// for every lane with that key in both within 1 s, and in Redis, where a
// process started later reads them; a lane of another key stays blocked.
func TestThrottleResetLiftsLearnedBlock(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		resetLiftsScenario(t, func() engine.Client {
			c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return c
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl := redistest.StartCluster(t)
		resetLiftsScenario(t, func() engine.Client { return cl.Client(t) })
	})
}

func resetLiftsScenario(t *testing.T, client func() engine.Client) {
	prefix := randomPrefix(t)
	const rules = "key(apikey):100/s; key(model)[tokens]:100000/min"
	throttle := func() (*slidelimit.Limiter, *slidelimit.Throttle) {
		lim := throttleLimiter(t, client(), prefix)
		th, err := lim.Throttle("llm", rules)
		if err != nil {
			t.Fatal(err)
		}
		return lim, th
	}
	limA, a := throttle()
	_, b := throttle()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer up.Close()
	hc := &http.Client{Transport: a.Transport(nil, slidelimit.WithCall(func(r *http.Request) (slidelimit.Call, error) {
		c, err := twoKeyCaller(r)
		c.Costs = map[string]int64{"tokens": 10}
		return c, err
	}))}
	blockedLanes := [][2]string{{"k1", "m1"}, {"k1", "m2"}, {"k2", "m1"}}
	for _, km := range blockedLanes {
		req, _ := http.NewRequest(http.MethodGet, up.URL, nil)
		req.Header.Set("X-Key", km[0])
		req.Header.Set("X-Model", km[1])
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	call := func(km [2]string) slidelimit.Call {
		c := callKM(km[0], km[1])
		c.Costs = map[string]int64{"tokens": 10}
		return c
	}
	ctx := context.Background()
	for _, th := range []*slidelimit.Throttle{a, b} {
		for _, km := range blockedLanes {
			if admittedWithin(th, call(km), 0) {
				t.Fatalf("%v admitted before the Reset, under a block of an hour", km)
			}
		}
	}
	if _, later := throttle(); admittedWithin(later, call(blockedLanes[0]), 0) {
		t.Fatal("a process started later was not held by the learned block")
	}

	if err := limA.Reset(ctx, "llm", "key(apikey)", "k1", false); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, th := range []*slidelimit.Throttle{a, b} {
		for _, km := range blockedLanes[:2] {
			if !admittedWithin(th, call(km), time.Second-time.Since(start)) {
				t.Errorf("%v still held %v after the Reset of k1", km, time.Since(start))
			}
		}
	}
	t.Logf("both processes admitted the lifted lanes %v after Reset returned", time.Since(start))
	_, later := throttle()
	if !admittedWithin(later, call(blockedLanes[0]), time.Second) {
		t.Error("a process started after the Reset is held by the block it lifted")
	}
	for _, th := range []*slidelimit.Throttle{a, b, later} {
		if admittedWithin(th, call(blockedLanes[2]), 0) {
			t.Error("the block of k2 was lifted by the Reset of k1")
		}
	}
}

// TestThrottleLearnedBlocksListed: the operator API and page list a
// throttle's learned blocks with their time left, the key by its
// fingerprint only (it may be the API key itself), and lifting one by
// its ref lifts it.
func TestThrottleLearnedBlocksListed(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("llm", "key(apikey):100/s; global:1000/s")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "sk-live-0123456789abcdef"
	srv, _ := hostileUpstream(t, 1, "Retry-After", "600")
	hc := &http.Client{Transport: th.Transport(nil, slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
		return slidelimit.Call{Keys: map[string]string{"apikey": secret}}, nil
	}))}
	if code := getThrough(t, hc, srv.URL); code != http.StatusTooManyRequests {
		t.Fatalf("first call: %d", code)
	}
	h := lim.AdminHandler("ops")
	do := func(method, path string, body io.Reader) (int, string) {
		r := httptest.NewRequest(method, path, body)
		if body != nil {
			r.Header.Set("Content-Type", "application/json")
		}
		r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "o", Roles: []role.Role{"ops"}}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}
	code, body := do(http.MethodGet, "/api/blocks", nil)
	var ans struct {
		Blocks []struct {
			Scope, Limiter, Subject, Ref string
			Masked, Learned              bool
			Left                         float64
		}
	}
	if err := json.Unmarshal([]byte(body), &ans); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/blocks: %d %s", code, body)
	}
	if len(ans.Blocks) != 1 {
		t.Fatalf("GET /api/blocks = %s, want the learned block of the key", body)
	}
	b := ans.Blocks[0]
	if b.Scope != "llm" || b.Limiter != "key(apikey)" || !b.Learned || !b.Masked || !strings.HasPrefix(b.Subject, "~") ||
		b.Ref != b.Subject || b.Left <= 590 || b.Left > 600 {
		t.Errorf("GET /api/blocks = %s, want llm's key(apikey) masked, learned, about 600 s left", body)
	}
	code, page := do(http.MethodGet, "/", nil)
	if code != http.StatusOK || !strings.Contains(page, "learned from the upstream") || !strings.Contains(page, b.Subject) {
		t.Errorf("the page does not list the learned block:\n%s", page)
	}
	for what, s := range map[string]string{"the API": body, "the page": page} {
		if strings.Contains(s, secret) || strings.Contains(s, "0123456789") {
			t.Errorf("%s shows the key's value", what)
		}
	}
	if admittedWithin(th, slidelimit.Call{Keys: map[string]string{"apikey": secret}}, 0) {
		t.Fatal("a call admitted under the learned block")
	}
	lift, _ := json.Marshal(map[string]string{"scope": "llm", "limiter": "key(apikey)", "ref": b.Ref})
	if code, body := do(http.MethodPost, "/api/reset", strings.NewReader(string(lift))); code != http.StatusOK {
		t.Fatalf("POST /api/reset by the learned block's ref: %d %s", code, body)
	}
	if !admittedWithin(th, slidelimit.Call{Keys: map[string]string{"apikey": secret}}, time.Second) {
		t.Error("the block lifted from the operator API still holds the key")
	}
	if _, body := do(http.MethodGet, "/api/blocks", nil); strings.Contains(body, `"learned":true`) {
		t.Errorf("GET /api/blocks after the lift = %s", body)
	}

	// A throttle of a global rule only: its block is listed and
	// lifted as the global subject's.
	plain, err := lim.Throttle("plain", "global:10/s")
	if err != nil {
		t.Fatal(err)
	}
	srv2, _ := hostileUpstream(t, 1, "Retry-After", "600")
	if code := getThrough(t, &http.Client{Transport: plain.Transport(nil)}, srv2.URL); code != http.StatusTooManyRequests {
		t.Fatalf("plain's first call: %d", code)
	}
	_, body = do(http.MethodGet, "/api/blocks", nil)
	if !strings.Contains(body, `{"scope":"plain","limiter":"global","subject":"","left":`) || !strings.Contains(body, `"learned":true`) {
		t.Errorf("GET /api/blocks = %s, want plain's global block", body)
	}
	lift, _ = json.Marshal(map[string]string{"scope": "plain", "limiter": "global"})
	if code, body := do(http.MethodPost, "/api/reset", strings.NewReader(string(lift))); code != http.StatusOK {
		t.Fatalf("POST /api/reset of plain's global: %d %s", code, body)
	}
	if !admittedWithin(plain, slidelimit.Call{}, time.Second) {
		t.Error("plain's lifted block still holds its calls")
	}
}
