// Package logthrottle limits how often a recurring log line is written, so
// that an outage costs a few lines, not one per request.
package logthrottle

import (
	"sync"
	"time"
)

// A Throttle lets one line through per period and counts the others. The
// zero value lets every line through; it is safe for concurrent use.
type Throttle struct {
	// Every is the least time between two lines.
	Every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

// Allow reports whether a line may be written at now. When it may, it also
// returns how many lines were held back since the last one written, and
// resets that count.
func (t *Throttle) Allow(now time.Time) (ok bool, suppressed int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.last.IsZero() && now.Sub(t.last) < t.Every {
		t.suppressed++
		return false, 0
	}
	t.last = now
	n := t.suppressed
	t.suppressed = 0
	return true, n
}
