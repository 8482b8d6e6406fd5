package engine

import "github.com/slidelimit/slidelimit/rules"

// One returns a Request with a single check: subject, counted by a limiter
// of kind with the given windows, in scope. It is the one-line form of
// "may user 42 reply? at most 5 per minute":
//
//	d, err := eng.Allow(ctx, engine.One("reply", rules.User, "42", rules.Window{Limit: 5, Period: time.Minute}))
//
// For a named kind (header, param, key) or several checks, build the
// Request directly.
func One(scope string, kind rules.Kind, subject string, windows ...rules.Window) Request {
	return Request{
		Scope: scope,
		Checks: []Check{{
			Limiter: rules.Limiter{Kind: kind, Windows: windows},
			Subject: subject,
		}},
	}
}
