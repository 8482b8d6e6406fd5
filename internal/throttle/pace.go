package throttle

import (
	"math"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// Pacing (docs/throttle.md, Pacing) spaces the admissions of a throttle
// with shares over its windows. Without it a saturated window admits in
// bursts a window apart (each call takes the slot of the call admitted
// one window before it), and a call of a class under its share, the
// first in the fleet's order, waits for the next burst: up to a window.
// Paced, a slot frees about every interval, so such a call waits about
// one interval and the hand-off between processes.
//
// The next slot travels with the fleet's turn: the process that admits
// a call passes it on as the hint of its pass, and the process given the
// turn takes it as its own. Pacing only orders asks; the windows alone
// decide admissions, so it never lets more through than they do.

// paceFactor is the spacing of a paced lane's admissions as a part of the
// fair interval of its tightest window: under 1, so that the window, not
// the pacing, binds at saturation.
const paceFactor = 0.95

// paceOf returns the spacing of the admissions of req, whose check i has
// the cost name names[i], in a throttle with shares: paceFactor times its
// longest fair interval over its sliding windows of calls. It returns 0
// (not paced) in a throttle without shares and for a request with no
// such window. Grained windows, in-flight and calendar windows are not
// paced, nor are estimates (a named cost): a Finish that settles one
// lower kicks the lane, and pacing by the estimate would hold back the
// room it gives.
func (p *Plan) paceOf(req *engine.Request, names []string) time.Duration {
	if len(p.shares) == 0 {
		return 0
	}
	var d float64
	for i, c := range req.Checks {
		if i < len(names) && names[i] != "" {
			continue
		}
		cost := float64(max(c.Cost, 1))
		for _, w := range c.Rule.Windows {
			if w.Concurrent || w.Calendar != "" || w.Grain > 0 || w.Limit <= 0 || w.Period <= 0 {
				continue
			}
			d = max(d, float64(w.Period)*cost/float64(w.Limit))
		}
	}
	return time.Duration(min(d*paceFactor, math.MaxInt64/4))
}

// spreadOf returns, after admission d of req, whose check i has the cost
// name names[i], the interval that spreads the room left in its paced
// windows over the time until their oldest entries leave: each window's
// Reset over the calls it still has room for, plus one; the longest over
// them. A paced lane that used the paceOf interval alone would fill a
// window that had room for a burst (its first one, or after a pause)
// before its oldest entry leaves, and leave a gap with no slot free.
func spreadOf(d *engine.Decision, req *engine.Request, names []string) time.Duration {
	var s time.Duration
	for _, ws := range d.Windows {
		w := ws.Window
		if w.Concurrent || w.Calendar != "" || w.Grain > 0 || ws.Reset <= 0 || ws.Check >= len(req.Checks) ||
			ws.Check < len(names) && names[ws.Check] != "" {
			continue
		}
		calls := ws.Remaining / max(req.Checks[ws.Check].Cost, 1)
		s = max(s, ws.Reset/time.Duration(calls+1))
	}
	return s
}

// paceNext notes an admission at now in a lane paced g apart and returns
// how long until the next ask; ln.mu is held. spread is the admission's
// spreadOf, an interval from now; queued says whether the admitted call
// waited in the lane's queue, so that the lane was busy.
//
// The next slot is the later of g after the last one and spread after
// the earlier of the last one and now: spread, the room left in the
// windows shared over the time until their oldest entries leave, counts
// from the admission, never from a schedule that runs ahead of it. (It
// once counted from the schedule: after a burst that filled the window,
// the next slot came a whole window after the schedule's last slot, half
// a second after the window had room.) In a busy lane admissions that
// come late by the hand-off between processes, a few Redis calls, catch
// up at once, up to paceLag (or paceSlots slots) behind: pacing keeps the rate
// of g however short g is against the hand-off, and when the hand-off
// takes longer than g the lane asks as fast as an unpaced one. A call
// that did not wait (the lane was idle) starts the schedule again g
// after it when the schedule is behind, with no burst to catch up: a
// burst would come back a window later as a gap with no slot free.
func (ln *lane) paceNext(now time.Time, g, spread time.Duration, queued bool) time.Duration {
	from := ln.paceAt
	if lag := max(paceLag, paceSlots*g); now.Sub(from) > lag {
		if queued {
			from = now.Add(-lag)
		} else {
			from = now
		}
	}
	ln.paceAt = from.Add(g)
	base := from
	if now.Before(base) {
		base = now
	}
	if at := base.Add(spread); at.After(ln.paceAt) {
		ln.paceAt = at // a schedule behind now catches up by it as by g
	}
	if ln.paceN++; ln.paceN < int(paceGroup/max(g, spread)) {
		return 0 // within a group of slots: the next asks at once
	}
	ln.paceN = 0
	if ln.paceAt.After(ln.wakeAt) {
		ln.wakeAt = ln.paceAt
	}
	return max(ln.paceAt.Sub(now), 0)
}

// paceLag is how far a busy paced lane's admissions may fall behind its
// schedule, to be caught up, unless paceSlots slots are longer: a stall
// of the process or of Redis that long is made up at once, as an unpaced
// lane would, not at the few percent by which pacing outruns the window
// (paceFactor).
const (
	paceLag   = 100 * time.Millisecond
	paceSlots = 5
)

// paceGroup is the shortest wait of a paced lane: slots closer than that
// are asked in groups of paceGroup/g at once, each group waiting for the
// schedule, so that a lane of a high rate does not sleep and wake, nor
// hand the turn on, once per call: a wait shorter than that, a timer and
// a hand-off, costs about what it spaces.
const paceGroup = 30 * time.Millisecond
