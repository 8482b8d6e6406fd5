// Package ruletime is the time of the rule language, shared by package
// rules and the packages that apply its groups: how a period is written,
// the calendar units, a unit's bounds in a zone, and the zones a group
// may name. It imports nothing of this module.
package ruletime

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// The calendar units of a calendar window (Window.Calendar).
const (
	// Day runs from local midnight to the next local midnight: 23 or 25
	// hours on a day when the zone's clocks change.
	Day = "day"
	// Week runs from Monday's local midnight to the next Monday's (ISO
	// 8601).
	Week = "week"
	// Month runs from the 1st's local midnight to the next month's.
	Month = "month"
)

// Bounds returns the start and the end of the calendar period unit (Day,
// Week or Month) that holds t, in loc (nil: UTC). Both come from
// time.Date's normalisation of the wall clock, so a day on which loc's
// clocks change lasts 23 or 25 hours, and a February 28 or 29 days. A
// midnight that the zone skips starts the period at the first instant
// after it. It returns zero times for any other unit.
func Bounds(unit string, t time.Time, loc *time.Location) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	t = t.In(loc)
	y, m, d := t.Date()
	switch unit {
	case Day:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case Month:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	return time.Time{}, time.Time{}
}

// zones caches the time zones LoadZone loaded, by name.
var zones sync.Map // string → *time.Location

// LoadZone returns the IANA time zone name of a calendar: statement: UTC
// for "" (never the process's local zone), and an error naming the zone
// for a name time.LoadLocation does not know, or for "Local", which would
// depend on the process's environment. Zones are cached; it is safe for
// concurrent use.
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
