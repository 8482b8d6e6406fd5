package middleware

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// cost is how a limiter's requests are costed: a constant (1 for none) or a
// registered function.
type cost struct {
	n    int64    // the constant, when fn is nil
	name string   // the function's name
	fn   CostFunc // nil for a constant
}

// plan is everything about one limiter list (a group's defaults or one
// override) that does not depend on the request, computed once by New so
// that serving a request only fills in subjects and costs.
type plan struct {
	*lifecycle.Plan // the advertised policies, and what the lifecycle needs
	role            string
	keys            []KeyFunc  // keys[i] is the function of Limiters[i] when it is a key(name)
	costs           []cost     // costs[i] is the cost of Limiters[i]
	priced          bool       // some limiter has a cost function
	limits          *limitPlan // the windows with limit functions; nil when there are none
}

// newPlan prepares ls; it fails when a limiter needs a key or cost function
// that is not registered or has a kind this package does not know.
func newPlan(role string, ls []rules.Limiter, keys map[string]KeyFunc, costs map[string]CostFunc, limits map[string]LimitFunc) (*plan, error) {
	p := &plan{Plan: lifecycle.NewPlan(ls), role: role, keys: make([]KeyFunc, len(ls)), costs: make([]cost, len(ls))}
	var errs []error
	for i, l := range ls {
		switch l.Kind {
		case rules.IP, rules.User, rules.Global, rules.Header, rules.Param:
		case rules.Key:
			fn, ok := keys[l.Name]
			if !ok {
				errs = append(errs, &UnknownKeyError{Name: l.Name, Role: role})
			}
			p.keys[i] = fn
		default:
			errs = append(errs, fmt.Errorf("middleware: limiter %q: unsupported kind %q", l.ID(), l.Kind))
		}
		switch {
		case l.Cost == "":
			p.costs[i] = cost{n: 1}
		case isDecimal(l.Cost):
			n, err := strconv.ParseInt(l.Cost, 10, 64)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("middleware: limiter %q: invalid constant cost %q", l.ID(), l.Cost))
				n = 1
			}
			p.costs[i] = cost{n: n}
		default:
			fn, ok := costs[l.Cost]
			if !ok {
				errs = append(errs, &UnknownCostError{Name: l.Cost, Limiter: l.ID(), Role: role})
			}
			p.costs[i], p.priced = cost{name: l.Cost, fn: fn}, true
		}
	}
	var err error
	if p.limits, err = newLimitPlan(role, ls, limits); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

func isDecimal(s string) bool { return lifecycle.IsDecimal(s) }
