package lifecycle

import (
	"fmt"
	"iter"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/rules"
)

// What the packages of this module need of rule groups beyond package
// rules' public API: a group's rule lists, which statuses count, limit
// functions and their values.

// Lists yields g's rule lists: the defaults, with role "", then each
// role's rules with its role, in declaration order.
func Lists(g *rules.Group) iter.Seq2[string, []rules.Rule] {
	return func(yield func(string, []rules.Rule) bool) {
		if !yield("", g.Rules) {
			return
		}
		for _, rr := range g.RoleRules {
			if !yield(rr.Role, rr.Rules) {
				return
			}
		}
	}
}

// named reports whether rules of kind k take a name in parentheses, as
// in header(X-API-Key).
func named(k rules.Kind) bool { return k == rules.Header || k == rules.Param || k == rules.Key }

// DistinctPath is the Group.Distinct name of the request's URL path.
const DistinctPath = "path"

// Counts reports whether an admitted request whose response has the given
// status stays counted under a group's count: items (Group.Count): always
// when there are none, otherwise when the status is listed by code or by
// class. A status outside 100..599 matches no item.
func Counts(items []string, status int) bool {
	if len(items) == 0 {
		return true
	}
	if status < 100 || status > 599 {
		return false
	}
	code := [3]byte{byte('0' + status/100), byte('0' + status/10%10), byte('0' + status%10)}
	for _, c := range items {
		if len(c) == 3 && c[0] == code[0] && (c[1] == 'x' || c[1] == code[1] && c[2] == code[2]) {
			return true
		}
	}
	return false
}

// Dynamic reports whether some window of l has a limit function.
func Dynamic(l rules.Rule) bool {
	for _, w := range l.Windows {
		if w.LimitFunc != "" {
			return true
		}
	}
	return false
}

// LimitCap returns the largest limit window w of l may have (see
// rulelimits.LimitCap). Validation holds written limits to it, and Resolve
// the values of limit functions.
func LimitCap(l rules.Rule, w rules.Window) int64 {
	return rulelimits.LimitCap(l.Cost, w.Grain, w.Calendar)
}

// Resolve returns window w of l with limit n, the value its limit function
// returned for one request. It keeps LimitFunc, so the result still prints
// as $name, and fails when n is below 1 or above LimitCap(l, w): a limit
// function is held to the rules a written limit obeys.
func Resolve(l rules.Rule, w rules.Window, n int64) (rules.Window, error) {
	if n < 1 {
		return rules.Window{}, fmt.Errorf("rules: limit %d of window %s is below 1", n, w)
	}
	if c := LimitCap(l, w); n > c {
		return rules.Window{}, fmt.Errorf("rules: window %s of limiter %s: %s", w, l.ID(), rulelimits.LimitAbove(fmt.Sprint(n), c == rulelimits.MaxLimit))
	}
	w.Limit = n
	return w, nil
}
