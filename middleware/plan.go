package middleware

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// plan is what the middleware keeps per rule list (a group's defaults
// or one role's rules), in its lifecycle.Plan's Transport: the functions the
// list's rules name, found once by New so that serving a request only
// calls them.
type plan struct {
	keys   []keyFunc  // keys[i] is the function of Rules[i] when it is a key(name)
	costs  []costFunc // costs[i] is the function of Rules[i] when its cost names one
	limits *limitPlan // the windows with limit functions; nil when there are none
}

// planOf returns the middleware's part of p.
func planOf(p *lifecycle.Plan) *plan { return p.Transport.(*plan) }

// addPlan checks the rule list of p, of role ("" for the defaults), and
// attaches the functions it names (lifecycle.NewRules' plan function); it
// fails when a rule needs a key, cost or limit function that is not
// registered, has an invalid constant cost or a kind this package does
// not know.
func (l *limiter) addPlan(role string, lp *lifecycle.Plan) error {
	ls := lp.Rules
	p := &plan{keys: make([]keyFunc, len(ls)), costs: make([]costFunc, len(ls))}
	var errs []error
	for i, lim := range ls {
		switch lim.Kind {
		case rules.IP, rules.User, rules.Global, rules.Header, rules.Param:
		case rules.Key:
			fn, ok := l.keys[lim.Name]
			if !ok {
				errs = append(errs, unregistered("WithKeyFunc", lim.Name, "no key function registered for "+lim.ID(), role))
			}
			p.keys[i] = fn
		default:
			errs = append(errs, fmt.Errorf("middleware: rule %q: unsupported kind %q", lim.ID(), lim.Kind))
		}
		switch {
		case lim.Cost == "":
		case isDecimal(lim.Cost):
			if n, err := strconv.ParseInt(lim.Cost, 10, 64); err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("middleware: rule %q: invalid constant cost %q", lim.ID(), lim.Cost))
			}
		default:
			fn, ok := l.costs[lim.Cost]
			if !ok {
				errs = append(errs, unregistered("WithCostFunc", lim.Cost, "unknown cost function "+strconv.Quote(lim.Cost)+" in rule "+lim.ID(), role))
			}
			p.costs[i] = fn
		}
	}
	var err error
	if p.limits, err = newLimitPlan(role, ls, l.limits); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	lp.Transport = p
	return nil
}

func isDecimal(s string) bool { return lifecycle.IsDecimal(s) }
