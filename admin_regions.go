package slidelimit

import "github.com/slidelimit/slidelimit/internal/admin"

// Regions returns the peer regions' replication for the operator page,
// none without WithRegions.
func (s adminSource) Regions() []admin.Region {
	stats := s.l.RegionStats()
	if len(stats) == 0 {
		return nil
	}
	out := make([]admin.Region, len(stats))
	for i, st := range stats {
		out[i] = admin.Region{Name: st.Region, Lag: st.Lag.Seconds(), Queue: st.Queue, Dropped: st.Dropped,
			Reachable: st.Reachable}
	}
	return out
}
