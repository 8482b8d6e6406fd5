package engine

import (
	"context"
	"strconv"
)

// Settle changes what the request that d admitted counts in the windows of
// its cost limiters (Limiter.Cost) to what it really consumed, once its
// handler has run: actual[i] is the actual cost of req.Checks[i], or -1 to
// keep what the check was charged. req must be the Request of the Allow call
// that returned d, and actual must have one element per check.
//
// The request was admitted against its estimate (Check.Cost), so no window
// held more than its limit at admission. Settling to less gives the
// difference back, exactly: the window then holds the actual cost, never
// less than zero and never a credit. Settling to more charges the excess at
// the request's own admission time, as a debt: later requests wait longer,
// and a window may exceed its limit by at most that excess. Callers that
// want to cap the debt, or refuse it, pass min(actual, estimate+cap); the
// middleware does (see its WithSettle). Retry-After stays never early:
// every later decision reads the settled entries.
//
// Only limiters with a cost settle: a check of a limiter without one (it
// counts requests) must have actual -1 or its cost, else Settle returns a
// *RequestError and changes nothing; so must checks sharing a key with
// different actual costs.
//
// A request is settled at most once: its entry is renamed, so that a second
// Settle, or a GiveBack after Settle, finds nothing (settle to 0 to give a
// request back in full). A request already given back is not settled. A
// Decision that counted nothing (a denial, a Peek, a fail-open or
// fail-closed decision) has nothing to settle, and Settle returns nil. A
// decision of the fallback limiter (FromLocal) is settled there.
//
// With grains, a request whose entry was merged into the next one (see
// the package documentation) is settled in that entry, which carries its
// cost: the first entry scored at or after d.Time in the same grain (the
// key's coarsest). Such an entry stands for other requests too, so it is
// not marked settled: settle a request once. On a cluster whose node
// clocks differ, d.Time (the latest of the nodes' times) may pick a later
// entry of the same grain, so the change takes effect up to one grain late.
// When no such entry is found a refund is not made and a debt is charged
// to the key's newest entry; both err on the side of denying. A key with
// more than 64 entries after the request's is not rewritten: a refund is
// not made and a debt is charged to its newest entry (see Weighted changes
// in lua/multi_window.lua).
//
// When Redis fails, or is considered down, the settlement is queued like
// the undo of a failed call (best effort, retried before later script
// calls) and the error matches ErrBackend; Settle waits for at most one
// timeout. After Close it returns ErrClosed. It is safe for concurrent use.
//
// Settle is Finish(ctx, d, Outcome{Actual: actual}), at the same cost,
// except that it leaves the request's slots held: the request may still
// run. req is only used to check the length of actual.
func (e *Engine) Settle(ctx context.Context, req Request, d Decision, actual []int64) error {
	if len(actual) != len(req.Checks) {
		return &RequestError{Check: -1, Window: -1, Reason: "Settle needs one actual cost per check, got " +
			strconv.Itoa(len(actual)) + " for " + strconv.Itoa(len(req.Checks))}
	}
	if actual == nil {
		actual = []int64{} // a request without checks: nothing to settle, but not a release
	}
	return e.finish(ctx, &d, &Outcome{Actual: actual}, true)
}
