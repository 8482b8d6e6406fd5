package lifecycle

import (
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

// Event describes what the middleware did with one request. Hooks added with
// WithHook receive one Event per request, for example to count decisions by
// scope, policy and outcome in Prometheus or to annotate an OpenTelemetry
// span taken from Request's context.
//
// It is middleware.Event, defined here because the Admission, which
// emits it, is written once for every transport.
type Event struct {
	// Request is the request decided on; nil for a transport other than
	// net/http (a gRPC call). Hooks must not modify it.
	Request *http.Request
	// Scope is the scope the windows were counted in; empty for exempt
	// requests, which are decided before a scope is needed.
	Scope string
	// Role is the role whose rules applied, or empty when the
	// group's defaults applied.
	Role role.Role
	// Exempt reports that no rule applied (an exempt role, or a group
	// without rules for the caller) and the engine was not called.
	Exempt bool
	// Rule is the ID of the rule of the deciding window, such as
	// "ip" or "header(X-Api-Key)": the denying window for a denial, else
	// the most constrained one. Empty when the decision has no windows.
	Rule string
	// Policy is the name of the deciding window as advertised in the
	// RateLimit fields, such as "ip-1s".
	Policy string
	// Window is the deciding window.
	Window rules.Window
	// Allowed is the engine's verdict. In shadow mode a request with
	// Allowed false was let through all the same.
	Allowed bool
	// Shadow reports that the group is in shadow mode and never denies.
	Shadow bool
	// Status is the status the middleware answered with — 429, 503, or 500
	// when no scope was found (ErrNoScope) or the engine could not evaluate
	// the request (an error matching engine.ErrInvalid) — or 0 when the
	// request was passed to the next handler.
	Status int
	// RetryAfter is the engine's wait before the request would be admitted,
	// zero when allowed. Retry-After carries it rounded up to seconds.
	RetryAfter time.Duration
	// Source says what made the decision, as engine.Decision.Source
	// names it: "redis", "fail-open", "fail-closed", "local" or "cache";
	// "" when nothing was decided (an exempt request).
	Source string
	// Err is the error returned with the decision (matching
	// engine.ErrBackend for Redis trouble), or ErrNoScope; nil when all
	// went well.
	Err error
	// Decision is the engine's full decision, zero for exempt requests and
	// ErrNoScope.
	Decision engine.Decision
	// Latency is how long the decision took (the Decider's Allow call);
	// zero when the engine was not called.
	Latency time.Duration
}
