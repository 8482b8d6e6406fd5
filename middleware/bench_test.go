package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// allowAll admits everything with one window state per window, like the
// engine, so the benchmark measures the middleware alone.
type allowAll struct{}

func (allowAll) Allow(_ context.Context, req engine.Request) (engine.Decision, error) {
	var ws []engine.WindowState
	for i, c := range req.Checks {
		for _, w := range c.Windows {
			ws = append(ws, engine.WindowState{Check: i, Window: w, Used: 1, Remaining: w.Limit - 1, Reset: w.Period})
		}
	}
	return engine.Decision{Allowed: true, Windows: ws}, nil
}

// BenchmarkMiddleware measures the per-request cost of the middleware
// around a Decider that answers at once.
func BenchmarkMiddleware(b *testing.B) {
	mw, err := middleware.New(rules.MustParse("ip:5/s,100/min; user:1000/h"), allowAll{},
		middleware.WithTrustedProxies("10.0.0.0/8"))
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /files/{id}", mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	r := httptest.NewRequest("GET", "/files/1", nil)
	r.RemoteAddr = "10.0.0.2:80"
	r.Header.Set("X-Forwarded-For", "2001:db8:1:2::7, 10.0.0.1")
	r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "alice"}))
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		mux.ServeHTTP(w, r)
	}
}

// finishAll is allowAll with a finish that costs nothing: the benchmark
// measures the steps after the handler in the middleware alone. Its
// GiveBack, Release and Settle let the same benchmark run against the
// middleware of before the one finish seam.
type finishAll struct{ allowAll }

func (finishAll) FinishAsync(engine.Decision, engine.Outcome)                            {}
func (finishAll) GiveBack(context.Context, engine.Request, engine.Decision) error        { return nil }
func (finishAll) Release(context.Context, engine.Request, engine.Decision) error         { return nil }
func (finishAll) Settle(context.Context, engine.Request, engine.Decision, []int64) error { return nil }

// BenchmarkMiddlewareFinish measures the per-request cost of a route with
// every step after the handler: a slot, a settled cost and count:.
func BenchmarkMiddlewareFinish(b *testing.B) {
	mw, err := middleware.New(rules.MustParse("ip:5/s,4 concurrent; ip[bytes]:1Gi/d; count:2xx"), finishAll{},
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 1 << 20, nil }),
		middleware.WithSettle("bytes", middleware.Settlement{Written: true}))
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /files/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) })))
	r := httptest.NewRequest("GET", "/files/1", nil)
	r.RemoteAddr = "192.0.2.7:80"
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		clear(w.Header())
		w.Body.Reset()
		mux.ServeHTTP(w, r)
	}
}
