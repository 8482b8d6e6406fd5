package routertest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
)

// ThrottleSequence makes a throttle "api" (global:3/min) on miniredis with
// a Limiter made with opt, gives it to observe, and runs its calls: two
// admitted by Wait, one admitted by Transport to which the upstream
// answers 429, then one refused by Allow. Afterwards the throttle has
// admitted 3, refused 1 and seen 1 upstream 429, with nobody waiting and
// one permit active: the second Wait's, finished when the test ends.
func ThrottleSequence(t *testing.T, opt slidelimit.Option, observe func(*slidelimit.Throttle)) *slidelimit.Throttle {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	lim, err := slidelimit.New(rc, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	th, err := lim.Throttle("api", "global:3/min")
	if err != nil {
		t.Fatal(err)
	}
	observe(th)
	ctx := context.Background()
	for i := range 2 {
		p, err := th.Wait(ctx, slidelimit.Call{})
		if err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
		if i == 0 {
			p.Finish(nil)
		} else {
			t.Cleanup(func() { p.Finish(nil) })
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	resp, err := (&http.Client{Transport: th.Transport(nil)}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("Transport: status %d, want the upstream's 429", resp.StatusCode)
	}
	if _, ok, err := th.Allow(ctx, slidelimit.Call{}); ok || err != nil {
		t.Fatalf("last Allow: %v, %v; want a refusal", ok, err)
	}
	return th
}

// ClassSequence returns a throttle "classes" of global:10/min and
// share(critical):30% on a fresh miniredis, observed by observe, after:
// two Waits of class critical (one left unfinished), one of class batch
// and one of no class (both of class "other" in the stats), and a
// Transport round trip of class critical the upstream answered 429.
func ClassSequence(t *testing.T, opt slidelimit.Option, observe func(*slidelimit.Throttle)) *slidelimit.Throttle {
	t.Helper()
	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	lim, err := slidelimit.New(rc, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	th, err := lim.Throttle("classes", "global:10/min; share(critical):30%")
	if err != nil {
		t.Fatal(err)
	}
	observe(th)
	ctx := context.Background()
	for i, class := range []string{"critical", "critical", "batch", ""} {
		p, err := th.Wait(ctx, slidelimit.Call{Class: class, Tenant: "t" + strconv.Itoa(i)})
		if err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
		if i == 0 {
			t.Cleanup(func() { p.Finish(nil) })
		} else {
			p.Finish(nil)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	hc := &http.Client{Transport: th.Transport(nil, slidelimit.WithCall(func(*http.Request) (slidelimit.Call, error) {
		return slidelimit.Call{Class: "critical"}, nil
	}))}
	resp, err := hc.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return th
}
