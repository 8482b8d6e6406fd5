package admin_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/internal/admin"
)

// regionsFake is a Source with peer regions.
type regionsFake struct {
	fake
	regions []admin.Region
}

func (f *regionsFake) Regions() []admin.Region { return f.regions }

// TestRegions: GET /api/regions lists the peer regions' replication, and
// the page shows them, an unreachable one in bold; without regions the
// list is empty and the page has no such table.
func TestRegions(t *testing.T) {
	t.Parallel()
	f := &regionsFake{regions: []admin.Region{
		{Name: "ap", Lag: 0.042, Queue: 3, Reachable: true},
		{Name: "us", Lag: 12.5, Queue: 900, Dropped: 7},
	}}
	h := admin.New(f, admin.Config{}, "ops")
	w := serve(h, http.MethodGet, "/api/regions")
	var ans struct{ Regions []admin.Region }
	if err := json.Unmarshal(w.Body.Bytes(), &ans); w.Code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/regions: %d %s", w.Code, w.Body)
	}
	if !reflect.DeepEqual(ans.Regions, f.regions) {
		t.Errorf("GET /api/regions = %+v, want %+v", ans.Regions, f.regions)
	}
	page := serve(h, http.MethodGet, "/").Body.String()
	for _, want := range []string{`<table id="regions">`, "<td>ap</td><td>yes</td>", "<td>us</td><td><b>no</b></td>", "42ms", "12.5s", ">900<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	none := admin.New(&fake{}, admin.Config{}, "ops")
	if w := serve(none, http.MethodGet, "/api/regions"); strings.TrimSpace(w.Body.String()) != `{"regions":[]}` {
		t.Errorf("GET /api/regions without regions = %s", w.Body)
	}
	if page := serve(none, http.MethodGet, "/").Body.String(); strings.Contains(page, `id="regions"`) {
		t.Error("the page has a regions table without regions")
	}
}
