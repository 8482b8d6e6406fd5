package middleware_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// TestEffectiveWindowField checks the t parameter of RateLimit as
// draft-ietf-httpapi-ratelimit-headers-11 defines it (the seconds within
// which the client can use no more than r) for window states built by hand:
// the time until the oldest entry leaves, rounded up and at least 1, the
// whole period for an empty window, and never past Retry-After.
func TestEffectiveWindowField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		group       string
		used, limit int64
		reset, wait time.Duration // wait > 0 makes a denial
		wantT       int64
		wantRetry   string
	}{
		{"oldest leaves in 300ms", "ip:5/s", 2, 5, 300 * time.Millisecond, 0, 1, ""},
		{"oldest leaves in exactly 2s", "ip:5/min", 2, 5, 2 * time.Second, 0, 2, ""},
		{"oldest leaves in 59.2s", "ip:5/min", 5, 5, 59200 * time.Millisecond, 0, 60, ""},
		{"one nanosecond", "ip:5/h", 1, 5, time.Nanosecond, 0, 1, ""},
		{"empty window: the whole period", "ip:5/h", 0, 5, 0, 0, 3600, ""},
		{"empty sub-second window", "ip:5/500ms", 0, 5, 0, 0, 1, ""},
		{"denied: t is the wait", "ip:5/min", 5, 5, 12300 * time.Millisecond, 12300 * time.Millisecond, 13, "13"},
		{"denied: capped at Retry-After", "ip:5/min", 5, 5, 40 * time.Second, 4 * time.Second, 4, "4"},
		{"denied: empty window capped", "ip:5/h", 0, 5, 0, 2500 * time.Millisecond, 3, "3"},
		{"denied: sub-second wait", "ip:5/s", 5, 5, 100 * time.Millisecond, 100 * time.Millisecond, 1, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := &funcDecider{allow: func(req engine.Request) (engine.Decision, error) {
				ws := []engine.WindowState{{Window: req.Checks[0].Windows[0], Used: tt.used,
					Remaining: max(0, tt.limit-tt.used), Reset: tt.reset}}
				dec := engine.Decision{Allowed: tt.wait == 0, Windows: ws, RetryAfter: tt.wait}
				if tt.wait > 0 {
					dec.Denied = dec.Windows[0]
				}
				return dec, nil
			}}
			w := do(routed(t, "GET /", tt.group, d), request("GET", "/", "192.0.2.1:1", nil))
			sl := parseRateLimit(t, w.Header().Values("RateLimit"))
			if len(sl) != 1 || sl[0].t != tt.wantT || sl[0].r != max(0, tt.limit-tt.used) {
				t.Fatalf("RateLimit = %+v, want t=%d", sl, tt.wantT)
			}
			if got := w.Header().Get("Retry-After"); got != tt.wantRetry {
				t.Fatalf("Retry-After = %q, want %q", got, tt.wantRetry)
			}
			if tt.wantRetry != "" {
				retry, _ := strconv.ParseInt(tt.wantRetry, 10, 64)
				if sl[0].t > retry {
					t.Errorf("t=%d ends after Retry-After %d", sl[0].t, retry)
				}
			}
		})
	}
}

// TestEffectiveWindowHolds checks, against the exact sliding log of
// memDecider, that every RateLimit item tells the truth as draft-11 words
// it, at every step of a schedule of requests with several windows:
//
//   - r more requests fit now;
//   - one more does not fit for t-1 seconds, the whole part of the
//     effective window (nothing is freed before it ends);
//   - at t seconds one more fits: a client that uses r and waits t is
//     never early;
//   - on a denial, Retry-After is at least t.
func TestEffectiveWindowHolds(t *testing.T) {
	t.Parallel()
	const group = "ip:3/10s,5/min; user:4/7s"
	// Gaps between the requests of the schedule.
	gaps := []time.Duration{0, 1500 * time.Millisecond, 300 * time.Millisecond, 2 * time.Second, 0,
		4200 * time.Millisecond, 700 * time.Millisecond, 10 * time.Second, 100 * time.Millisecond,
		3 * time.Second, 25 * time.Second, 0, 999 * time.Millisecond, 6 * time.Second}
	alice := func() *http.Request { return request("GET", "/", "192.0.2.1:1", user("alice")) }
	// replay returns a mux and clock after the first k requests of the
	// schedule, and the response to the k-th.
	replay := func(k int) (*memDecider, http.Handler, *http.Response) {
		mem := newMem()
		mux := routed(t, "GET /", group, mem)
		var last *http.Response
		for i := range k {
			mem.advance(gaps[i])
			last = do(mux, alice()).Result()
		}
		return mem, mux, last
	}
	for k := 1; k <= len(gaps); k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			t.Parallel()
			mem, mux, res := replay(k)
			sl := parseRateLimit(t, res.Header.Values("RateLimit"))
			if len(sl) != 1 {
				t.Fatalf("RateLimit = %+v, want one item", sl)
			}
			r, tt := sl[0].r, sl[0].t
			t.Logf("status %d %s r=%d t=%d", res.StatusCode, sl[0].name, r, tt)
			if res.StatusCode == deny {
				retry, err := strconv.ParseInt(res.Header.Get("Retry-After"), 10, 64)
				if err != nil || retry < tt {
					t.Fatalf("Retry-After %q before the end of the effective window t=%d", res.Header.Get("Retry-After"), tt)
				}
			}
			for i := range r {
				if c := do(mux, alice()).Code; c != ok {
					t.Fatalf("request %d of the r=%d available: %d", i+1, r, c)
				}
			}
			if tt > 1 {
				mem.advance(time.Duration(tt-1) * time.Second)
				if c := do(mux, alice()).Code; c != deny {
					t.Fatalf("request r+1 at t-1=%ds: %d, want 429 (r=%d was all there was)", tt-1, c, r)
				}
				mem.advance(time.Second)
			} else {
				mem.advance(time.Second)
			}
			if c := do(mux, alice()).Code; c != ok {
				t.Fatalf("request after waiting t=%ds: %d, want 200", tt, c)
			}
		})
	}
}
