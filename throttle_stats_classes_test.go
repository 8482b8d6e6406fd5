package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/role"
)

// ThrottleStats.Classes: per class a share statement names, and "other"
// for the rest, in the order of their first calls: waiting callers,
// admissions by any method (less WaitAny's given back) and wait
// percentiles; the operator page and its API show them per throttle.
func TestThrottleStatsClasses(t *testing.T) {
	for name, client := range backends(t) {
		t.Run(name, func(t *testing.T) {
			lim := throttleLimiter(t, client, randomPrefix(t))
			th, err := lim.Throttle("gw", "global:4/min; share(critical):30%; share(batch):50%")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			call := func(class string) slidelimit.Call { return slidelimit.Call{Class: class, Tenant: "acme"} }
			if p, err := th.Wait(ctx, call("critical")); err != nil {
				t.Fatal(err)
			} else {
				defer p.Finish(nil)
			}
			if p, ok, err := th.Allow(ctx, call("batch")); !ok || err != nil {
				t.Fatalf("Allow: %v, %v", ok, err)
			} else {
				defer p.Finish(nil)
			}
			// Two calls of classes no share names, one admitted: other.
			if p, _, err := th.WaitAny(ctx, call("bulk"), call("")); err != nil {
				t.Fatal(err)
			} else {
				defer p.Finish(nil)
			}
			if p, err := th.Wait(ctx, call("critical")); err != nil {
				t.Fatal(err)
			} else {
				defer p.Finish(nil)
			}
			// The window is full: a batch call waits.
			wctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { _, err := th.Wait(wctx, call("batch")); done <- err }()
			deadline := time.Now().Add(10 * time.Second)
			for classStat(th.Stats(), "batch").Waiting != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("the batch waiter is not counted waiting after 10 s: %+v", th.Stats().Classes)
				}
				time.Sleep(5 * time.Millisecond)
			}
			st := th.Stats()
			got := fmt.Sprint(classSummary(st))
			if want := "[critical 2/0 batch 1/1 other 1/0]"; got != want {
				t.Errorf("classes (admitted/waiting) %s, want %s", got, want)
			}
			if c := classStat(st, "critical"); c.WaitP99 < c.WaitP50 || c.WaitP99 <= 0 {
				t.Errorf("critical's wait percentiles p50 %v p99 %v", c.WaitP50, c.WaitP99)
			}
			if page := adminGet(t, lim, "/"); !strings.Contains(page, "gw · class critical") || !strings.Contains(page, "gw · class other") {
				t.Errorf("the page has no row per class:\n%s", page)
			}
			if api := adminGet(t, lim, "/api/throttles"); !strings.Contains(api, `"classes":[{"class":"critical","waiting":0,`) {
				t.Errorf("GET /api/throttles = %s, want the classes", api)
			}
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the batch waiter: %v", err)
			}
			if c := classStat(th.Stats(), "batch"); c.Waiting != 0 || c.Admitted != 1 {
				t.Errorf("batch after its waiter left: %+v", c)
			}
		})
	}
}

// A throttle without share statements has no classes, whatever its calls'.
func TestThrottleStatsNoClasses(t *testing.T) {
	lim := faceLimiter(t)
	th, err := lim.Throttle("plain", "global:4/min")
	if err != nil {
		t.Fatal(err)
	}
	p, err := th.Wait(context.Background(), slidelimit.Call{Class: "critical", Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	if st := th.Stats(); st.Classes != nil || st.Admitted != 1 {
		t.Errorf("Stats = %+v, want 1 admitted and no classes", st)
	}
}

func classStat(st slidelimit.ThrottleStats, class string) slidelimit.ThrottleClassStats {
	for _, c := range st.Classes {
		if c.Class == class {
			return c
		}
	}
	return slidelimit.ThrottleClassStats{}
}

func classSummary(st slidelimit.ThrottleStats) []string {
	var out []string
	for _, c := range st.Classes {
		out = append(out, fmt.Sprintf("%s %d/%d", c.Class, c.Admitted, c.Waiting))
	}
	return out
}

// adminGet returns the body of GET path on lim's operator page, as an
// operator of role ops.
func adminGet(t *testing.T, lim *slidelimit.Limiter, path string) string {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "o", Roles: []role.Role{"ops"}}))
	w := httptest.NewRecorder()
	lim.AdminHandler("ops").ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
	}
	return w.Body.String()
}
