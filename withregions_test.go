package slidelimit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
)

// TestWithRegionsMistakes checks that each mistake in Regions makes New
// fail with a *ConfigError of kind "option" naming it.
func TestWithRegionsMistakes(t *testing.T) {
	_, local := redistest.Mini(t)
	_, peer := redistest.Mini(t)
	for _, tc := range []struct {
		name string
		r    slidelimit.Regions
	}{
		{"empty local", slidelimit.Regions{Peers: map[string]engine.Client{"us": peer}}},
		{"local among peers", slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"eu": peer}}},
		{"nil client", slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"us": nil}}},
		{"empty peer name", slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"": peer}}},
	} {
		lim, err := slidelimit.New(local, slidelimit.WithRegions(tc.r))
		var ce *slidelimit.ConfigError
		if !errors.As(err, &ce) || ce.Kind != "option" {
			t.Errorf("%s: New = %v, %v; want a *ConfigError of kind option", tc.name, lim, err)
			if lim != nil {
				lim.Close()
			}
		}
	}
	lim, err := slidelimit.New(local, slidelimit.WithRegions(slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"us": peer}}))
	if err != nil {
		t.Fatalf("valid regions: %v", err)
	}
	lim.Close()
}

// TestWithRegionsRefusesUnshared checks that under regions a group the
// share rule does not cover (a grain, a calendar window) is a *ConfigError
// unless it says regions:local, and that a plain group registers.
func TestWithRegionsRefusesUnshared(t *testing.T) {
	_, local := redistest.Mini(t)
	_, peer := redistest.Mini(t)
	lim, err := slidelimit.New(local, slidelimit.WithRegions(slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"us": peer}}))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for _, text := range []string{"ip:20000/d~15min", "ip:5/calendar day"} {
		_, err := lim.Middleware(text, middleware.WithScope("a"))
		var ce *slidelimit.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "regions:local") {
			t.Errorf("%q under regions: %v, want a *ConfigError naming regions:local", text, err)
		}
		if _, err := lim.Middleware(text+"; regions:local", middleware.WithScope("b")); err != nil {
			t.Errorf("%q with regions:local: %v", text, err)
		}
	}
	if _, err := lim.Middleware("ip:10/min", middleware.WithScope("c")); err != nil {
		t.Errorf("a plain group under regions: %v", err)
	}
}
