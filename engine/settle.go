package engine

import (
	"context"
	"slices"
	"strconv"
	"time"
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
// not made and a debt is charged to its newest entry (see
// lua/give_back.lua).
//
// When Redis fails, or is considered down, the settlement is queued like
// the undo of a failed call (best effort, retried before later script
// calls) and the error matches ErrBackend; Settle waits for at most one
// timeout. After Close it returns ErrClosed. It is safe for concurrent use.
func (e *Engine) Settle(ctx context.Context, req Request, d Decision, actual []int64) error {
	if len(actual) != len(req.Checks) {
		return &RequestError{Check: -1, Window: -1, Reason: "Settle needs one actual cost per check, got " +
			strconv.Itoa(len(actual)) + " for " + strconv.Itoa(len(req.Checks))}
	}
	r := &d.receipt
	if !d.Allowed || r.id == 0 {
		return nil
	}
	c := getCall()
	defer putCall(c)
	p := &c.plan
	if err := p.build(e.keyer, &req); err != nil {
		return err
	}
	if r.suffix < 0 && len(r.suffixes) != len(p.keys) {
		return &RequestError{Check: -1, Window: -1, Reason: "request does not match the decision settled"}
	}
	deltas := make([]int64, len(p.keys))
	set := make([]bool, len(p.keys))
	for i, a := range actual {
		k := p.keyOf[i]
		if a < 0 || k < 0 {
			continue
		}
		delta := a - p.kcost[k]
		switch {
		case delta != 0 && req.Checks[i].Limiter.Cost == "":
			return &RequestError{Check: i, Window: -1, Reason: "only a limiter with a cost settles: this one counts requests"}
		case set[k] && deltas[k] != delta:
			return &RequestError{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) settle to different costs"}
		}
		deltas[k], set[k] = delta, true
	}
	if err := p.calDeltas(&req, actual, deltas, set); err != nil {
		return err
	}
	p.setCalendarAt(d.Time.UnixMicro())
	if d.Source == FromLocal {
		e.local.settle(p, r.id, deltas)
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
	var us []undo
	for k, delta := range deltas {
		if delta == 0 {
			continue
		}
		u := undoOf(p, k, member, r.suffixOf(k), now)
		if p.isCal(k) {
			u.delta = delta // a calendar counter (mode 'c')
			us = append(us, u)
			continue
		}
		u.delta, u.mode = delta, 's'
		for _, w := range p.wins[p.kstart[k]:p.kstart[k+1]] {
			if w.grain > u.grain {
				u.mode, u.grain, u.at = 'g', w.grain, d.Time.UnixMicro()
			}
		}
		us = append(us, u)
	}
	if len(us) == 0 {
		return nil
	}
	if e.anyDown(p) {
		e.undos.push(e, us...)
		return &BackendError{Op: "settle", Err: ErrUnavailable}
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	failed, err := e.remove(ctx, us)
	if len(failed) == 0 {
		return nil
	}
	e.warnFailed("settlement", member, err)
	for _, i := range failed {
		e.undos.push(e, us[i])
	}
	return &BackendError{Op: "settle", Err: err}
}

// settle changes the cost of request id in the keys of p by deltas (per
// key), as Settle does in Redis: never below zero, a debt at the request's
// own time.
func (l *localLimiter) settle(p *plan, id int64, deltas []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, key := range p.keys {
		k := l.keys[key]
		if k == nil || deltas[i] == 0 {
			continue
		}
		if j := slices.Index(k.ids, id); j >= 0 {
			k.costs[j] = max(0, k.costs[j]+deltas[i])
			k.ids[j] = settledID // settled once
		}
	}
}

// settledID marks a local entry that was settled.
const settledID = -2
