package slidelimit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/admin"
	"github.com/slidelimit/slidelimit/internal/redistest"
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
