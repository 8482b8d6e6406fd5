package lifecycle

import (
	"github.com/slidelimit/slidelimit/internal/rulehooks"
	"github.com/slidelimit/slidelimit/rules"
)

// Dialect adapts the rule language to a transport other than net/http,
// such as gRPC (contrib/grpclimit), whose requests lack some of HTTP's
// parts and whose outcomes are not HTTP statuses. The zero Dialect reads
// the language exactly as rules.Parse does. A Dialect is safe for
// concurrent use when its functions are.
type Dialect struct {
	// Limiter, when not nil, is called for every limiter of the group, the
	// defaults' and every override's, in text order; a non-nil error
	// rejects the group with a *rules.Error at the limiter's offset whose
	// reason is the error's text. A transport uses it to refuse what it
	// cannot serve, such as param(name) where there is no path.
	Limiter func(l rules.Limiter) error
	// CountItem, when not nil, reads the items of a count: statement in
	// place of HTTP statuses: it returns the canonical spelling of an item
	// (so that two spellings of one outcome are one item), or an error
	// saying why the text is not an item, reported as a *rules.Error at
	// the item's offset. Group.Count then holds canonical items, which
	// Counts and Group.Validate, knowing HTTP statuses only, do not apply
	// to: the transport interprets them. A canonical item listed twice is
	// an error.
	CountItem func(item string) (string, error)
}

// Parse parses s as rules.Parse does, with the changes d makes. Errors are
// of type *rules.Error.
func (d Dialect) Parse(s string) (rules.Group, error) {
	var limiter func(any) error
	if d.Limiter != nil {
		limiter = func(l any) error {
			lim, _ := l.(rules.Limiter)
			return d.Limiter(lim)
		}
	}
	g, err := rulehooks.ParseDialect(s, limiter, d.CountItem)
	grp, _ := g.(rules.Group)
	return grp, err
}

// Relocate returns err, a *rules.Error pointing into the canonical form of
// a group (as role.Policy.Check's do), pointing into text, the group as
// the user wrote it: statements may be written in any order. Any other
// error, or one that text does not spell, is returned as is.
func Relocate(err error, text string) error { return rulehooks.Relocate(err, text) }
