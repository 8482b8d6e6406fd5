package rulesx

import (
	"github.com/slidelimit/slidelimit/internal/rulespec"
	"github.com/slidelimit/slidelimit/rules"
)

// CheckRoles reports whether g names only roles of declared in its exempt:
// and role(...)= statements. An empty declared checks nothing: without a
// declaration, a misspelt role is a role nobody holds. The *rules.Error,
// for the first undeclared role, points into g.String() (Relocate points
// it into the text as written), names the role and lists the declared
// ones.
func CheckRoles(g rules.Group, declared []string) error {
	return rulespec.CheckRoles(g, declared)
}

// Relocate returns err, a *rules.Error pointing into the canonical form of
// a group (as CheckRoles's do), pointing into text, the group as the user
// wrote it: statements may be written in any order. Any other error, or
// one that text does not spell, is returned as is.
func Relocate(err error, text string) error { return rulespec.Relocate(err, text) }
