package slidelimit_test

import (
	"errors"
	"testing"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
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
