package middleware

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// Calendar windows and distinct values (rules: LIMIT/calendar UNIT,
// calendar:ZONE, distinct:NAME) in the middleware.
//
// A calendar window is advertised as "ID-calendar-UNIT", as in
// "user[bytes]-calendar-month". Its w parameter in RateLimit-Policy is the
// longest its period can last in any zone, in seconds: 90000 for a day (25
// hours, a day when clocks go back), 608400 for a week and 2682000 for a
// month (31 days and an hour). A longer w understates the rate, so a client
// that paces itself by q/w is never refused. Its t parameter in RateLimit
// is the time to the end of the current period (Decision.Windows' Reset),
// rounded up, and a denial's Retry-After is that time rounded up: the window
// is empty at the boundary.

// calendarSeconds is the w parameter of each calendar period.
var calendarSeconds = map[rules.Calendar]int64{
	rules.CalendarDay:   int64(25 * time.Hour / time.Second),
	rules.CalendarWeek:  int64((7*24 + 1) * time.Hour / time.Second),
	rules.CalendarMonth: int64((31*24 + 1) * time.Hour / time.Second),
}

// calendarName is the policy name of calendar window w of l.
func calendarName(l rules.Limiter, w rules.Window) string {
	return l.ID() + "-calendar-" + string(w.Calendar)
}

// policySeconds is the w parameter of window w: its period, or for a
// calendar window the longest its period can last.
func policySeconds(w rules.Window) int64 {
	if w.Calendar != "" {
		return calendarSeconds[w.Calendar]
	}
	return windowSeconds(w.Period)
}

// loadZone returns the zone of g's calendar windows, UTC by default. A zone
// that cannot be loaded fails New.
func loadZone(g *rules.Group) (*time.Location, error) {
	loc, err := g.Zone()
	if err != nil {
		return nil, fmt.Errorf("middleware: calendar:%s: %w", g.Calendar, err)
	}
	return loc, nil
}

// distinctFunc returns the function giving a request's distinct value for
// g's distinct: statement: the URL path, or a key function of keys; nil
// when g counts requests. An unregistered name fails New.
func distinctFunc(g *rules.Group, keys map[string]KeyFunc) (KeyFunc, error) {
	switch g.Distinct {
	case "":
		return nil, nil
	case rules.DistinctPath:
		return func(r *http.Request) string { return r.URL.Path }, nil
	}
	fn, ok := keys[g.Distinct]
	if !ok {
		return nil, fmt.Errorf("middleware: distinct:%s: no key function registered under that name (use WithKeyFunc, or distinct:path): %w", g.Distinct, ErrUnknownKey)
	}
	return fn, nil
}

// countsDistinct reports whether limiter l counts the group's distinct
// values: a limiter without a cost with a window that is not in-flight.
func countsDistinct(l rules.Limiter) bool {
	if l.Cost != "" {
		return false
	}
	for _, w := range l.Windows {
		if !w.Concurrent {
			return true
		}
	}
	return false
}

// periodPhrase words the period of w in problem details: "1min", or for
// a calendar window "calendar month".
func periodPhrase(w rules.Window) string {
	if w.Calendar != "" {
		return "calendar " + string(w.Calendar)
	}
	return rules.FormatPeriod(w.Period)
}

// calendarItems appends to items every advertised calendar window of an
// admitted request's decision that items lacks: a calendar quota empties
// at its boundary, not gradually, so its t (the time to the boundary) says
// something no sliding window's does, and a client billed per month wants
// it in every response.
func (p *plan) calendarItems(d *engine.Decision, items []int) []int {
	if !p.calendar {
		return items
	}
	for i, ws := range d.Windows {
		if ws.Window.Calendar == "" || slices.Contains(items, i) {
			continue
		}
		if pol := p.lookup(ws.Check, ws.Window); pol != nil && pol.unit != unitNone {
			items = append(items, i)
		}
	}
	return items
}
