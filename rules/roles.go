package rules

import (
	"slices"
	"strconv"
	"strings"
)

// CheckRoles returns an *Error when g names a role outside declared in an
// exempt: or role(...)= statement; an empty declared checks nothing. The
// error names the first such role, lists the declared ones, and points
// into g.String() (Error.Relocate points it into the text as written).
func (g Group) CheckRoles(declared []string) error {
	if len(declared) == 0 {
		return nil
	}
	var bad string
	ns := ""
	for i, rr := range g.RoleRules {
		if !slices.Contains(declared, rr.Role) {
			bad, ns = rr.Role, "RoleRules["+strconv.Itoa(i)+"].Role"
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
	// The printer writes role rules before exempt:, so the first role(...)=
	// found is also the first in the text.
	p := printer{pos: map[string]int{}}
	p.group(g)
	list := slices.Clone(declared)
	slices.Sort(list)
	e := invalidErr(p.b.String(), p.pos[ns], "role %q is not declared (declared roles: %s)", bad, strings.Join(list, ", "))
	e.ns, e.token = ns, bad
	return e
}
