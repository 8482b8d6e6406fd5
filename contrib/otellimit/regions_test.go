package otellimit_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/otellimit"
	"github.com/slidelimit/slidelimit/engine"
)

// TestMetricsRegions: a Limiter with regions adds a data point per peer
// region to each region instrument.
func TestMetricsRegions(t *testing.T) {
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
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	m.Regions(lim)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	points := map[string][]string{} // instrument → regions
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch data := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					if v, ok := dp.Attributes.Value("slidelimit.region.name"); ok {
						points[mt.Name] = append(points[mt.Name], v.AsString())
					}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					if v, ok := dp.Attributes.Value("slidelimit.region.name"); ok {
						points[mt.Name] = append(points[mt.Name], v.AsString())
					}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range data.DataPoints {
					if v, ok := dp.Attributes.Value("slidelimit.region.name"); ok {
						points[mt.Name] = append(points[mt.Name], v.AsString())
					}
				}
			}
		}
	}
	for _, name := range []string{"slidelimit.region.replication.lag", "slidelimit.region.replication.queue",
		"slidelimit.region.replication.dropped", "slidelimit.region.reachable"} {
		if len(points[name]) != 2 {
			t.Errorf("%s: data points for %v, want ap and us", name, points[name])
		}
	}
}
