package lifecycle

import (
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// Calendar windows (LIMIT/calendar UNIT) in the advertised fields.
//
// A calendar window is advertised as "ID-calendar-UNIT", as in
// "user[bytes]-calendar-month". Its w parameter in RateLimit-Policy is the
// longest its period can last in any zone, in seconds: 90000 for a day (25
// hours, a day when clocks go back), 608400 for a week and 2682000 for a
// month (31 days and an hour). A longer w understates the rate, so a client
// that paces itself by q/w is never refused. Its t parameter in RateLimit
// is the time to the end of the current period (the window's Reset),
// rounded up, and a denial's Retry-After is that time rounded up: the
// window is empty at the boundary.

// calendarSeconds is the w parameter of each calendar period.
var calendarSeconds = map[string]int64{
	ruletime.Day:   int64(25 * time.Hour / time.Second),
	ruletime.Week:  int64((7*24 + 1) * time.Hour / time.Second),
	ruletime.Month: int64((31*24 + 1) * time.Hour / time.Second),
}

// calendarName is the policy name of calendar window w of l.
func calendarName(l rules.Rule, w rules.Window) string {
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

// calendarItems appends to items every advertised calendar window of an
// admitted request's decision that items lacks: a calendar quota empties
// at its boundary, not gradually, so its t (the time to the boundary) says
// something no sliding window's does, and a client billed per month wants
// it in every response.
func (p *Plan) calendarItems(d *engine.Decision, items []int) []int {
	if !p.Calendar {
		return items
	}
	for i, ws := range d.Windows {
		if ws.Window.Calendar == "" || slices.Contains(items, i) {
			continue
		}
		if pol := p.Lookup(ws.Check, ws.Window); pol != nil && pol.Unit != UnitNone {
			items = append(items, i)
		}
	}
	return items
}
