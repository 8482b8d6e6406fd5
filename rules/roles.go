package rules

import (
	"slices"
	"strconv"
	"strings"
)

// checkRoles reports whether g names only roles of declared in its exempt:
// and role(...)= statements (role.Policy.Check). An empty
// declared checks nothing. The returned *Error, for the first undeclared
// role in g.String(), points into g.String() (relocate points it into the
// text as written), names the role and lists the declared ones.
func (g Group) checkRoles(declared []string) error {
	if len(declared) == 0 {
		return nil
	}
	var bad string
	ns := ""
	for i, o := range g.Overrides {
		if !slices.Contains(declared, o.Role) {
			bad, ns = o.Role, "Overrides["+strconv.Itoa(i)+"].Role"
			break
		}
	}
	if bad == "" {
		for i, r := range g.Exempt {
			if !slices.Contains(declared, r) {
				bad, ns = r, "Exempt["+strconv.Itoa(i)+"]"
				break
			}
		}
	}
	if bad == "" {
		return nil
	}
	// The printer writes overrides before exempt:, so the first override
	// found is also the first in the text.
	p := printer{pos: map[string]int{}}
	p.group(g)
	list := slices.Clone(declared)
	slices.Sort(list)
	e := invalidErr(p.b.String(), p.pos[ns], "role %q is not declared (declared roles: %s)", bad, strings.Join(list, ", "))
	e.ns, e.token = ns, bad
	return e
}
