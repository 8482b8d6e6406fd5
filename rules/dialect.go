package rules

import (
	"strconv"
)

// Dialect adapts the rule language to a transport other than net/http,
// such as gRPC (contrib/grpclimit). Its requests may lack some of HTTP's
// parts, and its outcomes may not be HTTP statuses. The zero Dialect
// reads the language exactly as Parse does. A Dialect is safe for
// concurrent use when its functions are.
type Dialect struct {
	// Rule, when not nil, is called for every rule of the group, in
	// text order. A non-nil error rejects the group with an *Error at the
	// rule's offset, whose reason is the error's text.
	Rule func(l Rule) error
	// CountItem, when not nil, reads the items of a count: statement in
	// place of HTTP statuses. It returns an item's canonical spelling, or
	// why the text is not an item (an *Error at the item's offset). A
	// canonical item listed twice is an error.
	CountItem func(item string) (string, error)
}

// Parse parses s as the package's Parse does, with the changes d makes.
// Errors are of type *Error.
func (d Dialect) Parse(s string) (Group, error) {
	if d.Rule == nil && d.CountItem == nil {
		return Parse(s)
	}
	p := parser{s: s, pos: map[string]int{"": 0}}
	if err := p.group(); err != nil {
		return Group{}, err
	}
	items := p.g.Count
	if d.CountItem != nil {
		p.g.Count = nil // checked below, by d rather than as HTTP statuses
	}
	if err := check(p.g, s, p.pos); err != nil {
		return Group{}, err
	}
	if d.Rule != nil {
		if err := d.rules(&p); err != nil {
			return Group{}, err
		}
	}
	if d.CountItem != nil && len(items) > 0 {
		canon := make([]string, len(items))
		for i, it := range items {
			at := p.pos["Count["+strconv.Itoa(i)+"]"]
			c, err := d.CountItem(it)
			if err != nil {
				return Group{}, invalidErr(s, at, "%v", err)
			}
			for j := range i {
				if canon[j] == c {
					return Group{}, invalidErr(s, at, "duplicate %s in count (listed as %s before)", it, items[j])
				}
			}
			canon[i] = c
		}
		p.g.Count = canon
	}
	return p.g, nil
}

// rules calls d.Rule on every rule of the group p parsed,
// reporting the first error at its rule's offset.
func (d Dialect) rules(p *parser) *Error {
	check := func(ns string, l Rule) *Error {
		if err := d.Rule(l); err != nil {
			return invalidErr(p.s, p.pos[ns], "%v", err)
		}
		return nil
	}
	// Text order: a group's statements may interleave defaults and
	// role rules, so pick the earliest offender across both.
	var first *Error
	keep := func(e *Error) {
		if e != nil && (first == nil || e.Offset < first.Offset) {
			first = e
		}
	}
	for i, l := range p.g.Rules {
		keep(check("Rules["+strconv.Itoa(i)+"]", l))
	}
	for i, rr := range p.g.RoleRules {
		for j, l := range rr.Rules {
			keep(check("RoleRules["+strconv.Itoa(i)+"].Rules["+strconv.Itoa(j)+"]", l))
		}
	}
	return first
}
