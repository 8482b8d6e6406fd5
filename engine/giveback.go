package engine

import (
	"context"
	"strconv"
	"time"
)

// GiveBack takes the request that d admitted out of every window it was
// counted in, as if it had never been made: a login that succeeded, where
// only failures should count. req must be the Request of the Allow call
// that returned d; its keys are computed again from it.
//
// Admitting then giving back keeps a limit exact where checking after the
// fact would not: while its outcome is unknown, the request holds its place
// in every window, so at most Limit requests whose outcome counts are ever
// in flight or recorded in a window.
//
// GiveBack is idempotent and never removes another request's entry: it
// removes the request's own member, a unique id. A Decision that counted
// nothing (a denial, a Peek, a fail-open or fail-closed decision, or an
// Allow without windows) has nothing to give back, and GiveBack returns
// nil. A decision of the local fallback limiter (FromLocal) is given back
// there. When Redis fails, or is considered down after a timeout, the
// removal is queued like the undo of a failed call (see the package
// documentation: best effort, retried before later script calls), and the
// returned error matches ErrBackend; GiveBack thus waits for at most one
// timeout.
// After Close, GiveBack returns ErrClosed. It is safe for concurrent use.
func (e *Engine) GiveBack(ctx context.Context, req Request, d Decision) error {
	r := &d.receipt
	if !d.Allowed || r.id == 0 {
		return nil
	}
	c := getCall()
	defer putCall(c)
	if err := c.plan.build(e.keyer, &req); err != nil {
		return err
	}
	if r.suffix < 0 && len(r.suffixes) != len(c.plan.keys) {
		return &RequestError{Check: -1, Window: -1, Reason: "request does not match the decision given back"}
	}
	if d.Source == FromLocal {
		e.local.giveBack(&c.plan, r.id)
		return nil
	}
	if e.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	member := strconv.FormatInt(r.id, 10)
	now := time.Now().UnixMicro()
	us := make([]undo, len(c.plan.keys))
	for i := range c.plan.keys {
		us[i] = undoOf(&c.plan, i, member, r.suffixOf(i), now)
	}
	if e.anyDown(&c.plan) {
		// Redis timed out and has not answered since: queue the removal
		// for the batch that finds it back, instead of making the caller
		// (a handler that has answered) wait for another timeout.
		e.undos.push(e, us...)
		return &BackendError{Op: "giveback", Err: ErrUnavailable}
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	failed, err := e.remove(ctx, us)
	if len(failed) == 0 {
		return nil
	}
	e.log.Warn("engine: give-back failed; retried before the next script call", "member", member, "err", err)
	for _, i := range failed {
		e.undos.push(e, us[i])
	}
	return &BackendError{Op: "giveback", Err: err}
}
