package slidelimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// TestThrottleUpstreamBlock: a 429 with Retry-After seen by one process
// holds the calls of another (two Limiters on one Redis) for that long,
// and the 429 goes back to the caller unchanged.
func TestThrottleUpstreamBlock(t *testing.T) {
	client := miniClient(t)
	prefix := randomPrefix(t)
	var mu sync.Mutex
	var arrivals []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrivals = append(arrivals, time.Now())
		first := len(arrivals) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "slow down")
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var hcs []*http.Client
	var ths []*slidelimit.Throttle
	for range 2 {
		th, err := throttleLimiter(t, client, prefix).Throttle("api", "global:100/s")
		if err != nil {
			t.Fatal(err)
		}
		ths = append(ths, th)
		hcs = append(hcs, &http.Client{Transport: th.Transport(nil)})
	}
	get := func(hc *http.Client) (int, string) {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(hcs[0]); code != http.StatusTooManyRequests || body != "slow down" {
		t.Fatalf("first call: %d %q, want the upstream's 429 unchanged", code, body)
	}
	if code, _ := get(hcs[1]); code != http.StatusOK {
		t.Fatalf("second call: %d", code)
	}
	mu.Lock()
	held := arrivals[1].Sub(arrivals[0])
	mu.Unlock()
	if held < 900*time.Millisecond {
		t.Errorf("the other process sent %v after the upstream's Retry-After: 1", held)
	}
	if n := ths[0].Stats().Upstream429s; n != 1 {
		t.Errorf("Upstream429s = %d, want 1", n)
	}
}

// TestThrottleTransportFinishesOnClose: with no options every request is
// Call{}, and its in-flight slot is held until the response body is closed.
func TestThrottleTransportFinishesOnClose(t *testing.T) {
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t))
	th, err := lim.Throttle("api", "global:1 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	hc := &http.Client{Transport: th.Transport(http.DefaultTransport)}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	ctx := context.Background()
	if _, ok, _ := th.Allow(ctx, slidelimit.Call{}); ok {
		t.Fatal("a second call was admitted while the first one's body is open")
	}
	resp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, ok, err := th.Allow(ctx, slidelimit.Call{})
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			p.Finish(nil)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slot was not released after the body was closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
