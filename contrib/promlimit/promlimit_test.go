package promlimit_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/routertest"
	"github.com/slidelimit/slidelimit/contrib/promlimit"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	m := promlimit.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	routertest.Sequence(t, slidelimit.WithHook(m.Hook))

	want := `
# HELP slidelimit_backend_errors_total Decisions Redis could not make (the fail mode decided) by scope.
# TYPE slidelimit_backend_errors_total counter
slidelimit_backend_errors_total{scope="GET /c"} 1
# HELP slidelimit_decisions_total Rate-limit decisions by scope, deciding policy, outcome and decision source.
# TYPE slidelimit_decisions_total counter
slidelimit_decisions_total{outcome="allowed",policy="ip-1min",scope="GET /a",source="redis"} 2
slidelimit_decisions_total{outcome="allowed",policy="ip-1min",scope="GET /s",source="redis"} 1
slidelimit_decisions_total{outcome="denied",policy="",scope="GET /c",source="fail-closed"} 1
slidelimit_decisions_total{outcome="denied",policy="ip-1min",scope="GET /a",source="cache"} 1
slidelimit_decisions_total{outcome="exempt",policy="",scope="",source="none"} 2
slidelimit_decisions_total{outcome="shadow_denied",policy="ip-1min",scope="GET /s",source="cache"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelimit_decisions_total", "slidelimit_backend_errors_total"); err != nil {
		t.Error(err)
	}
	// Every decision the engine made was timed: 6 of the 8 requests, in 3
	// scopes; exempt requests never reach the engine.
	if n := testutil.CollectAndCount(m, "slidelimit_decision_duration_seconds"); n != 3 {
		t.Errorf("%d latency series, want 3 (one per scope the engine decided in)", n)
	}
	var count uint64
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "slidelimit_decision_duration_seconds" {
			for _, mm := range mf.GetMetric() {
				count += mm.GetHistogram().GetSampleCount()
			}
		}
	}
	if count != 6 {
		t.Errorf("%d latency observations, want 6", count)
	}
}

// TestCollectorThrottle: a throttle's queue, wait percentiles and calls by
// result, read when scraped.
func TestCollectorThrottle(t *testing.T) {
	t.Parallel()
	m := promlimit.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	th := routertest.ThrottleSequence(t, slidelimit.WithHook(m.Hook), m.Throttle)
	st := th.Stats()
	want := `
# HELP slidelimit_throttle_active_permits Permits admitted and not yet finished, in this process.
# TYPE slidelimit_throttle_active_permits gauge
slidelimit_throttle_active_permits{throttle="api"} 1
# HELP slidelimit_throttle_calls_total The throttle's decisions and the upstream's 429s, in this process.
# TYPE slidelimit_throttle_calls_total counter
slidelimit_throttle_calls_total{result="acquired",throttle="api"} 3
slidelimit_throttle_calls_total{result="rejected",throttle="api"} 1
slidelimit_throttle_calls_total{result="upstream_429",throttle="api"} 1
# HELP slidelimit_throttle_queued_calls Callers waiting in the throttle now, in this process.
# TYPE slidelimit_throttle_queued_calls gauge
slidelimit_throttle_queued_calls{throttle="api"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelimit_throttle_active_permits",
		"slidelimit_throttle_calls_total", "slidelimit_throttle_queued_calls"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m, "slidelimit_throttle_call_time_in_queue_seconds"); n != 2 {
		t.Errorf("%d time-in-queue series, want 2 (p50 and p99)", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "slidelimit_throttle_call_time_in_queue_seconds" {
			continue
		}
		for _, mm := range mf.GetMetric() {
			want := st.WaitP50.Seconds()
			if mm.GetLabel()[0].GetValue() == "0.99" {
				want = st.WaitP99.Seconds()
			}
			if got := mm.GetGauge().GetValue(); got != want || got <= 0 {
				t.Errorf("time in queue %v = %v, want %v from Stats, above 0", mm.GetLabel(), got, want)
			}
		}
	}
}

// TestCollectorThrottleClasses: a throttle with a share statement adds
// its classes' series, labelled by the class a share names or "other".
func TestCollectorThrottleClasses(t *testing.T) {
	t.Parallel()
	m := promlimit.New()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	th := routertest.ClassSequence(t, slidelimit.WithHook(m.Hook), m.Throttle)
	want := `
# HELP slidelimit_throttle_class_calls_total The class's admissions and the upstream's 429s to its calls, in this process.
# TYPE slidelimit_throttle_class_calls_total counter
slidelimit_throttle_class_calls_total{class="critical",result="acquired",throttle="classes"} 3
slidelimit_throttle_class_calls_total{class="critical",result="upstream_429",throttle="classes"} 1
slidelimit_throttle_class_calls_total{class="other",result="acquired",throttle="classes"} 2
slidelimit_throttle_class_calls_total{class="other",result="upstream_429",throttle="classes"} 0
# HELP slidelimit_throttle_class_queued_calls Callers of the class waiting in the throttle now, in this process.
# TYPE slidelimit_throttle_class_queued_calls gauge
slidelimit_throttle_class_queued_calls{class="critical",throttle="classes"} 0
slidelimit_throttle_class_queued_calls{class="other",throttle="classes"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "slidelimit_throttle_class_calls_total",
		"slidelimit_throttle_class_queued_calls"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m, "slidelimit_throttle_class_call_time_in_queue_seconds"); n != 4 {
		t.Errorf("%d class time-in-queue series, want 4 (p50 and p99 of 2 classes)", n)
	}
	if st := th.Stats(); len(st.Classes) != 2 {
		t.Errorf("Stats().Classes = %+v, want critical and other", st.Classes)
	}
	// A throttle without shares has no class series.
	m2 := promlimit.New()
	routertest.ThrottleSequence(t, slidelimit.WithHook(m2.Hook), m2.Throttle)
	if n := testutil.CollectAndCount(m2, "slidelimit_throttle_class_queued_calls"); n != 0 {
		t.Errorf("%d class series of a throttle without shares, want 0", n)
	}
}
