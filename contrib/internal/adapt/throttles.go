package adapt

import (
	"net/http"
	"slices"
	"sync"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/middleware"
)

// Results of a throttle's calls, as the result label or attribute of the
// calls metric: acquired counts admissions, rejected refusals (the caller
// waits and asks again), upstream_429 the 429 and 503 answers Transport
// passed back.
const (
	ResultAcquired    = "acquired"
	ResultRejected    = "rejected"
	ResultUpstream429 = "upstream_429"
)

// Throttles holds the throttles a metrics package observes, and counts
// their refusals from the decision hook. Its methods are safe for
// concurrent use.
type Throttles struct {
	mu       sync.Mutex
	list     []*slidelimit.Throttle
	rejected map[string]int64
}

// ThrottleStats is one observed throttle's stats and refusals.
type ThrottleStats struct {
	slidelimit.ThrottleStats
	Rejected int64
}

// Add observes t. A throttle whose name is already observed is ignored:
// the name labels the series.
func (s *Throttles) Add(t *slidelimit.Throttle) {
	if t == nil {
		return
	}
	name := t.Stats().Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.rejected[name]; ok {
		return
	}
	if s.rejected == nil {
		s.rejected = make(map[string]int64)
	}
	s.list = append(s.list, t)
	s.rejected[name] = 0
}

// Hook counts a refusal of an observed throttle. A throttle's events carry
// no request, its name as Scope and Status 429 for a refusal.
func (s *Throttles) Hook(ev middleware.Event) {
	if ev.Request != nil || ev.Status != http.StatusTooManyRequests {
		return
	}
	s.mu.Lock()
	if n, ok := s.rejected[ev.Scope]; ok {
		s.rejected[ev.Scope] = n + 1
	}
	s.mu.Unlock()
}

// Stats returns the observed throttles' stats, in the order they were added.
func (s *Throttles) Stats() []ThrottleStats {
	s.mu.Lock()
	list := slices.Clone(s.list)
	s.mu.Unlock()
	out := make([]ThrottleStats, 0, len(list))
	for _, t := range list {
		st := t.Stats()
		s.mu.Lock()
		r := s.rejected[st.Name]
		s.mu.Unlock()
		out = append(out, ThrottleStats{ThrottleStats: st, Rejected: r})
	}
	return out
}
