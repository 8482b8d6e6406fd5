package middleware

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// Quota units of the advertised windows (draft-ietf-httpapi-ratelimit-
// headers-11, Section 3.1.2).
const (
	// unitRequests is the draft's default unit: windows of limiters without
	// a cost, and of limiters with a constant cost, advertised in requests
	// (the limit and remaining divided by the cost).
	unitRequests = iota
	// unitBytes is "content-bytes", the unit of a cost function named
	// bytes.
	unitBytes
	// unitConcurrent is "concurrent-requests", the unit of in-flight
	// windows (N concurrent): requests running at once.
	unitConcurrent
	// unitNone marks windows of other cost functions: their unit is not in
	// the draft's registry, and an item without qu would claim requests, so
	// they are not advertised.
	unitNone
)

// policy is one advertised window: a window of one check.
type policy struct {
	name   string
	check  int
	window rules.Window
	unit   int   // unitRequests, unitBytes or unitNone
	per    int64 // a constant cost: quota values are divided by it; else 1
}

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
	role     string
	limiters []rules.Limiter
	keys     []KeyFunc     // keys[i] is the function of limiters[i] when it is a key(name)
	costs    []cost        // costs[i] is the cost of limiters[i]
	priced   bool          // some limiter has a cost function
	policies []policy      // in check order then window order, as Decision.Windows
	index    [][]int       // index[check][window] is the position in policies
	field    string        // the RateLimit-Policy value; per request for a plan with limits
	limits   *limitPlan    // the windows with limit functions; nil when there are none
	settle   []*Settlement // settle[i] is how limiters[i] settles (WithSettle), nil if not; nil when none does
	settled  bool          // some limiter settles
	slots    bool          // some limiter has an in-flight window: admitted requests are released
	calendar bool          // some limiter has a calendar window (see calendarItems)
}

// newPlan prepares ls; it fails when a limiter needs a key or cost function
// that is not registered or has a kind this package does not know.
func newPlan(role string, ls []rules.Limiter, keys map[string]KeyFunc, costs map[string]CostFunc, limits map[string]LimitFunc) (*plan, error) {
	p := &plan{role: role, limiters: ls, keys: make([]KeyFunc, len(ls)), costs: make([]cost, len(ls)), index: make([][]int, len(ls))}
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
		unit, per := unitRequests, int64(1)
		switch {
		case l.Cost == "":
			p.costs[i] = cost{n: 1}
		case isDecimal(l.Cost):
			n, err := strconv.ParseInt(l.Cost, 10, 64)
			if err != nil || n < 1 {
				errs = append(errs, fmt.Errorf("middleware: limiter %q: invalid constant cost %q", l.ID(), l.Cost))
				n = 1
			}
			p.costs[i], per = cost{n: n}, n
		default:
			fn, ok := costs[l.Cost]
			if !ok {
				errs = append(errs, &UnknownCostError{Name: l.Cost, Limiter: l.ID(), Role: role})
			}
			p.costs[i], p.priced = cost{name: l.Cost, fn: fn}, true
			unit = unitNone
			if l.Cost == "bytes" {
				unit = unitBytes
			}
		}
		p.index[i] = make([]int, len(l.Windows))
		for j, w := range l.Windows {
			p.index[i][j] = len(p.policies)
			u := unit
			if w.Concurrent {
				u, p.slots = unitConcurrent, true
			}
			p.calendar = p.calendar || w.Calendar != ""
			p.policies = append(p.policies, policy{name: PolicyName(l, w), check: i, window: w, unit: u, per: per})
		}
	}
	var err error
	if p.limits, err = newLimitPlan(role, ls, limits); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	uniqueNames(p.policies)
	p.field = policyField(p.policies)
	return p, nil
}

func isDecimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// lookup returns the policy of window w of check c, or nil when the decision
// names a check or window the plan does not have.
// oversized returns the policy of a window whose limit is below the cost
// of its check, and the window with its limit for this request, or nil:
// such a request can never be admitted.
func (p *plan) oversized(cs []engine.Check) (*policy, rules.Window) {
	for i := range cs {
		if cs[i].Cost <= 1 {
			continue
		}
		for _, w := range cs[i].Windows {
			if cs[i].Cost > w.Limit {
				return p.lookup(i, w), w
			}
		}
	}
	return nil, rules.Window{}
}

func (p *plan) lookup(c int, w rules.Window) *policy {
	if c < 0 || c >= len(p.limiters) {
		return nil
	}
	for j, pw := range p.limiters[c].Windows {
		// A window with a limit function comes back with the limit of
		// the request.
		if pw == w || pw.LimitFunc != "" && pw.LimitFunc == w.LimitFunc && pw.Period == w.Period && pw.Grain == w.Grain && pw.Calendar == w.Calendar {
			return &p.policies[p.index[c][j]]
		}
	}
	return nil
}
