package middleware

import (
	"fmt"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/internal/ruletime"
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

// loadZone returns the zone of g's calendar windows, UTC by default. A zone
// that cannot be loaded fails New.
func loadZone(g *rules.Group) (*time.Location, error) {
	loc, err := ruletime.LoadZone(g.Calendar)
	if err != nil {
		return nil, fmt.Errorf("middleware: calendar:%s: %w", g.Calendar, err)
	}
	return loc, nil
}

// distinctFunc returns the function giving a request's distinct value for
// g's distinct: statement: the URL path, or a key function of keys; nil
// when g counts requests. An unregistered name fails New.
func distinctFunc(g *rules.Group, keys map[string]keyFunc) (keyFunc, error) {
	switch g.Distinct {
	case "":
		return nil, nil
	case lifecycle.DistinctPath:
		return func(r *http.Request) string { return r.URL.Path }, nil
	}
	fn, ok := keys[g.Distinct]
	if !ok {
		return nil, &ConfigError{Kind: kindUnregistered, Option: "WithKeyFunc", Name: g.Distinct,
			Reason: "distinct:" + g.Distinct + ": no key function registered under that name (use WithKeyFunc, or distinct:path)"}
	}
	return fn, nil
}

// periodPhrase words the period of w in problem details: "1min", or for
// a calendar window "calendar month".
func periodPhrase(w rules.Window) string {
	if w.Calendar != "" {
		return "calendar " + string(w.Calendar)
	}
	return ruletime.FormatPeriod(w.Period)
}
