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
package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelimit/slidelimit/contrib/internal/adapt"
	"github.com/slidelimit/slidelimit/middleware"
)

// Collector counts decisions. Its Hook is safe for concurrent use. Create
// Collectors with New.
type Collector struct {
	decisions *prometheus.CounterVec
	errors    *prometheus.CounterVec
	latency   *prometheus.HistogramVec
}

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
	c.decisions.WithLabelValues(ev.Scope, ev.Policy, adapt.Outcome(ev), adapt.Source(ev)).Inc()
	if adapt.BackendError(ev) {
		c.errors.WithLabelValues(ev.Scope).Inc()
	}
	if !ev.Exempt && ev.Latency > 0 {
		c.latency.WithLabelValues(ev.Scope).Observe(ev.Latency.Seconds())
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.decisions.Describe(ch)
	c.errors.Describe(ch)
	c.latency.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.decisions.Collect(ch)
	c.errors.Collect(ch)
	c.latency.Collect(ch)
}
