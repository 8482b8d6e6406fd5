package middleware_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/testutil"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// headersKey carries a request's header in its context to the limit
// functions of these tests, as authentication carries an identity.
type headersKey struct{}

// withHeaders serves each request with its header in its context.
func withHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), headersKey{}, r.Header)))
	})
}

// header returns the value of header k of the request of ctx (withHeaders).
func header(ctx context.Context, k string) string {
	h, _ := ctx.Value(headersKey{}).(http.Header)
	return h.Get(k)
}

// quotaFunc is a limit function reading the limit from the X-Quota header,
// as an application would read it from the tenant's record; it counts its
// calls.
type quotaFunc struct{ calls atomic.Int64 }

var errNoTenant = errors.New("tenants: lookup acme: connection refused")

func (q *quotaFunc) fn(ctx context.Context) (int64, error) {
	q.calls.Add(1)
	switch v := header(ctx, "X-Quota"); v {
	case "fail":
		return 0, errNoTenant
	case "bad":
		return 0, fmt.Errorf("token names no tenant: %w", middleware.ErrBadRequest)
	default:
		return strconv.ParseInt(v, 10, 64)
	}
}

// TestLimitFuncReachesEngine checks that every dynamic window reaches the
// engine with the function's value for the request, static windows beside
// it unchanged, the function called once per request however many windows
// name it, and the RateLimit-Policy field advertising the resolved limits.
func TestLimitFuncReachesEngine(t *testing.T) {
	t.Parallel()
	var q quotaFunc
	d := newRecorder(admitted)
	mux := withHeaders(routed(t, "GET /", "key(tenant):10/s,$quota/min; user[bytes]:$quota/d~1h; ip:50/min", d,
		middleware.WithLimitFunc("quota", q.fn),
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 7, nil }),
		middleware.WithKeyFunc("tenant", func(r *http.Request) string { return r.Header.Get("X-Tenant") })))
	for _, tt := range []struct {
		tenant string
		quota  int64
	}{{"acme", 7500}, {"small", 30}} {
		r := request("GET", "/", "192.0.2.1:1", user("alice"))
		r.Header.Set("X-Tenant", tt.tenant)
		r.Header.Set("X-Quota", strconv.FormatInt(tt.quota, 10))
		w := do(mux, r)
		if w.Code != ok {
			t.Fatalf("%s: status %d", tt.tenant, w.Code)
		}
		req := d.reqs[len(d.reqs)-1]
		got := [][]rules.Window{req.Checks[0].Windows, req.Checks[1].Windows, req.Checks[2].Windows}
		want := [][]rules.Window{
			{{Limit: 10, Period: time.Second}, {Limit: tt.quota, Period: time.Minute, LimitFunc: "quota"}},
			{{Limit: tt.quota, Period: 24 * time.Hour, Grain: time.Hour, LimitFunc: "quota"}},
			{{Limit: 50, Period: time.Minute}},
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || got[0][1] != want[0][1] || got[1][0] != want[1][0] {
			t.Errorf("%s: windows %+v, want %+v", tt.tenant, got, want)
		}
		wantPolicy := fmt.Sprintf(`"key(tenant)-1s";q=10;w=1, "key(tenant)-1min";q=%d;w=60, "user[bytes]-1d";q=%[1]d;qu="content-bytes";w=86400, "ip-1min";q=50;w=60`, tt.quota)
		if got := w.Header().Get("RateLimit-Policy"); got != wantPolicy {
			t.Errorf("%s: RateLimit-Policy = %s\nwant %s", tt.tenant, got, wantPolicy)
		}
		parsePolicy(t, w.Header().Values("RateLimit-Policy"))
	}
	if n := q.calls.Load(); n != 2 {
		t.Errorf("limit function called %d times for 2 requests, want 2", n)
	}
	// The plan's own windows are untouched: a later request resolves
	// afresh.
	if r := d.reqs[0].Checks[0].Windows[1]; r.Limit != 7500 {
		t.Errorf("first request's window changed to %+v", r)
	}
}

// TestLimitFuncDenial checks that a denial by a dynamic window names the
// resolved limit in the problem body and the event.
func TestLimitFuncDenial(t *testing.T) {
	t.Parallel()
	var q quotaFunc
	d := newRecorder(func(req engine.Request) engine.Decision {
		w := req.Checks[0].Windows[0]
		ws := engine.WindowState{Check: 0, Window: w, Used: w.Limit, Remaining: 0, Reset: 20 * time.Second}
		return engine.Decision{Windows: []engine.WindowState{ws}, Denied: ws, RetryAfter: 20 * time.Second}
	})
	var rec testutil.Events
	mux := withHeaders(routed(t, "GET /", "key(tenant):$quota/min", d, middleware.WithLimitFunc("quota", q.fn), middleware.WithHook(rec.Hook),
		middleware.WithKeyFunc("tenant", func(*http.Request) string { return "acme" })))
	r := request("GET", "/", "192.0.2.1:1", nil)
	r.Header.Set("X-Quota", "42")
	w := do(mux, r)
	if w.Code != deny {
		t.Fatalf("status %d", w.Code)
	}
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || !strings.Contains(p.Detail, "(42 requests per 1min)") {
		t.Errorf("body %s: %v", w.Body, err)
	}
	if got := w.Header().Get("RateLimit-Policy"); got != `"key(tenant)-1min";q=42;w=60` {
		t.Errorf("RateLimit-Policy = %s", got)
	}
	if ev := rec.Last(); ev.Window.Limit != 42 || ev.Window.LimitFunc != "quota" || ev.Policy != "key(tenant)-1min" {
		t.Errorf("event window %+v policy %q", ev.Window, ev.Policy)
	}
}

// TestLimitFuncErrors checks that a limit function that fails, or returns a
// limit below 1 or above its window's cap, is answered 400 or 500 without
// asking the engine, echoing nothing, and logged with the function and the
// rule; shadow mode serves the request uncounted.
func TestLimitFuncErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		quota  string
		status int
		log    string
	}{
		{"fail", http.StatusInternalServerError, "connection refused"},
		{"bad", http.StatusBadRequest, "middleware: bad request"},
		{"0", http.StatusInternalServerError, "returned limit 0, want at least 1"},
		{"-5", http.StatusInternalServerError, "returned limit -5, want at least 1"},
		{"100001", http.StatusInternalServerError, "limit 100001 is above 100000"},
	}
	for _, tt := range tests {
		for _, shadow := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s shadow=%v", tt.quota, shadow), func(t *testing.T) {
				t.Parallel()
				var q quotaFunc
				d := newRecorder(admitted)
				logger, logs := newLogger()
				var rec testutil.Events
				group := "ip:10/s; key(tenant):$quota/min"
				if shadow {
					group += "; mode:shadow"
				}
				mux := withHeaders(routed(t, "GET /", group, d, middleware.WithLimitFunc("quota", q.fn),
					middleware.WithKeyFunc("tenant", func(*http.Request) string { return "acme" }),
					middleware.WithLogger(logger), middleware.WithHook(rec.Hook)))
				r := request("GET", "/", "192.0.2.1:1", nil)
				r.Header.Set("X-Quota", tt.quota)
				w := do(mux, r)
				want := tt.status
				if shadow {
					want = ok
				}
				if w.Code != want {
					t.Fatalf("status %d, want %d", w.Code, want)
				}
				if !shadow {
					var p problemBody
					if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != tt.status || p.Type != "about:blank" {
						t.Errorf("body %q: %+v %v", w.Body, p, err)
					}
					if b := w.Body.String(); strings.Contains(b, "tenant") || strings.Contains(b, "quota") || strings.Contains(b, "limit") {
						t.Errorf("internal error leaked to the client: %s", b)
					}
					if w.Header().Get("RateLimit-Policy") != "" || w.Header().Get("Retry-After") != "" {
						t.Errorf("rate-limit fields on a request that was not decided: %v", w.Header())
					}
				}
				if len(d.reqs) != 0 {
					t.Errorf("engine called %d times", len(d.reqs))
				}
				if l := logs.String(); !strings.Contains(l, tt.log) || !strings.Contains(l, "key(tenant)") || !strings.Contains(l, "limit function failed") {
					t.Errorf("log = %q, want %q, the limiter and the message", l, tt.log)
				}
				ev := rec.All()
				if len(ev) != 1 || !errors.Is(ev[0].Err, lifecycle.ErrLimit) || ev[0].Allowed != shadow {
					t.Fatalf("events = %+v", ev)
				}
				var le *lifecycle.LimitError
				if !errors.As(ev[0].Err, &le) || le.Name != "quota" || le.Rule != "key(tenant)" || le.Window != "$quota/min" {
					t.Errorf("event error = %#v", ev[0].Err)
				}
				if tt.quota == "fail" && !errors.Is(ev[0].Err, errNoTenant) {
					t.Errorf("event error %v does not wrap the function's error", ev[0].Err)
				}
			})
		}
	}
}

// TestLimitFuncConfig checks that New names every window whose limit
// function is missing, with its rule and role, and rejects bad
// WithLimitFunc arguments.
func TestLimitFuncConfig(t *testing.T) {
	t.Parallel()
	_, err := middleware.New(rules.MustParse("ip:$quota/min,5/s; role(a)=user:$gold/d~1h"), newMem())
	for _, want := range []string{
		`middleware: unknown limit function "quota" in window $quota/min of rule ip (use WithLimitFunc)`,
		`middleware: unknown limit function "gold" in window $gold/d~h of rule user of role(a)= (use WithLimitFunc)`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error %v\nwant it to contain %s", err, want)
		}
	}
	if ce := testutil.ConfigError(err, "unregistered", "WithLimitFunc"); ce == nil || ce.Name != "quota" {
		t.Errorf("error %v holds no *ConfigError naming the limit function", err)
	}
	one := func(context.Context) (int64, error) { return 1, nil }
	for _, tt := range []struct {
		name string
		fn   func(context.Context) (int64, error)
		want string
	}{
		{"quota", nil, `middleware: WithLimitFunc("quota"): nil limit function`},
		{"5", one, `middleware: WithLimitFunc("5"): invalid limit function name; want a letter, then letters, digits, "_", "-" or "."`},
		{"$q", one, `middleware: WithLimitFunc("$q"): invalid limit function name; want a letter, then letters, digits, "_", "-" or "."`},
	} {
		_, err := middleware.New(rules.MustParse("ip:1/s"), newMem(), middleware.WithLimitFunc(tt.name, tt.fn))
		if err == nil || err.Error() != tt.want || testutil.ConfigError(err, "option", "") == nil {
			t.Errorf("WithLimitFunc(%q): %v, want %s", tt.name, err, tt.want)
		}
	}
}

// TestLimitFuncPerTenant checks, with the in-memory decider, two tenants
// with two limits on one route, and that a limit lowered below what a
// tenant used denies while raising it admits at once.
func TestLimitFuncPerTenant(t *testing.T) {
	t.Parallel()
	quota := map[string]*atomic.Int64{"acme": {}, "small": {}}
	quota["acme"].Store(5)
	quota["small"].Store(2)
	tenant := func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	mux := withHeaders(routed(t, "GET /", "key(tenant):$quota/min", newMem(),
		middleware.WithKeyFunc("tenant", tenant),
		middleware.WithLimitFunc("quota", func(ctx context.Context) (int64, error) { return quota[header(ctx, "X-Tenant")].Load(), nil })))
	req := func(tn string) *http.Request {
		r := request("GET", "/", "192.0.2.1:1", nil)
		r.Header.Set("X-Tenant", tn)
		return r
	}
	n := func(tn string, k int) []*http.Request {
		var rs []*http.Request
		for range k {
			rs = append(rs, req(tn))
		}
		return rs
	}
	if got := fmt.Sprint(statuses(mux, n("acme", 6)...)); got != "[200 200 200 200 200 429]" {
		t.Errorf("acme at 5/min: %s", got)
	}
	if got := fmt.Sprint(statuses(mux, n("small", 3)...)); got != "[200 200 429]" {
		t.Errorf("small at 2/min: %s", got)
	}
	quota["acme"].Store(3) // below the 5 acme used
	if got := fmt.Sprint(statuses(mux, n("acme", 1)...)); got != "[429]" {
		t.Errorf("acme lowered to 3: %s", got)
	}
	quota["small"].Store(4) // above the 2 small used
	if got := fmt.Sprint(statuses(mux, n("small", 3)...)); got != "[200 200 429]" {
		t.Errorf("small raised to 4: %s", got)
	}
}

// BenchmarkMiddlewareLimitFunc is BenchmarkMiddleware with one window
// whose limit comes from a function, to compare the allocations of a
// dynamic group with a static one.
func BenchmarkMiddlewareLimitFunc(b *testing.B) {
	mw, err := middleware.New(rules.MustParse("ip:5/s,100/min; user:$quota/h"), allowAll{},
		middleware.WithTrustedProxies("10.0.0.0/8"),
		middleware.WithLimitFunc("quota", func(context.Context) (int64, error) { return 1000, nil }))
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /files/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	r := httptest.NewRequest("GET", "/files/1", nil)
	r.RemoteAddr = "10.0.0.2:80"
	r.Header.Set("X-Forwarded-For", "2001:db8:1:2::7, 10.0.0.1")
	r = r.WithContext(role.NewContext(context.Background(), role.Identity{User: "alice"}))
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		mux.ServeHTTP(w, r)
	}
}
