package promlimit_test

import (
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/promlimit"
	"github.com/slidelimit/slidelimit/engine"
)

// TestCollectorRegions: a Limiter with regions adds a series per peer
// region of each region metric; one without regions adds none.
func TestCollectorRegions(t *testing.T) {
	t.Parallel()
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { c.Close() })
		return c
	}
	lim, err := slidelimit.New(client(), slidelimit.WithRegions(slidelimit.Regions{Local: "eu",
		Peers: map[string]engine.Client{"ap": client(), "us": client()}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	plain, err := slidelimit.New(client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })

	m := promlimit.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	m.Regions(plain)
	names := []string{"slidelimit_region_replication_lag_seconds", "slidelimit_region_replication_queue",
		"slidelimit_region_replication_dropped_total", "slidelimit_region_reachable"}
	if n := testutil.CollectAndCount(m, names...); n != 0 {
		t.Errorf("%d region series without regions, want 0", n)
	}
	m.Regions(lim)
	m.Regions(lim) // observed once
	for _, name := range names {
		if n := testutil.CollectAndCount(m, name); n != 2 {
			t.Errorf("%d series of %s, want 2 (ap and us)", n, name)
		}
	}
	want := `
# HELP slidelimit_region_replication_queue Admissions and give-backs waiting to be sent to the peer region, in this process.
# TYPE slidelimit_region_replication_queue gauge
slidelimit_region_replication_queue{region="ap"} 0
slidelimit_region_replication_queue{region="us"} 0
# HELP slidelimit_region_replication_dropped_total Entries the peer region's full queue refused, in this process.
# TYPE slidelimit_region_replication_dropped_total counter
slidelimit_region_replication_dropped_total{region="ap"} 0
slidelimit_region_replication_dropped_total{region="us"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelimit_region_replication_queue",
		"slidelimit_region_replication_dropped_total"); err != nil {
		t.Error(err)
	}
}
