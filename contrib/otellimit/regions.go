package otellimit

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/slidelimit/slidelimit"
)

// Regions adds the peer regions of l, a Limiter with
// slidelimit.WithRegions, to m: their replication lag, queue, dropped
// entries and reachability, read from Limiter.RegionStats at each
// collection. A Limiter without regions adds nothing.
func (m *Metrics) Regions(l *slidelimit.Limiter) { m.regions.Add(l) }

// observeRegions creates the peer regions' observable instruments and
// their callback.
func (m *Metrics) observeRegions(meter metric.Meter) error {
	lag, e1 := meter.Float64ObservableGauge("slidelimit.region.replication.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest admission the peer region has not acknowledged, 0 when none; in this process."))
	queue, e2 := meter.Int64ObservableUpDownCounter("slidelimit.region.replication.queue", metric.WithUnit("{entry}"),
		metric.WithDescription("Admissions and give-backs waiting to be sent to the peer region, in this process."))
	dropped, e3 := meter.Int64ObservableCounter("slidelimit.region.replication.dropped", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries the peer region's full queue refused, in this process."))
	reachable, e4 := meter.Int64ObservableGauge("slidelimit.region.reachable", metric.WithUnit("1"),
		metric.WithDescription("1 when the last call to the peer region succeeded, else 0."))
	if err := errors.Join(e1, e2, e3, e4); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, st := range m.regions.Stats() {
			name := metric.WithAttributes(attribute.String("slidelimit.region.name", st.Region))
			up := int64(0)
			if st.Reachable {
				up = 1
			}
			o.ObserveFloat64(lag, st.Lag.Seconds(), name)
			o.ObserveInt64(queue, int64(st.Queue), name)
			o.ObserveInt64(dropped, st.Dropped, name)
			o.ObserveInt64(reachable, up, name)
		}
		return nil
	}, lag, queue, dropped, reachable)
	return err
}
