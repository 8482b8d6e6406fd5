package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/fallback"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/logthrottle"
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

// A domain is one failure domain: the server a key lives on (the one
// server of a *redis.Client, a cluster master, a Ring shard). A server that
// did not answer (a timeout, a refused or broken connection) is considered
// down: while it is, every call that needs it decides by its fail mode at
// once, without touching the network, and one goroutine in the background
// asks it again (see health.go). Calls whose keys all live on other
// servers are not affected.
type domain struct {
	addr    string
	down    atomic.Bool
	probing atomic.Bool  // a probe goroutine runs for it
	failed  atomic.Int64 // fail-mode decisions that needed it since the last log line
	since   atomic.Int64 // when it went down, Unix ns

	warn   logthrottle.Throttle // of its outage lines
	oom    logthrottle.Throttle // of its out-of-memory lines
	warned atomic.Bool          // the current outage's line was written: log its end
}

// domains maps server addresses to their domains. one is the domain of
// every key when the engine cannot tell servers apart (a *redis.Client,
// an unknown Client, a cluster whose slot map cannot be read).
type domains struct {
	one *domain
	mu  sync.RWMutex
	m   map[string]*domain
}

func newDomain(addr string) *domain {
	if addr == "" {
		addr = "redis"
	}
	return &domain{addr: addr, warn: logthrottle.Throttle{Every: warnEvery}, oom: logthrottle.Throttle{Every: warnEvery}}
}

func (ds *domains) get(addr string) *domain {
	ds.mu.RLock()
	d := ds.m[addr]
	ds.mu.RUnlock()
	if d != nil {
		return d
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if d = ds.m[addr]; d == nil {
		d = newDomain(addr)
		ds.m[addr] = d
	}
	return d
}

// domainOf returns the domain of key: the master of its slot on a Redis
// Cluster, its shard on a Ring, the engine's one domain otherwise.
func (e *Engine) domainOf(key string) *domain {
	var node *redis.Client
	var err error
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		node, err = c.MasterForKey(context.Background(), key)
	case *redis.Ring:
		node, err = c.GetShardClientForKey(key)
	default:
		return e.doms.one
	}
	if err != nil {
		return e.doms.one
	}
	return e.doms.get(node.Options().Addr)
}

// route finds the domains c needs: one for a single server; otherwise c's
// keys are split into script calls (parts) and each part's domain found.
func (e *Engine) route(c *call) {
	c.doms = c.doms[:0]
	if e.group == groupAll {
		c.doms = append(c.doms, e.doms.one)
		return
	}
	c.split(e.group)
	c.pdom = c.pdom[:0]
	for i := range c.pends {
		d := e.domainOf(c.plan.Keys[c.part(i)[0]])
		c.pdom = append(c.pdom, d)
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
		if d.down.Load() {
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
		if d.down.Load() {
			d.failed.Add(1)
		}
	}
	if c.err != nil && len(c.doms) > 0 && outOfMemory(c.err) {
		e.logOOM(c.doms[0], c.err)
	}
}

// observe records how d answered: an answer (also an error reply) makes it
// up, no answer down.
func (e *Engine) observe(d *domain, answered bool, err error) {
	switch {
	case answered:
		if d.down.Load() {
			e.markUp(d)
		}
	case err != nil && !errors.Is(err, errNotAsked) && !errors.Is(err, errClock):
		// A timeout, a refused or broken connection: asking again would
		// cost each call up to a timeout (go-redis retries dials and
		// redirects until the context expires).
		e.markDown(d, err)
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
		return e.doms.one.down.Load()
	}
	for _, k := range p.Keys {
		if e.domainOf(k).down.Load() {
			return true
		}
	}
	return false
}

// decideLocal decides c at t (µs) with the local fallback l, which starts
// keys from what known holds (see localLimiter.decide).
func decideLocal(l *fallback.Limiter, c *call, t int64, known *denials.Cache) {
	c.sec, c.usec = t/1e6, t%1e6
	c.status = l.Decide(&c.plan, c.res, c.bleft, c.mode == opAllow, c.id, t, known)
}
