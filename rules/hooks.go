package rules

import "github.com/slidelimit/slidelimit/internal/rulehooks"

// init hands internal/rulehooks what role.Policy.Check and
// internal/lifecycle (Dialect, Relocate) need of the parser's offsets,
// without exporting it to users.
func init() {
	rulehooks.CheckRoles = func(g any, declared []string) error {
		grp, _ := g.(Group)
		return grp.checkRoles(declared)
	}
	rulehooks.Relocate = func(err error, text string) error {
		e, ok := err.(*Error)
		if !ok || e == nil {
			return err
		}
		return e.relocate(text)
	}
	rulehooks.ParseDialect = func(s string, limiter func(any) error, countItem func(string) (string, error)) (any, error) {
		d := dialect{countItem: countItem}
		if limiter != nil {
			d.limiter = func(l Limiter) error { return limiter(l) }
		}
		return d.parse(s)
	}
}
