package engine

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/fallback"
	"github.com/slidelimit/slidelimit/engine/internal/health"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/rules"
)

// fallback decides by the request's fail mode after Redis could not.
func (e *Engine) fallback(c *call, req *Request, cause error) (Decision, error) {
	mode := req.Fail
	if mode == rules.FailDefault {
		mode = e.fail
	}
	switch mode {
	case rules.FailOpen:
		return Decision{Allowed: true, Source: fromFailOpen.String(), Time: e.now()}, cause
	case rules.FailClosed:
		return Decision{Source: fromFailClosed.String(), Time: e.now()}, cause
	}
	e.setID(c) // a call that failed before it had one (closed, ctx done)
	t := e.now()
	decideLocal(e.local, c, t.UnixMicro(), e.known)
	return c.decision(req, fromLocal), cause
}

// warnEvery is the least time between two lines of a kind that an outage
// repeats: of one server's outage, of failed renewals or finishes.
const warnEvery = 10 * time.Second

// domain is one failure domain: the server a key lives on.
type domain = health.Domain

// newHealth returns the failure domains of e's client.
func (e *Engine) newHealth() *health.Monitor {
	return health.New(health.Config{
		Client: e.client, Addr: addrOf(e.client), Log: e.log, Timeout: e.timeout, LogEvery: warnEvery,
		Answered: answered, Stop: e.stop, Closed: e.closed.Load, Run: &e.bg,
	})
}

// route finds the domains c needs: one for a single server; otherwise c's
// keys are split into script calls (parts) and each part's domain found.
func (e *Engine) route(c *call) {
	c.doms = c.doms[:0]
	if e.group == groupAll {
		c.doms = append(c.doms, e.doms.One)
		return
	}
	c.split(e.group)
	for i := range c.parts {
		d := e.doms.Of(c.plan.Keys[c.part(i)[0]])
		c.parts[i].dom = d
		if !containsDomain(c.doms, d) {
			c.doms = append(c.doms, d)
		}
	}
}

func containsDomain(ds []*domain, d *domain) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// needsDown reports whether a domain c needs is down: then c must not ask
// Redis.
func needsDown(c *call) bool {
	for _, d := range c.doms {
		if d.Down.Load() {
			return true
		}
	}
	return false
}

// noteFailed counts a fail-mode decision of c against every down domain
// it needed, for the outage's next log line, and logs (throttled) a server
// out of memory.
func (e *Engine) noteFailed(c *call) {
	for _, d := range c.doms {
		d.NoteFailed()
	}
	if c.err != nil && len(c.doms) > 0 && outOfMemory(c.err) {
		e.doms.LogOOM(c.doms[0], c.err)
	}
}

// observe records how d answered: an answer (also an error reply) makes it
// up, no answer down.
func (e *Engine) observe(d *domain, answered bool, err error) {
	switch {
	case answered:
		if d.Down.Load() {
			e.doms.MarkUp(d)
		}
	case err != nil && !errors.Is(err, errNotAsked) && !errors.Is(err, errClock):
		// A timeout, a refused or broken connection: asking again would
		// cost each call up to a timeout (go-redis retries dials and
		// redirects until the context expires).
		e.doms.MarkDown(d, err)
	}
	if err != nil {
		// The slot map may be stale (a failover): let go-redis reload it,
		// at most every 200 ms, so the promoted replica is found as soon
		// as the cluster has one.
		if cc, ok := e.client.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background())
		}
	}
}

// anyDown reports whether a domain of the plan's keys is down.
func (e *Engine) anyDown(p *plan.Plan) bool {
	if e.group == groupAll {
		return e.doms.One.Down.Load()
	}
	for _, k := range p.Keys {
		if e.doms.Of(k).Down.Load() {
			return true
		}
	}
	return false
}

// decideLocal decides c at t (µs) with the local fallback l, which starts
// keys from what known holds (see fallback.Limiter.decide).
func decideLocal(l *fallback.Limiter, c *call, t int64, known *denials.Cache) {
	c.sec, c.usec = t/1e6, t%1e6
	c.status = l.Decide(&c.plan, c.res, c.bleft, c.mode == opAllow, c.id, t, known)
}

// outOfMemory reports whether err is Redis's OOM error reply.
func outOfMemory(err error) bool { return health.OutOfMemory(err) }
