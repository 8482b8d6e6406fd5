package otellimit_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/routertest"
	"github.com/slidelimit/slidelimit/contrib/otellimit"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	routertest.Sequence(t, slidelimit.WithHook(m.Hook))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int64{} // instrument → attributes → value
	var observations uint64
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otellimit.ScopeName {
			t.Errorf("instrumentation scope %q, want %q", sm.Scope.Name, otellimit.ScopeName)
		}
		for _, mt := range sm.Metrics {
			switch data := mt.Data.(type) {
			case metricdata.Sum[int64]:
				got[mt.Name] = map[string]int64{}
				for _, dp := range data.DataPoints {
					got[mt.Name][attrs(dp.Attributes)] = dp.Value
				}
			case metricdata.Histogram[float64]:
				if mt.Unit != "s" {
					t.Errorf("%s: unit %q, want s", mt.Name, mt.Unit)
				}
				for _, dp := range data.DataPoints {
					observations += dp.Count
				}
			}
		}
	}
	want := map[string]map[string]int64{
		"slidelimit.decisions": {
			"allowed ip-1min GET /a redis":       2,
			"denied ip-1min GET /a cache":        1,
			"allowed ip-1min GET /s redis":       1,
			"shadow_denied ip-1min GET /s cache": 1,
			"exempt   none":                      2,
			"denied  GET /c fail-closed":         1,
		},
		"slidelimit.backend.errors": {"GET /c": 1},
	}
	for name, series := range want {
		for k, v := range series {
			if got[name][k] != v {
				t.Errorf("%s{%s} = %d, want %d", name, k, got[name][k], v)
			}
		}
		if len(got[name]) != len(series) {
			t.Errorf("%s: series %v, want %v", name, got[name], series)
		}
	}
	if observations != 6 {
		t.Errorf("%d duration observations, want 6", observations)
	}
}

// attrs renders a data point's attributes as "outcome policy scope source"
// (or "scope" alone).
func attrs(s attribute.Set) string {
	get := func(k string) (string, bool) {
		v, ok := s.Value(attribute.Key(k))
		return v.AsString(), ok
	}
	scope, _ := get("slidelimit.scope")
	outcome, ok := get("slidelimit.outcome")
	if !ok {
		return scope
	}
	policy, _ := get("slidelimit.policy")
	source, _ := get("slidelimit.source")
	return outcome + " " + policy + " " + scope + " " + source
}

// TestMetricsThrottle: a throttle's queue, wait percentiles and calls by
// result, observed at collection.
func TestMetricsThrottle(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	th := routertest.ThrottleSequence(t, slidelimit.WithHook(m.Hook), m.Throttle)
	st := th.Stats()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ints := map[string]int64{}    // "instrument attributes" → value
	waits := map[string]float64{} // quantile → seconds
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch data := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					name, _ := dp.Attributes.Value("slidelimit.throttle.name")
					k := mt.Name + " " + name.AsString()
					if r, ok := dp.Attributes.Value("slidelimit.throttle.result"); ok {
						k += " " + r.AsString()
					}
					ints[k] = dp.Value
				}
			case metricdata.Gauge[float64]:
				if mt.Name != "slidelimit.throttle.call.time_in_queue" || mt.Unit != "s" {
					t.Errorf("gauge %s in %q, want slidelimit.throttle.call.time_in_queue in s", mt.Name, mt.Unit)
				}
				for _, dp := range data.DataPoints {
					q, _ := dp.Attributes.Value("slidelimit.throttle.quantile")
					waits[q.AsString()] = dp.Value
				}
			}
		}
	}
	for k, want := range map[string]int64{
		"slidelimit.throttle.queued_calls api":       0,
		"slidelimit.throttle.active_permits api":     1,
		"slidelimit.throttle.calls api acquired":     3,
		"slidelimit.throttle.calls api rejected":     1,
		"slidelimit.throttle.calls api upstream_429": 1,
	} {
		if got, ok := ints[k]; !ok || got != want {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, want)
		}
	}
	if waits["0.5"] != st.WaitP50.Seconds() || waits["0.99"] != st.WaitP99.Seconds() || waits["0.99"] <= 0 {
		t.Errorf("time in queue %v, want p50 %v and p99 %v from Stats, above 0", waits, st.WaitP50, st.WaitP99)
	}
}

// TestMetricsThrottleClasses: a throttle with a share statement adds its
// classes' instruments, with the class a share names or "other".
func TestMetricsThrottleClasses(t *testing.T) {
	t.Parallel()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	m, err := otellimit.New(mp)
	if err != nil {
		t.Fatal(err)
	}
	routertest.ClassSequence(t, slidelimit.WithHook(m.Hook), m.Throttle)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	ints := map[string]int64{} // "instrument class result" → value
	waits := 0
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch data := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					class, ok := dp.Attributes.Value("slidelimit.throttle.class")
					if !ok {
						continue
					}
					k := mt.Name + " " + class.AsString()
					if r, ok := dp.Attributes.Value("slidelimit.throttle.result"); ok {
						k += " " + r.AsString()
					}
					ints[k] = dp.Value
				}
			case metricdata.Gauge[float64]:
				if mt.Name == "slidelimit.throttle.class.call.time_in_queue" {
					waits += len(data.DataPoints)
				}
			}
		}
	}
	want := map[string]int64{
		"slidelimit.throttle.class.queued_calls critical":       0,
		"slidelimit.throttle.class.queued_calls other":          0,
		"slidelimit.throttle.class.calls critical acquired":     3,
		"slidelimit.throttle.class.calls critical upstream_429": 1,
		"slidelimit.throttle.class.calls other acquired":        2,
		"slidelimit.throttle.class.calls other upstream_429":    0,
	}
	for k, w := range want {
		if got, ok := ints[k]; !ok || got != w {
			t.Errorf("%s = %d (present %v), want %d", k, got, ok, w)
		}
	}
	if len(ints) != len(want) || waits != 4 {
		t.Errorf("class points %v and %d time-in-queue points, want %d and 4", ints, waits, len(want))
	}
}
