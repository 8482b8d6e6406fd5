package throttle

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// waitSamples is how many recent waits the percentiles are taken over.
const waitSamples = 1024

// OtherClass is the class of the statistics of calls whose class no
// share statement of the throttle's rules names (Call.Class "" among
// them).
const OtherClass = "other"

// maxClasses bounds the classes a throttle keeps statistics of: the
// share statements' classes of every rule group it enforced (SetRules may
// bring new ones); a class past the bound counts as OtherClass.
const maxClasses = 32

// stats is what the operator page shows of a throttle.
type stats struct {
	waiting  atomic.Int64 // callers in Wait now
	calls    atomic.Int64 // Redis calls made for waiting (decisions and turn script)
	admits   atomic.Int64 // calls admitted (Allow, Wait), less WaitAny's cancelled ones
	active   atomic.Int64 // permits admitted and not yet finished
	upstream atomic.Int64 // 429 and 503 answers seen by Transport

	waits waitRing

	cmu     sync.Mutex
	classes []*classStats // by first use; at most maxClasses, OtherClass among them
}

// classStats is what a throttle did for the calls of one class.
type classStats struct {
	name     string
	waiting  atomic.Int64
	admits   atomic.Int64
	upstream atomic.Int64
	waits    waitRing
}

// waitRing keeps the last waitSamples waits.
type waitRing struct {
	mu    sync.Mutex
	waits []time.Duration
	next  int
}

func (r *waitRing) add(d time.Duration) {
	r.mu.Lock()
	if len(r.waits) < waitSamples {
		r.waits = append(r.waits, d)
	} else {
		r.waits[r.next] = d
		r.next = (r.next + 1) % waitSamples
	}
	r.mu.Unlock()
}

// percentiles returns the median and the 99th percentile of the waits, 0
// for none.
func (r *waitRing) percentiles() (p50, p99 time.Duration) {
	r.mu.Lock()
	w := slices.Clone(r.waits)
	r.mu.Unlock()
	if len(w) == 0 {
		return 0, 0
	}
	slices.Sort(w)
	return w[(len(w)-1)*50/100], w[(len(w)-1)*99/100]
}

// class returns the statistics of class name, which the caller has
// checked is named by a share statement (else it passes OtherClass). Past
// maxClasses classes it returns OtherClass's.
func (s *stats) class(name string) *classStats {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	var other *classStats
	for _, c := range s.classes {
		if c.name == name {
			return c
		}
		if c.name == OtherClass {
			other = c
		}
	}
	room := maxClasses - len(s.classes) // less one for OtherClass until it is kept
	if other == nil {
		room--
	}
	if room <= 0 && name != OtherClass {
		if other != nil {
			return other
		}
		name = OtherClass
	}
	c := &classStats{name: name}
	s.classes = append(s.classes, c)
	return c
}

// admitted counts an admission after a wait of d.
func (s *stats) admitted(d time.Duration) {
	s.admits.Add(1)
	s.waits.add(d)
}

// classStats returns the statistics of the calls of class under p: of
// class if a share statement of p names it, else of OtherClass; nil when
// p has no share statements.
func (t *Throttle) classStats(p *Plan, class string) *classStats {
	if len(p.g.Shares) == 0 {
		return nil
	}
	if !slices.ContainsFunc(p.g.Shares, func(s rules.Share) bool { return s.Class == class }) {
		class = OtherClass
	}
	return t.stats.class(class)
}

// counted runs wait, the wait of a call of class under p, counting it in
// its class's statistics, and marks the Permit it returns as of that
// class.
func (t *Throttle) counted(p *Plan, class string, wait func() (*Permit, error)) (*Permit, error) {
	c := t.classStats(p, class)
	if c == nil {
		return wait()
	}
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	start := time.Now()
	pm, err := wait()
	if pm != nil {
		c.admits.Add(1)
		c.waits.add(time.Since(start))
		pm.class = c
	}
	return pm, err
}

// unadmit takes back an admission of c, nil for none: WaitAny cancelled
// it.
func (c *classStats) unadmit() {
	if c != nil {
		c.admits.Add(-1)
	}
}

// upstream429 counts a 429 or 503 answer to a call of c, nil for none.
func (c *classStats) upstream429() {
	if c != nil {
		c.upstream.Add(1)
	}
}

// Stats is what a throttle did in this process. The root package's
// ThrottleStats, which documents each field, is made of it field by field.
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
	Classes      []ClassStats  `json:"classes,omitempty"`
}

// ClassStats is what a throttle did for one class of calls in this
// process, converted to the root package's ThrottleClassStats.
type ClassStats struct {
	Class        string        `json:"class"`
	Waiting      int64         `json:"waiting"`
	WaitP50      time.Duration `json:"wait_p50"`
	WaitP99      time.Duration `json:"wait_p99"`
	Admitted     int64         `json:"admitted"`
	Upstream429s int64         `json:"upstream_429s"`
}

// Stats returns what t did in this process: of every class a share
// statement named and of OtherClass once a call of it came, in the order
// of the classes' first calls.
func (t *Throttle) Stats() Stats {
	s := &t.stats
	out := Stats{
		Name: t.name, Rules: t.plan().g.String(), Waiting: s.waiting.Load(), Admitted: s.admits.Load(),
		Active: s.active.Load(), RedisCalls: s.calls.Load(), Upstream429s: s.upstream.Load(),
	}
	out.WaitP50, out.WaitP99 = s.waits.percentiles()
	s.cmu.Lock()
	cs := slices.Clone(s.classes)
	s.cmu.Unlock()
	for _, c := range cs {
		st := ClassStats{Class: c.name, Waiting: c.waiting.Load(), Admitted: c.admits.Load(), Upstream429s: c.upstream.Load()}
		st.WaitP50, st.WaitP99 = c.waits.percentiles()
		out.Classes = append(out.Classes, st)
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
