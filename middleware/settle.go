package middleware

import (
	"context"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// A Settlement converts to lifecycle.Settle as it is: its MaxDebt of -1
// must be the lifecycle's NoDebt.
var _ = [1]struct{}{}[-1-lifecycle.NoDebt]

// Settlement says how the rules whose cost is one cost function settle
// after the handler (see WithSettle). The zero Settlement settles only to
// a cost the handler reports with ReportCost, with no cap on the debt.
type Settlement struct {
	// Written settles a request that reported no cost to the bytes of
	// response body its handler wrote to the client: what Write and
	// ReadFrom of the middleware's ResponseWriter accepted, so a download
	// the client abandoned counts what was sent before the connection
	// broke, plus what the server's and the kernel's socket buffers took
	// and never delivered (megabytes, on loopback); a HEAD request or a
	// 304 counts 0. Wrappers outside the middleware (compression) are not
	// seen.
	Written bool
	// MaxDebt caps what a request may be charged beyond its estimate (the
	// cost function's result): 0 charges the whole excess, a positive
	// value at most that much, -1 none (a request that used more than its
	// estimate stays charged its estimate). A debt is charged at the
	// request's admission time: later requests wait longer, and a window
	// may exceed its limit by the debt.
	MaxDebt int64
}

// WithSettle makes the rules whose cost is the cost function name (as
// in user[bytes]:2Gi/d) settle once the handler has run: the request is
// admitted against its estimate, the cost function's result, as without
// WithSettle; afterwards it counts its actual cost instead, the one the
// handler reported with ReportCost or, with s.Written, the bytes written.
// A request whose actual cost is unknown (none reported, and not Written;
// a handler that panicked or hijacked the connection) keeps its estimate,
// erring on the side of denying. A request that a count: statement gives
// back is not settled. The Decider must be able to finish requests, as
// *engine.Engine can (New fails with a *ConfigError otherwise).
// Registering a name again replaces its Settlement. contrib/grpclimit
// takes it too.
func WithSettle(name string, s Settlement) Option {
	return func(c *config) {
		if reason := lifecycle.PutSettle(&c.settle, name, lifecycle.Settle(s)); reason != "" {
			c.fail("WithSettle", name, reason)
		}
	}
}

// ReportCost reports n, the actual cost of the request whose context is
// ctx for the cost function name, to the middleware, which settles the
// request's rules with that cost once the handler returns (see
// WithSettle): a handler calls it when it knows what the request consumed,
// such as the tokens of a completion. A later report replaces an earlier
// one. It returns false, and does nothing, when no settlement of name
// awaits the request (no rule of its group settles name, the request
// was not admitted, or ctx is not the request's) or n is negative. It is
// safe for concurrent use. It serves gRPC handlers under contrib/grpclimit
// too.
func ReportCost(ctx context.Context, name string, n int64) bool {
	return lifecycle.Report(ctx, name, n)
}
