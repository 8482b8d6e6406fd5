package slidelimit

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// Wait blocks until every window of the throttle has room for c, counts
// it in all of them (all or nothing), and returns its Permit, which the
// caller must Finish when the call has ended.
//
// Callers wait in the order they arrived, across the fleet: in each
// process the callers for the same subjects queue behind one head, and
// only the head of the process whose head arrived first asks Redis, at the
// exact time the windows free up (the engine's RetryAfter and window
// resets), never by polling. See docs/throttle.md, Fairness.
//
// When ctx ends first, Wait returns ctx.Err() and has counted nothing. A
// call whose cost is above a whole limit fails at once with an error
// wrapping ErrNeverFits; a Call without a value the rules need, with one
// wrapping ErrCall. When Redis fails (or does not answer within the
// engine's timeout), the group's fail mode decides, closed unless it has
// a fail: statement: closed makes Wait ask again every 100 ms until ctx
// ends; open admits (the Permit counts nothing); local counts in this
// process only. $name limits call the Limiter's limit functions
// (middleware.WithLimitFunc in WithMiddlewareOptions) with a request that
// carries only ctx.
func (t *Throttle) Wait(ctx context.Context, c Call) (*Permit, error) {
	return t.waitFor(ctx, nil, c)
}

// waitFor is Wait; r is the outgoing request of a Transport, for limit
// functions.
func (t *Throttle) waitFor(ctx context.Context, r *http.Request, c Call) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req, names, err := t.plan().request(ctx, r, c)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ln := t.lane(laneKey(req))
	w := &waiter{stamp: t.fleet.now(), wake: make(chan struct{}, 1)}
	t.stats.waiting.Add(1)
	defer t.stats.waiting.Add(-1)
	ask := ln.enter(w)
	for {
		if !ask {
			if err := ln.await(ctx, w); err != nil {
				ln.remove(w)
				return nil, err
			}
		}
		ask = false
		if err := ctx.Err(); err != nil {
			ln.remove(w)
			return nil, err
		}
		d, err := t.decide(ctx, &req)
		if d.Allowed {
			if cerr := ctx.Err(); cerr != nil {
				// Admitted as ctx ended: take the call back out, so that
				// an ended Wait has counted nothing.
				t.giveBack(d)
				ln.remove(w)
				return nil, cerr
			}
			ln.mu.Lock()
			head := len(ln.q) > 0 && ln.q[0] == w // else it asked at once, unqueued
			if head {
				ln.q = ln.q[1:]
			}
			ln.handOver(head, nextHint(&req, &d))
			t.stats.admitted(time.Since(start))
			return &Permit{t: t, d: d, names: names, lane: ln}, nil
		}
		if err != nil && errors.Is(err, engine.ErrInvalid) {
			ln.remove(w)
			return nil, err
		}
		ln.refused(w, d, err)
	}
}

// giveBack takes an admitted call out of every window before it returns,
// so that a Wait that ended with its context has counted nothing when it
// returns.
func (t *Throttle) giveBack(d engine.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	defer cancel()
	_ = t.lim.engine.Finish(ctx, d, engine.Outcome{GiveBack: true}) // a failure is queued and logged by the engine
}
