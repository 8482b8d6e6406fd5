package throttle

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// Wait blocks until every window of the throttle has room for c, counts
// it in all of them, and returns its Permit, which the caller must
// Finish. Callers wait in arrival order across the fleet, or by the tags
// of their classes and tenants (classes.go). When ctx ends
// first Wait returns ctx.Err() having counted nothing.
func (t *Throttle) Wait(ctx context.Context, c Call) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := t.plan()
	req, names, err := p.request(ctx, c)
	if err != nil {
		return nil, err
	}
	fl := p.flowOf(c, &req)
	return t.counted(p, c.Class, func() (*Permit, error) { return t.wait(ctx, p, &req, names, fl) })
}

// wait is Wait of the request req that plan p made of a call, whose
// check i has the cost name names[i] and whose flow is fl (nil for none).
func (t *Throttle) wait(ctx context.Context, p *Plan, req *engine.Request, names []string, fl *flow) (*Permit, error) {
	start := time.Now()
	ln, err := t.lane(ctx, laneKey(req))
	if err != nil {
		return nil, err
	}
	ln.note(req)
	if fl == nil && ln.tagged() {
		fl = p.flow(Call{}, req) // its lane's other calls are tagged
	}
	kept := false // by the Permit, which releases the lane at Finish
	defer func() {
		if !kept {
			t.release(ln)
		}
	}()
	now := t.fleet.now()
	w := &waiter{stamp: now, arrived: now, wake: make(chan struct{}, 1), costs: make([]int64, len(req.Checks)), fl: fl}
	for i, c := range req.Checks {
		w.costs[i] = max(c.Cost, 1)
	}
	pace := p.paceOf(req, names) // 0: not paced
	w.paced = pace > 0
	w.early = holdsSlots(req) || slices.ContainsFunc(names, func(n string) bool { return n != "" })
	t.stats.waiting.Add(1)
	defer t.stats.waiting.Add(-1)
	ask := ln.enter(w)
	defer ln.asked(w)
	for {
		if !ask {
			if err := ln.await(ctx, w); err != nil {
				ln.giveUp(w)
				return nil, err
			}
		}
		ask = false
		if err := p.holdOff(ctx); err != nil {
			ln.giveUp(w)
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			ln.giveUp(w)
			return nil, err
		}
		d, err := t.decide(ctx, req)
		ln.asked(w)
		if d.Allowed {
			if cerr := ctx.Err(); cerr != nil {
				// Admitted as ctx ended: take the call back out, so that
				// an ended Wait has counted nothing.
				t.giveBack(d)
				ln.giveUp(w) // counted nothing: its tag goes back to its flow
				t.fleet.kick(ln)
				return nil, cerr
			}
			ln.mu.Lock()
			head := ln.admitted(w)
			var slot time.Duration // until a paced lane's next slot
			if pace > 0 {
				slot = ln.paceNext(time.Now(), pace, spreadOf(&d, req, names), head)
			}
			ln.handOver(head, func(next *waiter) time.Duration { return max(nextHint(&d, next), slot) })
			charged := !head && w.fl != nil && !w.tagged && ln.contended()
			if charged {
				t.fleet.charge(ln, w.fl) // admitted untagged: its flow's turn is spent
			}
			t.stats.admitted(time.Since(start))
			kept = true
			p := t.newPermit(req, d, names, ln)
			p.charged = charged
			return p, nil
		}
		if err != nil && errors.Is(err, engine.ErrInvalid) {
			ln.remove(w)
			return nil, err
		}
		t.fleet.tagWaiter(ln, w) // it asked at once: not queued yet
		ln.refused(w, d, err)
	}
}

// giveBack takes an admitted call out of every window before it returns,
// so that a Wait that ended with its context has counted nothing when it
// returns.
func (t *Throttle) giveBack(d engine.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	defer cancel()
	_ = t.eng.Finish(ctx, d, engine.Outcome{GiveBack: true}) // a failure is queued and logged by the engine
}
