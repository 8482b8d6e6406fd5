package slidelimit_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/throttle"
)

// faceLimiter returns a Limiter on a miniredis of its own.
func faceLimiter(t *testing.T, opts ...slidelimit.Option) *slidelimit.Limiter {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	lim, err := slidelimit.New(c, append([]slidelimit.Option{slidelimit.WithTimeout(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A Permit dropped without Finish is finished once the garbage collector
// finds it unreachable, releasing its slot, and logged once for many.
func TestThrottleDroppedPermitFinished(t *testing.T) {
	var logs syncBuffer
	lim := faceLimiter(t, slidelimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	th, err := lim.Throttle("api", "key(k):1 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	call := slidelimit.Call{Keys: map[string]string{"k": "one"}}
	for range 3 {
		dropPermit(t, th, call)
		admitAfterGC(t, th, call)
	}
	if s := th.Stats(); s.Active != 0 || s.Admitted != 6 {
		t.Errorf("Active %d, Admitted %d after the dropped permits; want 0, 6", s.Active, s.Admitted)
	}
	if n := strings.Count(logs.String(), "without Finish"); n != 1 {
		t.Errorf("%d lines about dropped Permits, want 1:\n%s", n, logs.String())
	}
}

// dropPermit has th admit call and drops its Permit unfinished.
//
//go:noinline
func dropPermit(t *testing.T, th *slidelimit.Throttle, call slidelimit.Call) {
	t.Helper()
	if _, err := th.Wait(context.Background(), call); err != nil {
		t.Fatal(err)
	}
}

// admitAfterGC collects garbage until th admits call, and finishes it.
func admitAfterGC(t *testing.T, th *slidelimit.Throttle, call slidelimit.Call) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		p, ok, err := th.Allow(context.Background(), call)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			p.Finish(nil)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("a dropped Permit still holds its slot after 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WithMaxHold takes a positive duration only; the default cap on learned
// blocks is the one the throttle applies.
func TestThrottleFaceDefaults(t *testing.T) {
	if _, err := slidelimit.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), slidelimit.WithMaxHold(0)); err == nil {
		t.Error("WithMaxHold(0) was accepted")
	}
	if slidelimit.DefaultMaxUpstreamBlock != throttle.DefaultMaxBlock {
		t.Errorf("DefaultMaxUpstreamBlock %v, the throttle's default %v", slidelimit.DefaultMaxUpstreamBlock, throttle.DefaultMaxBlock)
	}
}

type planKey struct{}

// A throttle's limit function gets the context given to Wait and Allow,
// and the outgoing request's context through Transport.
func TestThrottleLimitFuncContext(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	lim := faceLimiter(t, slidelimit.WithLimitFunc("quota", func(ctx context.Context) (int64, error) {
		plan, _ := ctx.Value(planKey{}).(string)
		mu.Lock()
		seen = append(seen, plan)
		mu.Unlock()
		if plan == "small" {
			return 1, nil
		}
		return 100, nil
	}))
	th, err := lim.Throttle("api", "global:$quota/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), planKey{}, "small")
	p, err := th.Wait(ctx, slidelimit.Call{})
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	if _, ok, err := th.Allow(ctx, slidelimit.Call{}); ok || err != nil {
		t.Errorf("a second call under a limit of 1: admitted %v, %v", ok, err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	client := &http.Client{Transport: th.Transport(srv.Client().Transport)}
	// The small plan's refusal must not hold the large plan's call: a lane
	// learns its windows' state only for the limits it was asked with.
	lctx, cancel := context.WithTimeout(context.WithValue(context.Background(), planKey{}, "large"), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(lctx, http.MethodGet, srv.URL, nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, ","); got != "small,small,large" {
		t.Errorf("the limit function saw plans %q, want small,small,large", got)
	}
}
