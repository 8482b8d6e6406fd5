package engine

import (
	"context"
	"strconv"
)

// Settle changes what the request that d admitted counts in the windows of
// its cost limiters to what it really consumed: actual[i] is the cost of
// req.Checks[i], or -1 to keep its charge. Less gives the difference back;
// more is charged as a debt at the request's admission time. It is Finish
// with Outcome{Actual: actual} that keeps the slots held; see the package
// documentation, Settling in detail. It is safe for concurrent use.
func (e *Engine) Settle(ctx context.Context, req Request, d Decision, actual []int64) error {
	if len(actual) != len(req.Checks) {
		return &requestError{Check: -1, Window: -1, Reason: "Settle needs one actual cost per check, got " +
			strconv.Itoa(len(actual)) + " for " + strconv.Itoa(len(req.Checks))}
	}
	if actual == nil {
		actual = []int64{} // a request without checks: nothing to settle, but not a release
	}
	return e.finish(ctx, &d, &Outcome{Actual: actual}, true)
}
