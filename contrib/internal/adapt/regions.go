package adapt

import (
	"slices"
	"sync"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
)

// Regions holds the Limiters with regions a metrics package observes. Its
// methods are safe for concurrent use.
type Regions struct {
	mu   sync.Mutex
	list []*slidelimit.Limiter
}

// Add observes l; a nil or already observed Limiter is ignored.
func (s *Regions) Add(l *slidelimit.Limiter) {
	if l == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.list, l) {
		s.list = append(s.list, l)
	}
}

// Stats returns every peer region of the observed Limiters; a peer seen by
// two of them is reported once, by the first.
func (s *Regions) Stats() []engine.RegionStats {
	s.mu.Lock()
	list := slices.Clone(s.list)
	s.mu.Unlock()
	var out []engine.RegionStats
	for _, l := range list {
		for _, st := range l.RegionStats() {
			if !slices.ContainsFunc(out, func(o engine.RegionStats) bool { return o.Region == st.Region }) {
				out = append(out, st)
			}
		}
	}
	return out
}
