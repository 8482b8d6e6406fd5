package middleware

import (
	"fmt"

	"github.com/slidelimit/slidelimit/rules"
)

// policy is one advertised window: a window of one check.
type policy struct {
	name   string
	check  int
	window rules.Window
}

// plan is everything about one limiter list (a group's defaults or one
// override) that does not depend on the request, computed once by New so
// that serving a request only fills in subjects.
type plan struct {
	role     string
	limiters []rules.Limiter
	keys     []KeyFunc // keys[i] is the function of limiters[i] when it is a key(name)
	policies []policy  // in check order then window order, as Decision.Windows
	index    [][]int   // index[check][window] is the position in policies
	field    string    // the RateLimit-Policy value
}

// newPlan prepares ls; it fails when a limiter needs a key function that is
// not registered or has a kind this package does not know.
func newPlan(role string, ls []rules.Limiter, keys map[string]KeyFunc) (*plan, error) {
	p := &plan{role: role, limiters: ls, keys: make([]KeyFunc, len(ls)), index: make([][]int, len(ls))}
	for i, l := range ls {
		switch l.Kind {
		case rules.IP, rules.User, rules.Global, rules.Header, rules.Param:
		case rules.Key:
			fn, ok := keys[l.Name]
			if !ok {
				return nil, &UnknownKeyError{Name: l.Name, Role: role}
			}
			p.keys[i] = fn
		default:
			return nil, fmt.Errorf("middleware: limiter %q: unsupported kind %q", l.ID(), l.Kind)
		}
		p.index[i] = make([]int, len(l.Windows))
		for j, w := range l.Windows {
			p.index[i][j] = len(p.policies)
			p.policies = append(p.policies, policy{name: PolicyName(l, w), check: i, window: w})
		}
	}
	uniqueNames(p.policies)
	p.field = policyField(p.policies)
	return p, nil
}

// lookup returns the policy of window w of check c, or nil when the decision
// names a check or window the plan does not have.
func (p *plan) lookup(c int, w rules.Window) *policy {
	if c < 0 || c >= len(p.limiters) {
		return nil
	}
	for j, pw := range p.limiters[c].Windows {
		if pw == w {
			return &p.policies[p.index[c][j]]
		}
	}
	return nil
}
