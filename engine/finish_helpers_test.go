package engine

import (
	"context"
	"strconv"
)

// giveBack is Finish(ctx, d, Outcome{GiveBack: true}) in the shape the
// tests were written in; req is unused.
func (e *Engine) giveBack(ctx context.Context, _ Request, d Decision) error {
	return e.finish(ctx, &d, &Outcome{GiveBack: true}, false)
}

// release is Finish(ctx, d, Outcome{}): it frees the slots of d; req is
// unused.
func (e *Engine) release(ctx context.Context, _ Request, d Decision) error {
	return e.finish(ctx, &d, &Outcome{}, false)
}

// settle is Finish(ctx, d, Outcome{Actual: actual}) that keeps the slots
// held, so that a test can settle a request and still see its slots.
func (e *Engine) settle(ctx context.Context, req Request, d Decision, actual []int64) error {
	if len(actual) != len(req.Checks) {
		return &requestError{Check: -1, Window: -1, Reason: "Settle needs one actual cost per check, got " +
			strconv.Itoa(len(actual)) + " for " + strconv.Itoa(len(req.Checks))}
	}
	if actual == nil {
		actual = []int64{} // a request without checks: nothing to settle, but not a release
	}
	return e.finish(ctx, &d, &Outcome{Actual: actual}, true)
}
