package slidelimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/embedded"
)

// TestThrottleBlockEndsOnEmbeddedStore: on the embedded store (the
// demo's), an upstream's Retry-After: 1 holds the throttle's calls about a
// second, in this process and in one started after it, and not for good:
// the learned block (SET PX, read back with PTTL) expires as on Redis. A
// plain miniredis, whose PTTL never counts down, holds the queued callers
// until their context ends.
func TestThrottleBlockEndsOnEmbeddedStore(t *testing.T) {
	store, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	client := redis.NewClient(&redis.Options{Addr: store.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	prefix := randomPrefix(t)

	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	th, err := throttleLimiter(t, client, prefix).Throttle("api", "global:2/s")
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: th.Transport(nil)}
	// Before the call: the block starts after this, whatever the load.
	blocked := time.Now()
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first call: %d, want the upstream's 429", resp.StatusCode)
	}
	// A process started after the block learns it from the store.
	later, err := throttleLimiter(t, client, prefix).Throttle("api", "global:2/s")
	if err != nil {
		t.Fatal(err)
	}
	// Callers that queue during the block and past its end (two more than
	// the window holds: they join the fleet's order, whose replies carry
	// the block's PTTL) and a process started after it (which reads the
	// block first) are all admitted a second or two after the 429, not
	// never.
	errs := make(chan error, 4)
	for _, w := range []*slidelimit.Throttle{th, th, th, later} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			p, err := w.Wait(ctx, slidelimit.Call{})
			if err != nil {
				errs <- err
				return
			}
			held := time.Since(blocked)
			p.Finish(nil)
			if held < 900*time.Millisecond {
				err = fmt.Errorf("admitted %v after Retry-After: 1", held)
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
