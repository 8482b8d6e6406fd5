package throttle

import (
	"net/http"
	"time"
)

// Learn reads resp, the upstream's answer to the call p admitted. A 429
// or 503 is counted in the throttle's and its class's upstream 429s and,
// with a wait asked for (retryAfter), blocks p's lane fleet-wide for that
// long, at most max (DefaultMaxBlock when max <= 0). It does not finish
// p. A Permit learns once: a later Learn, a Learn of a finished Permit
// and a nil resp do nothing. It reports the block learned, 0 for none.
func (p *Permit) Learn(resp *http.Response, max time.Duration) time.Duration {
	if resp == nil || p.done.Load() || p.learned.Load() {
		return 0
	}
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0
	}
	if !p.learned.CompareAndSwap(false, true) {
		return 0
	}
	p.t.stats.upstream.Add(1)
	p.class.upstream429()
	if max <= 0 {
		max = DefaultMaxBlock
	}
	d, ok := retryAfter(resp.Header, time.Now(), max)
	if !ok || p.lane == nil || !p.t.retain(p.lane) {
		return 0 // finished meanwhile: its lane may be freed
	}
	defer p.t.release(p.lane)
	p.t.fleet.block(p.lane, d)
	return d
}
