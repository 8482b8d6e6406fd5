// Package promlimit exports slidelimit's decisions as Prometheus metrics.
//
// A Collector is fed by the middleware's decision hook and registered like
// any collector:
//
//	m := promlimit.New()
//	prometheus.MustRegister(m)
//	lim, err := slidelimit.New(client, slidelimit.WithHook(m.Hook))
//
// Metrics (labels are bounded: scope and policy come from the rule groups,
// never from the subject):
//
//	slidelimit_decisions_total{scope,policy,outcome,source}  counter
//	slidelimit_backend_errors_total{scope}                   counter
//	slidelimit_decision_duration_seconds{scope}              histogram
//
// outcome is allowed, denied, shadow_denied, exempt or error (a 500); source
// is the engine's decision source (redis, fail-open, fail-closed, local, or
// none for exempt requests). Exempt requests have an empty scope and policy.
//
// Throttles given to Collector.Throttle add, read from Throttle.Stats and
// the hook when scraped (per process; throttle is the throttle's name):
//
//	slidelimit_throttle_queued_calls{throttle}                         gauge
//	slidelimit_throttle_call_time_in_queue_seconds{throttle,quantile}  gauge
//	slidelimit_throttle_calls_total{throttle,result}                   counter
//	slidelimit_throttle_active_permits{throttle}                       gauge
//
// result is acquired, rejected (a refusal: the caller waits) or
// upstream_429; quantile is 0.5 or 0.99 over the last 1,024 admissions.
// Active permits are those admitted and not yet finished.
//
// A throttle whose rules have share statements adds the same per class
// (Call.Class), the class label being a class a share statement names or
// "other" (ThrottleStats.Classes):
//
//	slidelimit_throttle_class_queued_calls{throttle,class}                         gauge
//	slidelimit_throttle_class_call_time_in_queue_seconds{throttle,class,quantile}  gauge
//	slidelimit_throttle_class_calls_total{throttle,class,result}                   counter
//
// where result is acquired or upstream_429: a refusal belongs to no class.
//
// A Limiter with regions given to Collector.Regions adds, read from
// Limiter.RegionStats when scraped (per process; region is a peer's name):
//
//	slidelimit_region_replication_lag_seconds{region}    gauge
//	slidelimit_region_replication_queue{region}          gauge
//	slidelimit_region_replication_dropped_total{region}  counter
//	slidelimit_region_reachable{region}                  gauge, 1 or 0
package promlimit

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/contrib/internal/adapt"
	"github.com/slidelimit/slidelimit/middleware"
)

// Collector counts decisions. Its Hook is safe for concurrent use. Create
// Collectors with New.
type Collector struct {
	decisions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	throttles adapt.Throttles
	regions   adapt.Regions
}

// Descriptions of the throttles' metrics, and of their classes'.
var (
	throttleQueued = prometheus.NewDesc("slidelimit_throttle_queued_calls",
		"Callers waiting in the throttle now, in this process.", []string{"throttle"}, nil)
	throttleWait = prometheus.NewDesc("slidelimit_throttle_call_time_in_queue_seconds",
		"Percentiles of the time Wait took to admit, over the last 1,024 admissions in this process.",
		[]string{"throttle", "quantile"}, nil)
	throttleCalls = prometheus.NewDesc("slidelimit_throttle_calls_total",
		"The throttle's decisions and the upstream's 429s, in this process.", []string{"throttle", "result"}, nil)
	throttleActive = prometheus.NewDesc("slidelimit_throttle_active_permits",
		"Permits admitted and not yet finished, in this process.", []string{"throttle"}, nil)
	classQueued = prometheus.NewDesc("slidelimit_throttle_class_queued_calls",
		"Callers of the class waiting in the throttle now, in this process.", []string{"throttle", "class"}, nil)
	classWait = prometheus.NewDesc("slidelimit_throttle_class_call_time_in_queue_seconds",
		"Percentiles of the time Wait took to admit the class's calls, over its last 1,024 admissions in this process.",
		[]string{"throttle", "class", "quantile"}, nil)
	classCalls = prometheus.NewDesc("slidelimit_throttle_class_calls_total",
		"The class's admissions and the upstream's 429s to its calls, in this process.", []string{"throttle", "class", "result"}, nil)
)

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector with the default histogram buckets, which span
// 0.1 ms to 1 s (a decision takes one Redis round trip; the engine's timeout
// defaults to 100 ms).
func New() *Collector {
	return &Collector{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_decisions_total",
			Help: "Rate-limit decisions by scope, deciding policy, outcome and decision source.",
		}, []string{"scope", "policy", "outcome", "source"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slidelimit_backend_errors_total",
			Help: "Decisions Redis could not make (the fail mode decided) by scope.",
		}, []string{"scope"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "slidelimit_decision_duration_seconds",
			Help:    "Time the engine took to decide, by scope.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"scope"}),
	}
}

// Hook records one decision; give it to slidelimit.WithHook for a
// Limiter, or to middleware.WithHook.
func (c *Collector) Hook(ev middleware.Event) {
	c.throttles.Hook(ev)
	c.decisions.WithLabelValues(ev.Scope, ev.Policy, adapt.Outcome(ev), adapt.Source(ev)).Inc()
	if adapt.BackendError(ev) {
		c.errors.WithLabelValues(ev.Scope).Inc()
	}
	if !ev.Exempt && ev.Latency > 0 {
		c.latency.WithLabelValues(ev.Scope).Observe(ev.Latency.Seconds())
	}
}

// Throttle adds t's metrics to c. Its refusals are counted only if c's
// Hook is a hook of t's Limiter. A second throttle of the same name is
// ignored.
func (c *Collector) Throttle(t *slidelimit.Throttle) { c.throttles.Add(t) }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.errors.Describe(ch)
	c.latency.Describe(ch)
	ch <- throttleQueued
	ch <- throttleWait
	ch <- throttleCalls
	ch <- throttleActive
	ch <- classQueued
	ch <- classWait
	ch <- classCalls
	describeRegions(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.errors.Collect(ch)
	c.latency.Collect(ch)
	c.collectRegions(ch)
	for _, st := range c.throttles.Stats() {
		ch <- constMetric(throttleQueued, prometheus.GaugeValue, float64(st.Waiting), st.Name)
		ch <- constMetric(throttleActive, prometheus.GaugeValue, float64(st.Active), st.Name)
		for _, q := range []struct {
			q float64
			v float64
		}{{0.5, st.WaitP50.Seconds()}, {0.99, st.WaitP99.Seconds()}} {
			ch <- constMetric(throttleWait, prometheus.GaugeValue, q.v, st.Name,
				strconv.FormatFloat(q.q, 'g', -1, 64))
		}
		for _, r := range []struct {
			result string
			n      int64
		}{{adapt.ResultAcquired, st.Admitted}, {adapt.ResultRejected, st.Rejected}, {adapt.ResultUpstream429, st.Upstream429s}} {
			ch <- constMetric(throttleCalls, prometheus.CounterValue, float64(r.n), st.Name, r.result)
		}
		collectClasses(ch, st.ThrottleStats)
	}
}

// collectClasses sends the metrics of st's classes.
func collectClasses(ch chan<- prometheus.Metric, st slidelimit.ThrottleStats) {
	for _, cl := range st.Classes {
		ch <- constMetric(classQueued, prometheus.GaugeValue, float64(cl.Waiting), st.Name, cl.Class)
		for _, q := range []struct {
			q string
			v float64
		}{{"0.5", cl.WaitP50.Seconds()}, {"0.99", cl.WaitP99.Seconds()}} {
			ch <- constMetric(classWait, prometheus.GaugeValue, q.v, st.Name, cl.Class, q.q)
		}
		ch <- constMetric(classCalls, prometheus.CounterValue, float64(cl.Admitted), st.Name, cl.Class, adapt.ResultAcquired)
		ch <- constMetric(classCalls, prometheus.CounterValue, float64(cl.Upstream429s), st.Name, cl.Class, adapt.ResultUpstream429)
	}
}

// constMetric is prometheus.NewConstMetric, the error reported as an
// invalid metric to the registry.
func constMetric(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(d, err)
	}
	return m
}
