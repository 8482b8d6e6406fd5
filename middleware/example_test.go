package middleware_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// denyAll is a Decider that refuses everything with a wait of 1.2s; real
// code passes an *engine.Engine.
type denyAll struct{}

func (denyAll) Allow(_ context.Context, req engine.Request) (engine.Decision, error) {
	ws := []engine.WindowState{{Check: 0, Window: req.Checks[0].Windows[0], Used: 5, Reset: 1200 * time.Millisecond}}
	return engine.Decision{Windows: ws, Denied: ws[0], RetryAfter: 1200 * time.Millisecond}, nil
}

func ExampleNew() {
	mw, err := middleware.New(rules.MustParse("ip:5/s,100/min"), denyAll{},
		middleware.WithTrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /files/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	r := httptest.NewRequest("GET", "/files/7", nil)
	r.RemoteAddr = "10.0.0.2:80"
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	fmt.Println(w.Code)
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	fmt.Println("RateLimit:", w.Header().Get("RateLimit"))
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	fmt.Print(w.Body)
	// Output:
	// 429
	// RateLimit-Policy: "ip-1s";q=5;w=1, "ip-1min";q=100;w=60
	// RateLimit: "ip-1s";r=0;t=2
	// Retry-After: 2
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Quota of policy \"ip-1s\" (5 requests per 1s) exceeded; retry after 2s.","violated-policies":["ip-1s"]}
}

func ExampleCanonicalizeIP() {
	for _, s := range []string{"192.0.2.7", "::ffff:192.0.2.7", "2001:db8:1:2:3:4:5:6"} {
		fmt.Println(middleware.CanonicalizeIP(netip.MustParseAddr(s), 64))
	}
	// Output:
	// 192.0.2.7
	// 192.0.2.7
	// 2001:db8:1:2::/64
}

func ExampleWithKeyFunc() {
	// key(tenant) counts by a tenant id your authentication established;
	// requests without one are counted by client IP.
	type tenantKey struct{}
	tenant := middleware.WithKeyFunc("tenant", func(r *http.Request) string {
		id, _ := r.Context().Value(tenantKey{}).(string)
		return id
	})
	_, err := middleware.New(rules.MustParse("key(tenant):1000/h"), denyAll{}, tenant)
	fmt.Println(err)
	_, err = middleware.New(rules.MustParse("key(tenant):1000/h"), denyAll{})
	fmt.Println(err)
	// Output:
	// <nil>
	// middleware: no key function registered for key(tenant) (use WithKeyFunc)
}

func ExampleWithLimitFunc() {
	// $quota takes each tenant's limit from its plan; the RateLimit-Policy
	// field says every caller its own. Authentication put the tenant in
	// the request's context, as the identity's user.
	plans := map[string]int64{"acme": 7500, "tiny": 60}
	tenantOf := func(ctx context.Context) string {
		id, _ := role.FromContext(ctx)
		return id.User
	}
	mw, err := middleware.New(rules.MustParse("key(tenant):$quota/min"), allowAll{},
		middleware.WithKeyFunc("tenant", func(r *http.Request) string { return tenantOf(r.Context()) }),
		middleware.WithLimitFunc("quota", func(ctx context.Context) (int64, error) {
			n, ok := plans[tenantOf(ctx)]
			if !ok {
				return 0, fmt.Errorf("no plan for tenant %q: %w", tenantOf(ctx), middleware.ErrBadRequest)
			}
			return n, nil
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, t := range []string{"acme", "tiny", "unknown"} {
		r := httptest.NewRequest("GET", "/", nil)
		r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: t}))
		r.Pattern = "GET /"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(t, w.Code, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// acme 200 "key(tenant)-1min";q=7500;w=60
	// tiny 200 "key(tenant)-1min";q=60;w=60
	// unknown 400
}
