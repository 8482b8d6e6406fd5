package slidelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// TestLimitFuncTenants checks limit functions end to end, on a real Redis
// and on miniredis: two tenants on one route get their own limits; a limit
// lowered below what a tenant used denies until its requests leave the
// window; a raised one admits at once; RateLimit-Policy says the tenant's
// limit.
func TestLimitFuncTenants(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		limitFuncScenario(t, redistest.Start(t).Client(), func(time.Duration) {})
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		m, c := redistest.Mini(t)
		// miniredis's TIME follows the wall clock, but its keys expire
		// only when told that time passed.
		limitFuncScenario(t, c, m.FastForward)
	})
}

func limitFuncScenario(t *testing.T, client engine.Client, passed func(time.Duration)) {
	quota := map[string]*atomic.Int64{"acme": {}, "small": {}}
	quota["acme"].Store(4)
	quota["small"].Store(2)
	var calls atomic.Int64
	tenant := func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	// Authentication (WithIdentity) puts the tenant in the request's
	// context, where the limit function reads it.
	clk := redistest.NewClock()
	lim, err := slidelimit.New(client,
		slidelimit.WithKeyPrefix(redistest.Prefix(t)),
		slidelimit.WithEngineOptions(engine.WithClock(clk.Now)),
		slidelimit.WithIdentity(func(r *http.Request) (string, []string) { return tenant(r), nil }),
		slidelimit.WithMiddlewareOptions(
			middleware.WithKeyFunc("tenant", tenant),
			middleware.WithLimitFunc("quota", func(ctx context.Context) (int64, error) {
				calls.Add(1)
				id, _ := role.FromContext(ctx)
				return quota[id.User].Load(), nil
			})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	mux := http.NewServeMux()
	// A 1 s window lets the test watch entries age out.
	if err := lim.Handle(mux, "GET /api", ok, "key(tenant):$quota/s; ip:1000/min"); err != nil {
		t.Fatal(err)
	}
	var policy string
	send := func(tn string, n int) string {
		var s []string
		for range n {
			r := httptest.NewRequest("GET", "/api", nil)
			r.Header.Set("X-Tenant", tn)
			w := httptest.NewRecorder()
			mux.ServeHTTP(w, r)
			s = append(s, http.StatusText(w.Code))
			policy = w.Header().Get("RateLimit-Policy")
		}
		return strings.Join(s, ",")
	}
	const okT, no = "OK", "Too Many Requests"
	if got, want := send("acme", 5), strings.Repeat(okT+",", 4)+no; got != want {
		t.Errorf("acme at 4: %s", got)
	}
	if want := `"key(tenant)-1s";q=4;w=1, "ip-1min";q=1000;w=60`; policy != want {
		t.Errorf("acme's RateLimit-Policy = %s, want %s", policy, want)
	}
	if got, want := send("small", 3), okT+","+okT+","+no; got != want {
		t.Errorf("small at 2: %s", got)
	}
	if n := calls.Load(); n != 8 {
		t.Errorf("limit function called %d times for 8 requests", n)
	}
	// Raised above what small used: admitted at once.
	quota["small"].Store(3)
	if got := send("small", 2); got != okT+","+no {
		t.Errorf("small raised to 3: %s", got)
	}
	// Lowered below the 4 acme used: denied until they leave the window.
	quota["acme"].Store(2)
	if got := send("acme", 1); got != no {
		t.Errorf("acme lowered to 2: %s", got)
	}
	// The clock has not moved: acme's 4 requests leave the 1s window
	// 1 s later.
	clk.Add(1050 * time.Millisecond)
	passed(1050 * time.Millisecond)
	if got := send("acme", 3); got != okT+","+okT+","+no {
		t.Errorf("acme at 2 once the second passed: %s", got)
	}
	// Raised above the 2 it used: admitted at once.
	quota["acme"].Store(4)
	if got := send("acme", 3); got != okT+","+okT+","+no {
		t.Errorf("acme raised to 4: %s", got)
	}
}
