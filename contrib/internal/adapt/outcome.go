package adapt

import (
	"errors"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
)

// Outcomes of a decision, as the metrics packages label them.
const (
	Allowed      = "allowed"       // passed on by the engine's verdict
	Denied       = "denied"        // answered 429 or, fail-closed, 503
	ShadowDenied = "shadow_denied" // would have been denied; mode:shadow let it through
	Exempt       = "exempt"        // no rule applied; the engine was not asked
	Error        = "error"         // answered 500: no scope, or a request the engine rejected
)

// Outcome names what the middleware did with the request of ev.
func Outcome(ev middleware.Event) string {
	switch {
	case ev.Exempt:
		return Exempt
	case ev.Status == 500:
		return Error
	case ev.Allowed:
		return Allowed
	case ev.Shadow:
		return ShadowDenied
	}
	return Denied
}

// Source names the decision source of ev; exempt requests have none.
func Source(ev middleware.Event) string {
	if ev.Exempt {
		return "none"
	}
	return ev.Source
}

// BackendError reports whether ev carries a Redis error.
func BackendError(ev middleware.Event) bool { return errors.Is(ev.Err, engine.ErrBackend) }
