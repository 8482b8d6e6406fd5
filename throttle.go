package slidelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// A Throttle holds the calls a fleet of processes makes to another
// service (a paid API, a storage provider) under that service's limits:
// every process sharing the Redis and key prefix of its Limiter counts its
// calls in the same windows, and Wait blocks a call until every window has
// room for it. Create Throttles with Limiter.Throttle; a Throttle is safe
// for concurrent use. See docs/throttle.md.
type Throttle struct {
	lim   *Limiter
	name  string
	code  *throttlePlan     // the plan of the rules the code declared
	sw    *overrides.Switch // follows SetRules on the scope; nil with overrides off
	fleet *fleet            // the fleet-wide order of waiters

	maxHold time.Duration // the longest a Permit holds its slots unfinished (WithMaxHold)
	warn    permitWarnings

	mu    sync.Mutex
	lanes map[string]*lane

	byID  map[string]*lane // the lanes by id, for the fleet's messages
	reg   laneRegistry     // the idle and held lanes (throttle_lanes.go); mu guards it
	hooks []func(middleware.Event)

	blockCap atomic.Int64 // the largest WithMaxUpstreamBlock of t's Transports; 0 none

	stats throttleStats
}

// Call is one call through a Throttle: the subjects and estimated costs its
// limiters count.
type Call struct {
	// Keys gives the value of each key(NAME) limiter, by NAME, such as
	// the API key the call is made with. Every key(NAME) limiter of the
	// throttle's rules needs a non-empty value.
	Keys map[string]string
	// Costs gives the estimated cost of each limiter with a named cost
	// ([tokens]), by name, such as the tokens a completion may use at
	// most. Every named cost of the rules needs a value of at least 1;
	// Permit.Finish settles it to what the call really cost.
	Costs map[string]int64
}

// A Permit is a call a Throttle admitted. Finish it when the call has
// ended, so that its costs are settled and its in-flight slots released.
// A Permit that becomes unreachable without Finish is finished, keeping
// its estimates, and logged; a Permit kept unfinished releases its
// in-flight slots after the Limiter's maximum hold (WithMaxHold), and its
// Finish then still settles its costs.
type Permit struct {
	_ noCopy // a copy would outlive the Permit its cleanup watches
	*permit
	cleanup runtime.Cleanup // finishes the permit once the Permit is unreachable
}

// errThrottleRules is the cause of a throttle's rule that has no meaning
// for calls out.
var errThrottleRules = errors.New("slidelimit: statement not allowed in a throttle")

// Throttle returns the throttle name enforcing rulesText over the calls
// out of every process sharing the Limiter's Redis and key prefix:
//
//	t, err := lim.Throttle("openai", "key(apikey):500/min; key(apikey)[tokens]:90000/min")
//
// name is the scope of its windows, for SetRules too, which refuses
// key(NAME) limiters and named costs that rulesText does not have. Statements that have
// no meaning for calls out (roles, ip, user, header and param limiters,
// count:, distinct:, mode:shadow) are a *ConfigError; docs/throttle.md
// lists what a throttle accepts.
func (l *Limiter) Throttle(name, rulesText string) (*Throttle, error) {
	if !validScopeName(name) {
		return nil, configError(name, "", "", errors.New("the throttle name must be a valid scope: name"))
	}
	g, err := overrides.Group(name, rulesText)
	if err != nil {
		return nil, configError(name, "", rulesText, err)
	}
	t := &Throttle{lim: l, name: name, lanes: map[string]*lane{}, byID: map[string]*lane{}, hooks: l.hooks(),
		maxHold: l.maxHold}
	t.warn.dropped.Every, t.warn.held.Every = permitWarnEvery, permitWarnEvery
	if t.code, err = t.compile(g); err != nil {
		return nil, configError(name, "", rulesText, err)
	}
	t.fleet = newFleet(t)
	if l.ov != nil {
		t.sw = overrides.NewSwitch(name, t.code, func(g rules.Group) (http.Handler, error) {
			if err := t.declared(g); err != nil {
				return nil, err
			}
			p, err := t.compile(g)
			if err != nil {
				return nil, err
			}
			return p, nil
		})
		l.ov.Add(t.sw)
	}
	// Known to Peek, Reset and the operator page like a route's scope.
	l.remember(name, g, nil)
	l.addThrottle(t)
	return t, nil
}

// declared refuses an override g with a key(NAME) limiter or a named
// cost that the code's rules do not have: the callers give values and
// estimates only for the code's, so every call would fail.
func (t *Throttle) declared(g rules.Group) error {
	keys, costs := map[string]bool{}, map[string]bool{}
	for _, l := range t.code.g.Limiters {
		if l.Kind == rules.Key {
			keys[l.Name] = true
		}
		costs[l.Cost] = true
	}
	for _, l := range g.Limiters {
		switch {
		case l.Kind == rules.Key && !keys[l.Name]:
			return fmt.Errorf("%w: throttle %q: limiter %s: the throttle's callers give no value for key %q (its code declares %s)",
				errThrottleRules, t.name, l.ID(), l.Name, t.code.g.String())
		case l.Cost != "" && !lifecycle.IsDecimal(l.Cost) && !costs[l.Cost]:
			return fmt.Errorf("%w: throttle %q: limiter %s: the throttle's callers give no estimate of cost %q (its code declares %s)",
				errThrottleRules, t.name, l.ID(), l.Cost, t.code.g.String())
		}
	}
	return nil
}

// Name returns the throttle's name, the scope of its windows.
func (t *Throttle) Name() string { return t.name }

// plan returns the plan in force: the code's, or an override's.
func (t *Throttle) plan() *throttlePlan {
	if t.sw != nil {
		if p, ok := t.sw.Current().(*throttlePlan); ok {
			return p
		}
	}
	return t.code
}

// Allow admits c at once if every window has room for it, without
// waiting and without passing callers that wait for the same subjects.
// It returns a nil Permit and false when c must wait; errors are those of
// Wait.
func (t *Throttle) Allow(ctx context.Context, c Call) (*Permit, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	p := t.plan()
	req, names, err := p.request(ctx, nil, c)
	if err != nil {
		return nil, false, err
	}
	ln, err := t.lane(ctx, laneKey(&req))
	if err != nil {
		return nil, false, err
	}
	ln.note(&req)
	if ln.busy() {
		t.release(ln)
		return nil, false, nil
	}
	d, err := t.decide(ctx, &req)
	if err != nil && !d.Allowed {
		t.release(ln)
		return nil, false, err
	}
	if !d.Allowed {
		ln.learn(d)
		t.release(ln)
		return nil, false, nil
	}
	return t.newPermit(&req, d, names, ln), true, nil
}

// Finish ends the call p admitted: the cost of each limiter named in
// actual (by cost name, as in Call.Costs) is settled to its value, the
// others keep their estimate, and in-flight slots are released. A value
// is capped at the smallest limit of the limiter's windows (no call can
// use more than a whole window allows); a negative value is ignored, the
// estimate kept. It does not block: the work rides the engine's next
// script call, or leaves within 1 ms (see Engine.FinishAsync). Finishing
// a Permit again, or a nil Permit, does nothing.
func (p *Permit) Finish(actual map[string]int64) {
	if p == nil || p.permit == nil {
		return
	}
	p.cleanup.Stop()
	p.finish(actual)
}

// maxCost is the most check i may be settled to: the smallest limit of
// its windows that count costs (in-flight windows count calls).
func (p *permit) maxCost(i int) int64 {
	m := int64(math.MaxInt64)
	for _, ws := range p.d.Windows {
		if ws.Check == i && !ws.Window.Concurrent && ws.Window.Limit > 0 {
			m = min(m, ws.Window.Limit)
		}
	}
	return m
}

// Decision returns the engine's decision that admitted the call.
func (p *Permit) Decision() engine.Decision {
	if p == nil || p.permit == nil {
		return engine.Decision{}
	}
	return p.d
}

// decide asks the engine to admit req and reports the decision to the
// hooks and statistics.
func (t *Throttle) decide(ctx context.Context, req *engine.Request) (engine.Decision, error) {
	start := time.Now()
	d, err := t.lim.engine.Allow(ctx, *req)
	t.fleet.clock(d.Time, start)
	t.stats.calls.Add(1)
	t.emit(req, d, err, time.Since(start))
	return d, err
}

// neverFits reports a check whose cost is above the limit of one of its
// windows.
func neverFits(req *engine.Request) error {
	if err := tooBig(req); err != nil {
		return configError(req.Scope, "", "", err)
	}
	return nil
}

// tooBig is neverFits's cause.
func tooBig(req *engine.Request) error {
	for _, c := range req.Checks {
		cost := max(c.Cost, 1)
		for _, w := range c.Windows {
			if !w.Concurrent && cost > w.Limit {
				return fmt.Errorf("%w: cost %s of limiter %s is above the limit of its window %s",
					errNeverFits, strconv.FormatInt(cost, 10), c.Limiter.ID(), w.String())
			}
		}
	}
	return nil
}
