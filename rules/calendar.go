package rules

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-playground/validator/v10"
)

// Calendar is the period of a calendar window (LIMIT/calendar UNIT): a day,
// an ISO 8601 week (from Monday) or a month, in the group's time zone
// (Group.Calendar). The zero Calendar makes a window a sliding one.
type Calendar string

// The calendar periods of the rule language.
const (
	// CalendarDay runs from local midnight to the next local midnight:
	// 23 or 25 hours on a day when the zone's clocks change.
	CalendarDay Calendar = "day"
	// CalendarWeek runs from Monday's local midnight to the next Monday's
	// (ISO 8601).
	CalendarWeek Calendar = "week"
	// CalendarMonth runs from the 1st's local midnight to the next month's.
	CalendarMonth Calendar = "month"
)

// calendarWord introduces a calendar period after a window's "/".
const calendarWord = "calendar"

// DistinctPath is the Distinct name of the request's URL path.
const DistinctPath = "path"

// valid reports whether c names a calendar period.
func (c Calendar) valid() bool {
	return c == CalendarDay || c == CalendarWeek || c == CalendarMonth
}

// Bounds returns the start and the end of the period of c that holds t, in
// loc (nil: UTC): local midnight of t's day, of the Monday of its week or
// of the 1st of its month, and the same of the next period. Both come from
// time.Date's normalisation of the wall clock, so a day on which loc's
// clocks change lasts 23 or 25 hours, and a February 28 or 29 days. A
// midnight that the zone skips (a change at 00:00) starts the period at
// the first instant after it. It returns zero times for the zero or an
// unknown Calendar.
func (c Calendar) Bounds(t time.Time, loc *time.Location) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	y, m, d := t.Date()
	switch c {
	case CalendarDay:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case CalendarWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case CalendarMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	return time.Time{}, time.Time{}
}

// zones caches the time zones LoadZone loaded, by name.
var zones sync.Map // string → *time.Location

// LoadZone returns the IANA time zone name of a calendar: statement: UTC
// for "" (the default, never the process's local zone), and an error
// naming the zone for a name time.LoadLocation does not know, or for
// "Local", which would depend on the process's environment. Loading the
// zone database is the application's concern: a system without one
// (some containers) needs the time/tzdata package imported, which embeds
// it (about 450 KB). Zones are cached; it is safe for concurrent use.
func LoadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := zones.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "Local" || strings.EqualFold(name, "local") {
		return nil, fmt.Errorf("rules: time zone %q is the process's local zone; name an IANA zone such as Europe/Paris", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("rules: unknown time zone %q (is the zone database installed? import time/tzdata to embed it): %v", name, err)
	}
	zones.Store(name, loc)
	return loc, nil
}

// Zone returns the time zone of g's calendar windows (Group.Calendar),
// UTC when none is named. It fails as LoadZone does.
func (g *Group) Zone() (*time.Location, error) { return LoadZone(g.Calendar) }

// hasCalendar reports whether some limiter of g, default or override, has a
// calendar window.
func (g *Group) hasCalendar() bool {
	for _, ls := range g.LimiterLists() {
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
	c := Calendar(unit)
	if !c.valid() {
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
// window of a limiter counting requests (no cost) that cannot count
// distinct values: one with a grain (its entries merge) or a calendar
// period (a counter).
func distinctLevel(sl validator.StructLevel, g Group) {
	if g.Distinct == "" {
		return
	}
	check := func(ns string, ls []Limiter) {
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
	check("Limiters", g.Limiters)
	for i, o := range g.Overrides {
		check("Overrides["+strconv.Itoa(i)+"].Limiters", o.Limiters)
	}
}
