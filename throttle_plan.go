package slidelimit

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// throttlePlan is a throttle's rule group made ready to build a call's
// engine request. It is an http.Handler only so that an overrides.Switch
// can hold it; it serves nothing.
type throttlePlan struct {
	g      rules.Group
	scope  string
	zone   *time.Location
	limits map[string]func(*http.Request) (int64, error)
	slots  bool // some limiter has an in-flight window
}

// ServeHTTP answers 500: a throttle's plan is not a handler.
func (p *throttlePlan) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "slidelimit: a throttle serves no requests", http.StatusInternalServerError)
}

// compile checks g for a throttle and prepares it.
func (t *Throttle) compile(g rules.Group) (*throttlePlan, error) {
	fail := func(stmt string) error {
		return fmt.Errorf("%w: throttle %q: %s (a throttle counts calls out, which have no roles, client or request)",
			errThrottleRules, t.name, stmt)
	}
	switch {
	case len(g.Overrides) > 0:
		return nil, fail("role(" + g.Overrides[0].Role + ") override")
	case len(g.Exempt) > 0:
		return nil, fail("exempt:" + strings.Join(g.Exempt, ","))
	case len(g.Count) > 0:
		return nil, fail("count:" + strings.Join(g.Count, ","))
	case g.Distinct != "":
		return nil, fail("distinct:" + g.Distinct)
	case g.Mode == rules.Shadow:
		return nil, fail("mode:shadow")
	case len(g.Limiters) == 0:
		return nil, fmt.Errorf("slidelimit: throttle %q: no limiter", t.name)
	}
	limits := middlewareParts(t.lim.opts).Limits
	p := &throttlePlan{g: g, scope: t.name, limits: limits}
	for _, l := range g.Limiters {
		if l.Kind != rules.Global && l.Kind != rules.Key {
			return nil, fail("limiter " + l.ID() + " (only global and key(NAME) limiters)")
		}
		for _, w := range l.Windows {
			p.slots = p.slots || w.Concurrent
			if w.LimitFunc != "" && limits[w.LimitFunc] == nil {
				return nil, &middleware.ConfigError{Kind: "unregistered", Option: "WithLimitFunc", Name: w.LimitFunc,
					Reason: "unknown limit function " + strconv.Quote(w.LimitFunc) + " in window " + w.String() + " of limiter " + l.ID() + " (use WithLimitFunc)"}
			}
		}
	}
	var err error
	if p.zone, err = ruletime.LoadZone(g.Calendar); err != nil {
		return nil, fmt.Errorf("slidelimit: throttle %q: %w", t.name, err)
	}
	return p, nil
}

// request builds the engine request of c, with the cost name of each
// check. r is the outgoing request of a Transport, given to limit
// functions; nil for Wait and Allow, whose limit functions get a request
// carrying only ctx.
func (p *throttlePlan) request(ctx context.Context, r *http.Request, c Call) (engine.Request, []string, error) {
	fail := p.g.Fail
	if fail == rules.FailDefault {
		// Calls out wait when Redis fails: failing open would send the
		// whole fleet's calls into the upstream's limits at once.
		fail = rules.FailClosed
	}
	req := engine.Request{Scope: p.scope, Fail: fail, Zone: p.zone, Checks: make([]engine.Check, len(p.g.Limiters))}
	names := make([]string, len(p.g.Limiters))
	vals := map[string]int64{}
	for i, l := range p.g.Limiters {
		ch := &req.Checks[i]
		ch.Limiter, ch.Block = l, p.g.Block
		var v string
		if l.Kind == rules.Key {
			if v = c.Keys[l.Name]; v == "" {
				return req, nil, configError(p.scope, "", "", fmt.Errorf("%w: no value for limiter %s in Call.Keys[%q]", errCall, l.ID(), l.Name))
			}
		}
		ch.Subject = lifecycle.SubjectOf(l.Kind, v)
		switch {
		case l.Cost == "":
		case lifecycle.IsDecimal(l.Cost):
			n, err := strconv.ParseInt(l.Cost, 10, 64)
			if err != nil || n < 1 {
				return req, nil, configError(p.scope, "", "", fmt.Errorf("%w: limiter %s: invalid constant cost %q", errCall, l.ID(), l.Cost))
			}
			ch.Cost = n
		default:
			n, ok := c.Costs[l.Cost]
			if !ok || n < 1 {
				return req, nil, configError(p.scope, "", "", fmt.Errorf("%w: no estimate of at least 1 for limiter %s in Call.Costs[%q]", errCall, l.ID(), l.Cost))
			}
			ch.Cost, names[i] = n, l.Cost
		}
		if !lifecycle.Dynamic(l) {
			continue
		}
		ws := make([]rules.Window, len(l.Windows))
		for j, w := range l.Windows {
			ws[j] = w
			if w.LimitFunc == "" {
				continue
			}
			n, ok := vals[w.LimitFunc]
			if !ok {
				if r == nil {
					r = (&http.Request{Method: http.MethodGet, URL: &url.URL{}, Header: http.Header{}}).WithContext(ctx)
				}
				var err error
				if n, err = p.limits[w.LimitFunc](r); err != nil {
					return req, nil, &lifecycle.LimitError{Name: w.LimitFunc, Limiter: l.ID(), Window: w.String(), Err: err}
				}
				vals[w.LimitFunc] = n
			}
			rw, err := lifecycle.Resolve(l, w, n)
			if err != nil {
				return req, nil, &lifecycle.LimitError{Name: w.LimitFunc, Limiter: l.ID(), Window: w.String(), Limit: n, Err: err}
			}
			ws[j] = rw
		}
		ch.Limiter.Windows = ws
	}
	return req, names, neverFits(&req)
}
