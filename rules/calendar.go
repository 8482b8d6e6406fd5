package rules

import (
	"strconv"

	"github.com/go-playground/validator/v10"

	"github.com/slidelimit/slidelimit/internal/ruletime"
)

// calendarWord introduces a calendar period after a window's "/".
const calendarWord = "calendar"

// validCalendar reports whether c names a calendar period.
func validCalendar(c string) bool {
	return c == ruletime.Day || c == ruletime.Week || c == ruletime.Month
}

// hasCalendar reports whether some rule of g, default or per role, has a
// calendar window.
func (g *Group) hasCalendar() bool {
	for _, ls := range g.lists() {
		for _, l := range ls {
			for _, w := range l.Windows {
				if w.Calendar != "" {
					return true
				}
			}
		}
	}
	return false
}

// calendarSpan parses the rest of a calendar window after "/calendar",
// whose limit starts at start and whose word is at wordAt: a space, then a
// calendar unit. It records the window's offsets under ns.
func (p *parser) calendarSpan(ns string, start, wordAt int) (Window, *Error) {
	p.space()
	unitAt := p.i
	unit := p.run(isUnit)
	if unit == "" {
		return Window{}, syntaxErr(p.s, p.i, "expected day, week or month after %q, found %s", calendarWord, p.found())
	}
	c := unit
	if !validCalendar(c) {
		return Window{}, syntaxErr(p.s, unitAt, "unknown calendar unit %q; want day, week or month", unit)
	}
	p.windowAt(ns, start, wordAt)
	p.pos[join(ns, "Calendar")] = unitAt
	p.space()
	if p.peek() == '~' {
		return Window{}, invalidErr(p.s, p.i, "a calendar window takes no grain: it counts in one counter per period")
	}
	return Window{Calendar: c}, nil
}

// calendarStatement parses the zone of a calendar: statement.
func (p *parser) calendarStatement(start int) *Error {
	return p.nameStatement(start, calendarWord, "Calendar", "an IANA time zone name such as Asia/Shanghai", "", &p.seenCalendar, &p.g.Calendar)
}

// distinctStatement parses the name of a distinct: statement.
func (p *parser) distinctStatement(start int) *Error {
	return p.nameStatement(start, "distinct", "Distinct", `path or a key function name after "distinct:"`,
		"; a group counts distinct values of one thing", &p.seenDistinct, &p.g.Distinct)
}

// distinctLevel reports, in a group with a distinct: statement, every
// window of a rule counting requests (no cost) that cannot count
// distinct values: one with a grain (its entries merge) or a calendar
// period (a counter).
func distinctLevel(sl validator.StructLevel, g Group) {
	if g.Distinct == "" {
		return
	}
	check := func(ns string, ls []Rule) {
		for i, l := range ls {
			if l.Cost != "" {
				continue
			}
			distinctSize(sl, ns+"["+strconv.Itoa(i)+"]", l)
			for j, w := range l.Windows {
				if w.Grain != 0 || w.Calendar != "" {
					name := ns + "[" + strconv.Itoa(i) + "].Windows[" + strconv.Itoa(j) + "]"
					sl.ReportError(w.String(), name, name, tagDistinctWin, l.ID())
				}
			}
		}
	}
	check("Rules", g.Rules)
	for i, rr := range g.RoleRules {
		check("RoleRules["+strconv.Itoa(i)+"].Rules", rr.Rules)
	}
}
