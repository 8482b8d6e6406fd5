package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// planSource is a SubjectSource over fixed values.
type planSource struct {
	ip     string
	values map[string]string // limiter ID → value
}

func (s planSource) ClientIP() string                    { return s.ip }
func (s planSource) Value(_ int, l rules.Limiter) string { return s.values[l.ID()] }

// TestPlanAnswersAsMiddleware checks that a Plan builds the checks the
// middleware passes to its Decider and renders the fields it sends, for
// admitted and denied requests: other transports answer alike.
func TestPlanAnswersAsMiddleware(t *testing.T) {
	t.Parallel()
	g := rules.MustParse("ip:2/s,10/min; user[3]:9/h; header(X-Api-Key):5/s; key(tenant):5/s; global:100/s; user[bytes]:1Gi/d")
	mem := newMem()
	var ev middleware.Event
	mw, err := middleware.New(g, mem, middleware.WithScope("s"),
		middleware.WithKeyFunc("tenant", func(*http.Request) string { return "" }),
		middleware.WithCostFunc("bytes", func(*http.Request) (int64, error) { return 1000, nil }),
		middleware.WithHook(func(e middleware.Event) { ev = e }))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := middleware.NewPlan("", g.Limiters)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := plan.Limiters(), g.Limiters; !reflect.DeepEqual(got, want) {
		t.Fatalf("Limiters = %v, want %v", got, want)
	}
	id := role.Identity{User: "alice"}
	src := planSource{ip: "ip:192.0.2.1", values: map[string]string{"header(X-Api-Key)": "k1"}}
	for i := range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("X-Api-Key", "k1")
		r = r.WithContext(role.NewContext(r.Context(), id))
		w := httptest.NewRecorder()
		mw(okHandler).ServeHTTP(w, r)

		reqs := mem.requests()
		cs := plan.Checks(id, role.Resolution{Limiters: g.Limiters}, src)
		cs[5].Cost = 1000 // the transport's own cost function
		if got := reqs[len(reqs)-1].Checks; !reflect.DeepEqual(cs, got) {
			t.Fatalf("request %d: Plan.Checks = %+v\nmiddleware passed %+v", i, cs, got)
		}
		if got := w.Header().Get("RateLimit-Policy"); got != plan.PolicyField() {
			t.Errorf("request %d: RateLimit-Policy %q, Plan.PolicyField %q", i, got, plan.PolicyField())
		}
		var maxT int64
		if !ev.Decision.Allowed {
			maxT = middleware.RetryAfterSeconds(ev.Decision.RetryAfter)
			if got := w.Header().Get("Retry-After"); got != itoa(maxT) {
				t.Errorf("request %d: Retry-After %q, RetryAfterSeconds %d", i, got, maxT)
			}
		}
		values, primary := plan.RateLimit(&ev.Decision, maxT)
		if got := w.Header().Values("RateLimit"); !reflect.DeepEqual(got, values) {
			t.Errorf("request %d: RateLimit %q, Plan.RateLimit %q", i, got, values)
		}
		pol, ok := plan.Policy(ev.Decision.Windows[primary])
		if !ok || pol.Name != ev.Policy || pol.Limiter.ID() != ev.Limiter || pol.Window != ev.Window {
			t.Errorf("request %d: Plan.Policy of the primary window = %+v, %v; event names %s, %s, %v", i, pol, ok, ev.Policy, ev.Limiter, ev.Window)
		}
		if want := i < 2; ev.Decision.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i, ev.Decision.Allowed, want)
		}
	}
	cs := plan.Checks(id, role.Resolution{Limiters: g.Limiters}, src)
	cs[5].Cost = 2 << 30
	if pol, ok := plan.Oversized(cs); !ok || pol.Name != "user[bytes]-1d" {
		t.Errorf("Oversized = %+v, %v; want user[bytes]-1d", pol, ok)
	}
	cs[5].Cost = 1
	if pol, ok := plan.Oversized(cs); ok {
		t.Errorf("Oversized = %+v for costs that fit", pol)
	}
	if _, ok := plan.Policy(engine.WindowState{Check: 9}); ok {
		t.Error("Policy found a window of a check the plan does not have")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
