package throttle

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// Plan is a throttle's rule group made ready to build a call's engine
// request.
type Plan struct {
	g      rules.Group
	scope  string
	zone   *time.Location
	limits map[string]func(context.Context) (int64, error)
	wrap   func(error) error // Config.ConfigError
	slots  bool              // some rule has an in-flight window

	transit time.Duration    // the transit bound (Config.Transit)
	wins    [][]rules.Window // per rule, the windows counted: stretch's
	cals    []string         // the calendar units of the windows

	shares map[string]int // the classes' shares, percent (share statements)
	rest   int            // the part of the calls of other classes, percent
}

// Compile checks g for a throttle and prepares it.
func (t *Throttle) Compile(g rules.Group) (*Plan, error) {
	fail := func(stmt string) error {
		return fmt.Errorf("%w: throttle %q: %s (a throttle counts calls out, which have no roles, client or request)",
			ErrRules, t.name, stmt)
	}
	switch {
	case len(g.RoleRules) > 0:
		return nil, fail("role(" + g.RoleRules[0].Role + ")= rules")
	case len(g.Exempt) > 0:
		return nil, fail("exempt:" + strings.Join(g.Exempt, ","))
	case len(g.Count) > 0:
		return nil, fail("count:" + strings.Join(g.Count, ","))
	case g.Distinct != "":
		return nil, fail("distinct:" + g.Distinct)
	case g.Mode == rules.Shadow:
		return nil, fail("mode:shadow")
	case len(g.Rules) == 0:
		return nil, fmt.Errorf("slidelimit: throttle %q: no limiter", t.name)
	}
	limits := t.limits
	p := &Plan{g: g, scope: t.name, limits: limits, wrap: t.cfg.ConfigError, transit: max(t.cfg.Transit, 0),
		wins: make([][]rules.Window, len(g.Rules)), cals: calendars(g)}
	p.shares, p.rest = sharesOf(p)
	for i, l := range g.Rules {
		p.wins[i] = stretch(l.Windows, p.transit)
		if l.Kind != rules.Global && l.Kind != rules.Key {
			return nil, fail("limiter " + l.ID() + " (only global and key(NAME) limiters)")
		}
		for _, w := range l.Windows {
			p.slots = p.slots || w.Concurrent
			if w.LimitFunc != "" && limits[w.LimitFunc] == nil {
				return nil, &middleware.ConfigError{Kind: "unregistered", Option: "WithLimitFunc", Name: w.LimitFunc,
					Reason: "unknown limit function " + strconv.Quote(w.LimitFunc) + " in window " + w.String() + " of rule " + l.ID() + " (use WithLimitFunc)"}
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
// check. Limit functions get ctx.
func (p *Plan) request(ctx context.Context, c Call) (engine.Request, []string, error) {
	fail := p.g.Fail
	if fail == rules.FailDefault {
		// Calls out wait when Redis fails: failing open would send the
		// whole fleet's calls into the upstream's limits at once.
		fail = rules.FailClosed
	}
	// Regional: a throttle's turns stay in its region (docs/regions.md).
	req := engine.Request{Scope: p.scope, Fail: fail, Zone: p.zone, Checks: make([]engine.Check, len(p.g.Rules)), Regional: true}
	names := make([]string, len(p.g.Rules))
	vals := map[string]int64{}
	for i, l := range p.g.Rules {
		ch := &req.Checks[i]
		ch.Rule, ch.Block = l, p.g.Block
		ch.Rule.Windows = p.wins[i]
		var v string
		if l.Kind == rules.Key {
			if v = c.Keys[l.Name]; v == "" {
				return req, nil, p.wrap(fmt.Errorf("%w: no value for limiter %s in Call.Keys[%q]", ErrCall, l.ID(), l.Name))
			}
		}
		ch.Subject = lifecycle.SubjectOf(l.Kind, v)
		switch {
		case l.Cost == "":
		case lifecycle.IsDecimal(l.Cost):
			n, err := strconv.ParseInt(l.Cost, 10, 64)
			if err != nil || n < 1 {
				return req, nil, p.wrap(fmt.Errorf("%w: limiter %s: invalid constant cost %q", ErrCall, l.ID(), l.Cost))
			}
			ch.Cost = n
		default:
			n, ok := c.Costs[l.Cost]
			if !ok || n < 1 {
				return req, nil, p.wrap(fmt.Errorf("%w: no estimate of at least 1 for limiter %s in Call.Costs[%q]", ErrCall, l.ID(), l.Cost))
			}
			ch.Cost, names[i] = n, l.Cost
		}
		if !lifecycle.Dynamic(l) {
			continue
		}
		ws := make([]rules.Window, len(l.Windows))
		for j, w := range p.wins[i] {
			ws[j] = w
			if w.LimitFunc == "" {
				continue
			}
			n, ok := vals[w.LimitFunc]
			if !ok {
				var err error
				if n, err = p.limits[w.LimitFunc](ctx); err != nil {
					return req, nil, &lifecycle.LimitError{Name: w.LimitFunc, Rule: l.ID(), Window: l.Windows[j].String(), Err: err}
				}
				vals[w.LimitFunc] = n
			}
			rw, err := lifecycle.Resolve(l, w, n)
			if err != nil {
				return req, nil, &lifecycle.LimitError{Name: w.LimitFunc, Rule: l.ID(), Window: l.Windows[j].String(), Limit: n, Err: err}
			}
			ws[j] = rw
		}
		ch.Rule.Windows = ws
	}
	if err := tooBig(&req, p.transit); err != nil {
		return req, nil, p.wrap(err)
	}
	return req, names, nil
}
