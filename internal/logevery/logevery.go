// Package logevery limits how often a recurring log line is written, so
// that an outage costs a few lines, not one per request.
package logevery

import (
	"sync"
	"time"
)

// A Gate lets one line through per period and counts the others. The
// zero value lets every line through; it is safe for concurrent use.
type Gate struct {
	// Every is the least time between two lines.
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

// Allow reports whether a line may be written at now. When it may, it also
// returns how many lines were held back since the last one written, and
// resets that count.
func (g *Gate) Allow(now time.Time) (ok bool, suppressed int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.last.IsZero() && now.Sub(g.last) < g.Every {
		g.suppressed++
		return false, 0
	}
	g.last = now
	n := g.suppressed
	g.suppressed = 0
	return true, n
}
