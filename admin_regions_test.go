package slidelimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/role"
)

// TestAdminRegions checks that the operator page's API lists a Limiter's
// peer regions, by name, and none without regions.
func TestAdminRegions(t *testing.T) {
	t.Parallel()
	_, local := redistest.Mini(t)
	_, ap := redistest.Mini(t)
	_, us := redistest.Mini(t)
	with, err := slidelimit.New(local, slidelimit.WithRegions(slidelimit.Regions{Local: "eu",
		Peers: map[string]engine.Client{"us": us, "ap": ap}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { with.Close() })
	without, err := slidelimit.New(local)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { without.Close() })
	regions := func(lim *slidelimit.Limiter) []string {
		r := httptest.NewRequest("GET", "/api/regions", nil)
		r = r.WithContext(role.NewContext(r.Context(), role.Identity{User: "o", Roles: []role.Role{"ops"}}))
		w := httptest.NewRecorder()
		lim.AdminHandler("ops").ServeHTTP(w, r)
		var ans struct{ Regions []admin.Region }
		if err := json.Unmarshal(w.Body.Bytes(), &ans); w.Code != http.StatusOK || err != nil {
			t.Fatalf("GET /api/regions: %d %s", w.Code, w.Body)
		}
		var names []string
		for _, p := range ans.Regions {
			names = append(names, p.Name)
		}
		return names
	}
	if got := regions(with); len(got) != 2 || got[0] != "ap" || got[1] != "us" {
		t.Errorf("the peer regions: %v, want [ap us]", got)
	}
	if got := regions(without); len(got) != 0 {
		t.Errorf("the peer regions without regions: %v, want none", got)
	}
}

// TestAdminResetRegions checks that a reset from the operator page
// (POST /api/reset) reaches the peer regions under regions: their count
// key of the subject gets the reset's floor; the page says so.
func TestAdminResetRegions(t *testing.T) {
	t.Parallel()
	_, local := redistest.Mini(t)
	_, ap := redistest.Mini(t)
	_, us := redistest.Mini(t)
	prefix := redistest.Prefix(t)
	lim, err := slidelimit.New(local, slidelimit.WithKeyPrefix(prefix),
		slidelimit.WithRegions(slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"us": us, "ap": ap}}),
		slidelimit.WithIdentity(func(r *http.Request) (string, []string) {
			if r.Header.Get("X-Role") != "" {
				return "o", []string{r.Header.Get("X-Role")}
			}
			return "u", nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	if _, err := lim.Middleware("user:2/min", middleware.WithScope("api")); err != nil {
		t.Fatal(err)
	}
	form := url.Values{"scope": {"api"}, "limiter": {"user"}, "subject": {"u"}}
	r := httptest.NewRequest("POST", "/api/reset", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("X-Role", "ops")
	w := httptest.NewRecorder()
	lim.AdminHandler("ops").ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("POST /api/reset: %d %s", w.Code, w.Body)
	}
	floored := func(c *redis.Client) bool {
		ctx := context.Background()
		for _, k := range c.Keys(ctx, prefix+"*").Val() {
			if c.Type(ctx, k).Val() == "zset" && c.ZScore(ctx, k, "f").Val() < 0 {
				return true
			}
		}
		return false
	}
	redistest.Eventually(t, "the reset's floor in every region", func() bool { return floored(local) && floored(ap) && floored(us) })
	page := httptest.NewRequest("GET", "/", nil)
	page.Header.Set("X-Role", "ops")
	w = httptest.NewRecorder()
	lim.AdminHandler("ops").ServeHTTP(w, page)
	if !strings.Contains(w.Body.String(), "A reset or a lifted block reaches every peer region") {
		t.Errorf("the page does not say where a reset goes: %d %.300s", w.Code, w.Body)
	}
}
