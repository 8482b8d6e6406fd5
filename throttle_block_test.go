package slidelimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
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
