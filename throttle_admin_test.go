package slidelimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// TestThrottleVisible: a throttle's decisions reach the decision hooks,
// and the operator page and API list it with its waiting callers and
// upstream 429s.
func TestThrottleVisible(t *testing.T) {
	var mu sync.Mutex
	var events []middleware.Event
	lim := throttleLimiter(t, miniClient(t), randomPrefix(t), slidelimit.WithHook(func(e middleware.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	th, err := lim.Throttle("payments", "global:1/min")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := th.Wait(ctx, slidelimit.Call{})
	if err != nil {
		t.Fatal(err)
	}
	th.Allow(ctx, slidelimit.Call{}) // p is still active
	mu.Lock()
	if len(events) != 2 || events[0].Scope != "payments" || !events[0].Allowed || events[1].Allowed ||
		events[1].Status != http.StatusTooManyRequests || events[1].Rule != "global" {
		t.Errorf("hook events = %+v, want an admission then a refusal of global in payments", events)
	}
	mu.Unlock()

	if d, err := lim.Peek(ctx, "payments", "global", "", false); err != nil || d.Windows[0].Used != 1 {
		t.Errorf("Peek of the throttle's scope = %+v, %v; want 1 used", d, err)
	}

	h := lim.AdminHandler("ops")
	get := func(path string) string {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "o", Roles: []role.Role{"ops"}}))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.String()
	}
	if page := get("/"); !strings.Contains(page, `id="throttles"`) || !strings.Contains(page, "payments") ||
		!strings.Contains(page, "<th>Active</th>") {
		t.Errorf("the page does not list the throttle and its active permits:\n%s", page)
	}
	if api := get("/api/throttles"); !strings.Contains(api, `"name":"payments"`) || !strings.Contains(api, `"admitted":1,"active":1`) {
		t.Errorf("GET /api/throttles = %s, want 1 admitted and active", api)
	}
	p.Finish(nil)
	if api := get("/api/throttles"); !strings.Contains(api, `"admitted":1,"active":0`) {
		t.Errorf("GET /api/throttles after Finish = %s, want 1 admitted, none active", api)
	}
}
