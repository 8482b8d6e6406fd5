package rules

import "github.com/slidelimit/slidelimit/internal/rulespec"

// init hands internal/rulesx, through rulespec's hooks, what the sibling
// packages need of the parser's offsets without exporting it to users.
func init() {
	rulespec.CheckRoles = func(g any, declared []string) error {
		grp, _ := g.(Group)
		return grp.checkRoles(declared)
	}
	rulespec.Relocate = func(err error, text string) error {
		e, ok := err.(*Error)
		if !ok || e == nil {
			return err
		}
		return e.relocate(text)
	}
	rulespec.ParseDialect = func(s string, limiter func(any) error, countItem func(string) (string, error)) (any, error) {
		d := dialect{countItem: countItem}
		if limiter != nil {
			d.limiter = func(l Limiter) error { return limiter(l) }
		}
		return d.parse(s)
	}
}
