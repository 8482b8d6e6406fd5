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
//
// Throttles given to Metrics.Throttle add observable instruments, read from
// Throttle.Stats and the hook at each collection (per process; named after
// ASP.NET Core's aspnetcore.rate_limiting metrics):
//
//	slidelimit.throttle.queued_calls        up-down counter, {call}: slidelimit.throttle.name
//	slidelimit.throttle.call.time_in_queue  gauge, s: slidelimit.throttle.name, slidelimit.throttle.quantile
//	slidelimit.throttle.calls               counter, {call}: slidelimit.throttle.name, slidelimit.throttle.result
//	slidelimit.throttle.active_permits      up-down counter, {permit}: slidelimit.throttle.name
//
// Results and quantiles are those of package promlimit.
//
// A throttle whose rules have share statements adds the same per class
// (Call.Class), slidelimit.throttle.class being a class a share statement
// names or "other" (ThrottleStats.Classes):
//
//	slidelimit.throttle.class.queued_calls        up-down counter, {call}: slidelimit.throttle.name, slidelimit.throttle.class
//	slidelimit.throttle.class.call.time_in_queue  gauge, s: slidelimit.throttle.name, slidelimit.throttle.class, slidelimit.throttle.quantile
//	slidelimit.throttle.class.calls               counter, {call}: slidelimit.throttle.name, slidelimit.throttle.class, slidelimit.throttle.result
//
// where the result is acquired or upstream_429: a refusal belongs to no
// class. They are instruments of their own, so that summing an instrument
// over its attributes counts each call once.
//
// A Limiter with regions given to Metrics.Regions adds, read from
// Limiter.RegionStats at each collection (per process):
//
//	slidelimit.region.replication.lag      gauge, s: slidelimit.region.name
//	slidelimit.region.replication.queue    up-down counter, {entry}: slidelimit.region.name
//	slidelimit.region.replication.dropped  counter, {entry}: slidelimit.region.name
//	slidelimit.region.reachable            gauge, 1 or 0: slidelimit.region.name
package otellimit

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slidelimit/slidelimit"
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
	throttles adapt.Throttles
	regions   adapt.Regions
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
	if err := m.observeThrottles(meter); err != nil {
		return nil, err
	}
	if err := m.observeClasses(meter); err != nil {
		return nil, err
	}
	if err := m.observeRegions(meter); err != nil {
		return nil, err
	}
	return &m, nil
}

// observeThrottles creates the throttles' observable instruments and their
// callback.
func (m *Metrics) observeThrottles(meter metric.Meter) error {
	queued, e1 := meter.Int64ObservableUpDownCounter("slidelimit.throttle.queued_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Callers waiting in the throttle now, in this process."))
	wait, e2 := meter.Float64ObservableGauge("slidelimit.throttle.call.time_in_queue", metric.WithUnit("s"),
		metric.WithDescription("Percentiles of the time Wait took to admit, over the last 1,024 admissions in this process."))
	calls, e3 := meter.Int64ObservableCounter("slidelimit.throttle.calls", metric.WithUnit("{call}"),
		metric.WithDescription("The throttle's decisions and the upstream's 429s, in this process."))
	active, e4 := meter.Int64ObservableUpDownCounter("slidelimit.throttle.active_permits", metric.WithUnit("{permit}"),
		metric.WithDescription("Permits admitted and not yet finished, in this process."))
	if err := errors.Join(e1, e2, e3, e4); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range m.throttles.Stats() {
			name := attribute.String("slidelimit.throttle.name", st.Name)
			o.ObserveInt64(queued, st.Waiting, metric.WithAttributes(name))
			o.ObserveInt64(active, st.Active, metric.WithAttributes(name))
			for _, q := range []struct {
				q float64
				v float64
			}{{0.5, st.WaitP50.Seconds()}, {0.99, st.WaitP99.Seconds()}} {
				o.ObserveFloat64(wait, q.v, metric.WithAttributes(name,
					attribute.String("slidelimit.throttle.quantile", strconv.FormatFloat(q.q, 'g', -1, 64))))
			}
			for _, r := range []struct {
				result string
				n      int64
			}{{adapt.ResultAcquired, st.Admitted}, {adapt.ResultRejected, st.Rejected}, {adapt.ResultUpstream429, st.Upstream429s}} {
				o.ObserveInt64(calls, r.n, metric.WithAttributes(name, attribute.String("slidelimit.throttle.result", r.result)))
			}
		}
		return nil
	}, queued, wait, calls, active)
	return err
}

// observeClasses creates the instruments of the throttles' classes and
// their callback.
func (m *Metrics) observeClasses(meter metric.Meter) error {
	queued, e1 := meter.Int64ObservableUpDownCounter("slidelimit.throttle.class.queued_calls", metric.WithUnit("{call}"),
		metric.WithDescription("Callers of the class waiting in the throttle now, in this process."))
	wait, e2 := meter.Float64ObservableGauge("slidelimit.throttle.class.call.time_in_queue", metric.WithUnit("s"),
		metric.WithDescription("Percentiles of the time Wait took to admit the class's calls, over its last 1,024 admissions in this process."))
	calls, e3 := meter.Int64ObservableCounter("slidelimit.throttle.class.calls", metric.WithUnit("{call}"),
		metric.WithDescription("The class's admissions and the upstream's 429s to its calls, in this process."))
	if err := errors.Join(e1, e2, e3); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range m.throttles.Stats() {
			name := attribute.String("slidelimit.throttle.name", st.Name)
			for _, cl := range st.Classes {
				class := attribute.String("slidelimit.throttle.class", cl.Class)
				o.ObserveInt64(queued, cl.Waiting, metric.WithAttributes(name, class))
				for _, q := range []struct {
					q string
					v float64
				}{{"0.5", cl.WaitP50.Seconds()}, {"0.99", cl.WaitP99.Seconds()}} {
					o.ObserveFloat64(wait, q.v, metric.WithAttributes(name, class, attribute.String("slidelimit.throttle.quantile", q.q)))
				}
				o.ObserveInt64(calls, cl.Admitted, metric.WithAttributes(name, class,
					attribute.String("slidelimit.throttle.result", adapt.ResultAcquired)))
				o.ObserveInt64(calls, cl.Upstream429s, metric.WithAttributes(name, class,
					attribute.String("slidelimit.throttle.result", adapt.ResultUpstream429)))
			}
		}
		return nil
	}, queued, wait, calls)
	return err
}

// Throttle adds t's instruments to m. Its refusals are counted only if m's
// Hook is a hook of t's Limiter. A second throttle of the same name is
// ignored.
func (m *Metrics) Throttle(t *slidelimit.Throttle) { m.throttles.Add(t) }

// Hook records one decision; give it to slidelimit.WithHook for a
// Limiter, or to middleware.WithHook.
func (m *Metrics) Hook(ev middleware.Event) {
	m.throttles.Hook(ev)
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
