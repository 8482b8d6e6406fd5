package lifecycle

import "github.com/slidelimit/slidelimit/rules"

// Relocate returns err, a *rules.Error pointing into the canonical form of
// a group (as role.Policy.Check's do), pointing into text, the group as
// the user wrote it: statements may be written in any order. Any other
// error, or one that text does not spell, is returned as is.
func Relocate(err error, text string) error {
	e, ok := err.(*rules.Error)
	if !ok || e == nil {
		return err
	}
	return e.Relocate(text)
}
