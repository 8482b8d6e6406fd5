package throttle

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
)

// waitSamples is how many recent waits the percentiles are taken over.
const waitSamples = 1024

// stats is what the operator page shows of a throttle.
type stats struct {
	waiting  atomic.Int64 // callers in Wait now
	calls    atomic.Int64 // Redis calls made for waiting (decisions and turn script)
	admits   atomic.Int64 // calls admitted (Allow, Wait), less WaitAny's cancelled ones
	active   atomic.Int64 // permits admitted and not yet finished
	upstream atomic.Int64 // 429 and 503 answers seen by Transport

	mu    sync.Mutex
	waits []time.Duration // the last waitSamples waits, a ring
	next  int
}

func (s *stats) admitted(d time.Duration) {
	s.admits.Add(1)
	s.mu.Lock()
	if len(s.waits) < waitSamples {
		s.waits = append(s.waits, d)
	} else {
		s.waits[s.next] = d
		s.next = (s.next + 1) % waitSamples
	}
	s.mu.Unlock()
}

// Stats is what a throttle did in this process. It is converted to the
// root package's ThrottleStats, which documents each field: the two keep
// the same fields in the same order.
type Stats struct {
	Name         string        `json:"name"`
	Rules        string        `json:"rules"`
	Waiting      int64         `json:"waiting"`
	WaitP50      time.Duration `json:"wait_p50"`
	WaitP99      time.Duration `json:"wait_p99"`
	Admitted     int64         `json:"admitted"`
	Active       int64         `json:"active"`
	RedisCalls   int64         `json:"redis_calls"`
	Upstream429s int64         `json:"upstream_429s"`
}

// Stats returns what t did in this process.
func (t *Throttle) Stats() Stats {
	s := &t.stats
	out := Stats{
		Name: t.name, Rules: t.plan().g.String(), Waiting: s.waiting.Load(), Admitted: s.admits.Load(),
		Active: s.active.Load(), RedisCalls: s.calls.Load(), Upstream429s: s.upstream.Load(),
	}
	s.mu.Lock()
	w := slices.Clone(s.waits)
	s.mu.Unlock()
	if len(w) > 0 {
		slices.Sort(w)
		out.WaitP50 = w[(len(w)-1)*50/100]
		out.WaitP99 = w[(len(w)-1)*99/100]
	}
	return out
}

// emit gives the hooks an Event for one decision of t: Scope is the
// throttle's name, Status 429 for a refusal (the caller waits) and 0 for
// an admission.
func (t *Throttle) emit(req *engine.Request, d engine.Decision, err error, latency time.Duration) {
	if len(t.hooks) == 0 {
		return
	}
	ev := middleware.Event{Scope: t.name, Allowed: d.Allowed, RetryAfter: d.RetryAfter, Source: d.Source,
		Err: err, Decision: d, Latency: latency}
	if !d.Allowed {
		ev.Status = http.StatusTooManyRequests
	}
	ws := d.Denied
	if d.Allowed && len(d.Windows) > 0 {
		ws = d.Windows[0]
		for _, x := range d.Windows[1:] {
			if x.Remaining < ws.Remaining {
				ws = x
			}
		}
	}
	if ws.Window.Limit > 0 && ws.Check < len(req.Checks) {
		ev.Rule, ev.Window = req.Checks[ws.Check].Rule.ID(), declared(ws.Window, t.cfg.Transit)
	}
	for _, h := range t.hooks {
		h(ev)
	}
}
