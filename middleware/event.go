package middleware

import (
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/lifecycle"
	"github.com/slidelimit/slidelimit/rules"
)

// Event describes what the middleware did with one request. Hooks added with
// WithHook receive one Event per request, for example to count decisions by
// scope, policy and outcome in Prometheus or to annotate an OpenTelemetry
// span taken from Request's context. Its fields are documented with its
// definition, which is shared with contrib/grpclimit's hooks: Request,
// the request decided on (nil for a gRPC call); Scope; Role; Exempt;
// Rule, Policy and Window, the deciding window; Allowed, the engine's
// verdict; Shadow; Status, the status answered with (429, 503, or 500
// when no scope was found or for an engine.ErrInvalid error; 0 when passed on);
// RetryAfter; Source; Err, the decision's or cost function's error; Decision,
// the engine's full decision; Latency, of the Decider's Allow call.
type Event = lifecycle.Event

// Denial describes a refused request to the handler of WithDeniedHandler.
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
	// Rule is the ID of the violated rule, such as "ip"; empty for a
	// 503.
	Rule string
	// Window is the violated window; zero for a 503.
	Window rules.Window
	// Cost is the cost of the violated rule as its text states it ("" for
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

// deniedHandler writes the response to a refused request
// (WithDeniedHandler).
type deniedHandler = func(w http.ResponseWriter, r *http.Request, d Denial)
