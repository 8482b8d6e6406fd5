package throttle

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/logevery"
)

// permitWarnEvery is the least time between two lines about Permits that
// were dropped or held too long, per throttle and kind.
const permitWarnEvery = time.Minute

// A Permit is a call a Throttle admitted: what finishing it takes. It
// never refers to what the caller holds (the root package's Permit, a
// response body), so that a cleanup attached there can finish it once
// that is unreachable.
type Permit struct {
	t       *Throttle
	d       engine.Decision
	names   []string // names[i] is the cost name of check i; "" for none
	lane    *lane    // counted as used (Throttle.lane) until finished
	done    atomic.Bool
	learned atomic.Bool // an upstream's 429 or 503 was learned (Learn)
	live    atomic.Bool // counted in stats.active, until finished or released at the maximum hold
	hold    *time.Timer // releases the slots at the maximum hold; nil without slots
	class   *classStats // its class's statistics; nil when the rules have no shares
	charged bool        // admitted at once, untagged, while its lane was contended (Charged)
}

// Charged reports whether p's call was admitted at once, untagged, while
// calls of its lane waited or were being tagged: it took its flow's next
// turn, and its tenant's waiters move a turn later (docs/throttle.md,
// Classes and tenants). Such a call goes ahead of its tag's place in the
// round, so another tenant may be admitted twice in a row around it; the
// fault harness's turns property allows for it.
func (p *Permit) Charged() bool { return p.charged }

// permitWarnings throttles a throttle's lines about Permits.
type permitWarnings struct {
	dropped, held logevery.Gate
}

// newPermit returns the Permit of the call d admitted, which uses ln.
func (t *Throttle) newPermit(req *engine.Request, d engine.Decision, names []string, ln *lane) *Permit {
	p := &Permit{t: t, d: d, names: names, lane: ln}
	p.live.Store(true)
	t.stats.active.Add(1)
	if holdsSlots(req) {
		p.hold = time.AfterFunc(t.maxHold, p.overHeld)
	}
	return p
}

// holdsSlots reports whether req holds a slot of an in-flight window once
// admitted.
func holdsSlots(req *engine.Request) bool {
	for i := range req.Checks {
		for _, w := range req.Checks[i].Windows {
			if w.Concurrent {
				return true
			}
		}
	}
	return false
}

// Finish ends the call p admitted: the cost of each check named in
// actual is settled to its value (capped at the smallest limit of its
// windows; a negative value keeps the estimate), and in-flight slots are
// released. It reports whether it finished p (false when p was finished
// already).
func (p *Permit) Finish(actual map[string]int64) bool {
	if !p.done.CompareAndSwap(false, true) {
		return false
	}
	if p.hold != nil {
		p.hold.Stop()
	}
	p.leave()
	var o engine.Outcome
	for i, n := range p.names {
		if v, ok := actual[n]; ok && n != "" && v >= 0 {
			if o.Actual == nil {
				o.Actual = make([]int64, len(p.names))
				for j := range o.Actual {
					o.Actual[j] = -1
				}
			}
			o.Actual[i] = min(v, p.maxCost(i))
		}
	}
	// A settlement or a released slot may make room before the time the
	// waiters were told: the head of the lane tries again now.
	room := o.Actual != nil || p.hold != nil
	if room && p.lane.othersWait() {
		// The fleet's head may be another process's, which learns of the
		// room only from the fleet once the finish reached Redis. The
		// goroutine keeps p's use of the lane and ends within
		// finishTimeout and a script call.
		go func() {
			p.t.finishShared(p.lane, p.d, o)
			p.t.release(p.lane)
		}()
		return true
	}
	// FinishAsync queues the work; this process's next admission sees it.
	p.t.eng.FinishAsync(p.d, o)
	if room {
		p.t.roomQuietly(p.lane)
	}
	p.t.release(p.lane)
	return true
}

// leave takes p out of the permits in flight, once whichever of its
// finish, its cancel or its release at the maximum hold comes first.
func (p *Permit) leave() {
	if p.live.CompareAndSwap(true, false) {
		p.t.stats.active.Add(-1)
	}
}

// finishShared finishes the call d admitted in ln, waiting for Redis at
// most finishTimeout, then tells the heads of every process that ln's
// windows may have room now (fleet.kick).
func (t *Throttle) finishShared(ln *lane, d engine.Decision, o engine.Outcome) {
	ctx, cancel := context.WithTimeout(context.Background(), finishTimeout)
	_ = t.eng.Finish(ctx, d, o) // a failure is queued and logged by the engine
	cancel()
	t.fleet.kick(ln)
}

// roomQuietly lets ln's head ask at once after a FinishAsync that made
// room, telling the fleet too when another process's head became known to
// wait in ln since the finish looked (lane.roomQuietly).
func (t *Throttle) roomQuietly(ln *lane) {
	if wait, tell := ln.roomQuietly(); tell {
		t.fleet.kickLater(ln, wait)
	}
}

// Dropped finishes p, whose holder became unreachable unfinished: the
// cleanup attached to what the caller holds, which runs on the runtime's
// cleanup goroutine. It logs at most a line per permitWarnEvery per throttle.
func (p *Permit) Dropped() {
	if !p.Finish(nil) {
		return
	}
	if ok, n := p.t.warn.dropped.Allow(time.Now()); ok {
		p.t.logger().Warn("slidelimit: a throttle's Permit became unreachable without Finish; finished with its estimates",
			"throttle", p.t.name, "suppressed", n)
	}
}

// overHeld releases p's in-flight slots once it held them for the maximum
// hold unfinished: its later Finish still settles its costs. It logs at
// most a line per permitWarnEvery per throttle.
func (p *Permit) overHeld() {
	if p.done.Load() {
		return
	}
	// Without Actual the engine only releases the slots; a later finish
	// settles, releasing nothing twice (Engine.Finish is idempotent per
	// part). This runs on the timer's goroutine, which may wait for
	// Redis; it keeps a use of the lane, which a Finish meanwhile may end.
	if !p.t.retain(p.lane) {
		return // finished meanwhile
	}
	p.leave()
	if p.lane.othersWait() {
		p.t.finishShared(p.lane, p.d, engine.Outcome{})
	} else {
		p.t.eng.FinishAsync(p.d, engine.Outcome{})
		p.t.roomQuietly(p.lane)
	}
	p.t.release(p.lane)
	if ok, n := p.t.warn.held.Allow(time.Now()); ok {
		p.t.logger().Warn("slidelimit: a throttle's Permit held its in-flight slots past the maximum hold without Finish; released them",
			"throttle", p.t.name, "max_hold", p.t.maxHold, "suppressed", n)
	}
}
