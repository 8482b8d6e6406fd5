package promlimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/slidelimit/slidelimit"
)

// Descriptions of the peer regions' metrics.
var (
	regionLag = prometheus.NewDesc("slidelimit_region_replication_lag_seconds",
		"Age of the oldest admission the peer region has not acknowledged, 0 when none; in this process.",
		[]string{"region"}, nil)
	regionQueue = prometheus.NewDesc("slidelimit_region_replication_queue",
		"Admissions and give-backs waiting to be sent to the peer region, in this process.", []string{"region"}, nil)
	regionDropped = prometheus.NewDesc("slidelimit_region_replication_dropped_total",
		"Entries the peer region's full queue refused, in this process.", []string{"region"}, nil)
	regionReachable = prometheus.NewDesc("slidelimit_region_reachable",
		"1 when the last call to the peer region succeeded, else 0.", []string{"region"}, nil)
)

// Regions adds the peer regions of l, a Limiter with
// slidelimit.WithRegions, to c: their replication lag, queue, dropped
// entries and reachability, read from Limiter.RegionStats when scraped. A
// Limiter without regions adds nothing.
func (c *Collector) Regions(l *slidelimit.Limiter) { c.regions.Add(l) }

func describeRegions(ch chan<- *prometheus.Desc) {
	ch <- regionLag
	ch <- regionQueue
	ch <- regionDropped
	ch <- regionReachable
}

func (c *Collector) collectRegions(ch chan<- prometheus.Metric) {
	for _, st := range c.regions.Stats() {
		reachable := 0.0
		if st.Reachable {
			reachable = 1
		}
		ch <- constMetric(regionLag, prometheus.GaugeValue, st.Lag.Seconds(), st.Region)
		ch <- constMetric(regionQueue, prometheus.GaugeValue, float64(st.Queue), st.Region)
		ch <- constMetric(regionDropped, prometheus.CounterValue, float64(st.Dropped), st.Region)
		ch <- constMetric(regionReachable, prometheus.GaugeValue, reachable, st.Region)
	}
}
