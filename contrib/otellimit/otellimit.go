// Package otellimit records slidelimit's decisions with an OpenTelemetry
// meter.
//
//	m, err := otellimit.New(otel.GetMeterProvider())
//	lim, err := slidelimit.New(client, slidelimit.WithHook(m.Hook))
//
// Instruments (attributes are bounded: scope and policy come from the rule
// groups, never from the subject):
//
//	slidelimit.decisions          counter, {decision}: slidelimit.scope, slidelimit.policy, slidelimit.outcome, slidelimit.source
//	slidelimit.backend.errors     counter, {error}: slidelimit.scope
//	slidelimit.decision.duration  histogram, s: slidelimit.scope
//
// Outcomes and sources are named as in package promlimit.
package otellimit

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slidelimit/slidelimit/contrib/internal/adapt"
	"github.com/slidelimit/slidelimit/middleware"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/slidelimit/slidelimit/contrib/otellimit"

// Metrics records decisions. Its Hook is safe for concurrent use. Create
// Metrics with New.
type Metrics struct {
	decisions metric.Int64Counter
	errors    metric.Int64Counter
	latency   metric.Float64Histogram
}

// New returns Metrics whose instruments come from a meter of mp.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		return nil, errors.New("otellimit: nil MeterProvider")
	}
	meter := mp.Meter(ScopeName)
	var m Metrics
	var e1, e2, e3 error
	m.decisions, e1 = meter.Int64Counter("slidelimit.decisions", metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions by scope, deciding policy, outcome and decision source."))
	m.errors, e2 = meter.Int64Counter("slidelimit.backend.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Decisions Redis could not make (the fail mode decided) by scope."))
	m.latency, e3 = meter.Float64Histogram("slidelimit.decision.duration", metric.WithUnit("s"),
		metric.WithDescription("Time the engine took to decide, by scope."),
		metric.WithExplicitBucketBoundaries(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1))
	if err := errors.Join(e1, e2, e3); err != nil {
		return nil, err
	}
	return &m, nil
}

// Hook records one decision; give it to slidelimit.WithHook for a
// Limiter, or to middleware.WithHook.
func (m *Metrics) Hook(ev middleware.Event) {
	ctx := context.Background()
	if ev.Request != nil {
		ctx = ev.Request.Context()
	}
	scope := attribute.String("slidelimit.scope", ev.Scope)
	m.decisions.Add(ctx, 1, metric.WithAttributes(scope,
		attribute.String("slidelimit.policy", ev.Policy),
		attribute.String("slidelimit.outcome", adapt.Outcome(ev)),
		attribute.String("slidelimit.source", adapt.Source(ev))))
	if adapt.BackendError(ev) {
		m.errors.Add(ctx, 1, metric.WithAttributes(scope))
	}
	if !ev.Exempt && ev.Latency > 0 {
		m.latency.Record(ctx, ev.Latency.Seconds(), metric.WithAttributes(scope))
	}
}
