package middleware

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
type Event struct {
	// Request is the request decided on. Hooks must not modify it.
	Request *http.Request
	// Scope is the scope the windows were counted in; empty for exempt
	// requests, which are decided before a scope is needed.
	Scope string
	// Role is the role whose override chose the limiters, or empty when the
	// group's defaults applied.
	Role role.Role
	// Exempt reports that no limiter applied (an exempt role, or a group
	// without limiters for the caller) and the engine was not called.
	Exempt bool
	// Limiter is the ID of the limiter of the deciding window, such as
	// "ip" or "header(X-Api-Key)": the denying window for a denial, else
	// the most constrained one. Empty when the decision has no windows.
	Limiter string
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
	// Source says what made the decision.
	Source engine.Source
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

// Denial describes a refused request to a DeniedHandler.
type Denial struct {
	// Status is http.StatusTooManyRequests when a window is full, or
	// http.StatusServiceUnavailable when Redis failed and the fail mode is
	// closed.
	Status int
	// RetryAfter is the wait advertised in Retry-After: the engine's wait
	// rounded up to whole seconds, at least one second.
	RetryAfter time.Duration
	// Policy is the name of the violated policy, such as "ip-1s"; empty for
	// a 503.
	Policy string
	// Limiter is the ID of the violated limiter, such as "ip"; empty for a
	// 503.
	Limiter string
	// Window is the violated window; zero for a 503.
	Window rules.Window
	// Cost is the cost of the violated limiter as the rule states it ("" for
	// one per request, a constant such as "5", or a cost function name such
	// as "bytes"), which says the unit of Window.Limit; empty for a 503.
	Cost string
	// Never reports a request whose own cost is above the limit of Window:
	// no later moment would admit it, so RetryAfter is zero, the response
	// has no Retry-After field and the engine was not asked (Decision is
	// zero).
	Never bool
	// Scope is the scope the request was counted in.
	Scope string
	// Decision is the engine's decision.
	Decision engine.Decision
}

// DeniedHandler writes the response to a refused request. The RateLimit,
// RateLimit-Policy and Retry-After fields are already set on w's header.
// It must write the status line itself.
type DeniedHandler func(w http.ResponseWriter, r *http.Request, d Denial)
