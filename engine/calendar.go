package engine

import (
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/rulespec"
)

// calArgs appends the fields of calendar key k of p: 0, 'P', cost, limit,
// then the boundaries around now (µs since 1970), which p keeps for
// readCal; or, when an earlier key of the same script call sent those
// boundaries, 0, 'Q', cost, limit and the index in ARGV of the first; or,
// when the previous calendar key of the call was the same key with the
// same fields (a batch on a hot subject), 0 and 'q'.
func (f *flatArgs) calArgs(p *plan.Plan, k int32, now int64) {
	x := f.bounds(p.Cal(int(k)), p.Location(), now)
	p.Cals[k].Bounds = x.b
	cost, limit := p.Cost[k], p.Wins[p.WinStart[k]].Limit
	f.int(0)
	kind := byte('P')
	if x.call == f.call {
		kind = 'Q'
		if l := &f.lastCal; l.call == f.call && l.at == x.at && l.cost == cost && l.limit == limit && l.key == p.Keys[k] {
			kind = 'q'
		}
	}
	f.buf = append(f.buf, kind)
	f.ends = append(f.ends, int32(len(f.buf)))
	if kind == 'q' {
		return
	}
	f.int(cost)
	f.int(limit)
	if kind == 'P' {
		x.call, x.at = f.call, len(f.ends)
		for _, b := range x.b {
			f.int(b)
		}
	} else {
		f.int(int64(x.at - f.first + 1))
	}
	// The key is a view of a plan reused after the batch: it is compared
	// while the batch's arguments are built only (call says which).
	f.lastCal = calLast{key: p.Keys[k], cost: cost, limit: limit, at: x.at, call: f.call}
}

// calLast is the last calendar key a script call being built sent with
// its fields, which the next may repeat as 'q' (see calArgs).
type calLast struct {
	key         string
	cost, limit int64
	at          int    // calCached.at of its boundaries
	call        uint64 // flatArgs.call of the script call; 0: none
}

// calCached is the boundaries of the periods around a time, for one
// calendar and zone, and where the script call being built holds them.
type calCached struct {
	cal  string
	loc  *time.Location
	b    [plan.CalBounds]int64
	call uint64 // flatArgs.call of the script call that sent them; 0: none
	at   int    // the index of their first field in flatArgs.ends
}

// bounds returns the entry of calBoundsAround(c, now, loc), from f's cache
// while now lies in the cached current period: computing them takes a
// dozen time.Date calls, a period lasts a day or more. The entry is valid
// until the next call of bounds.
func (f *flatArgs) bounds(c string, loc *time.Location, now int64) *calCached {
	for i := range f.cals {
		if x := &f.cals[i]; x.cal == c && x.loc == loc && now >= x.b[1] && now < x.b[2] {
			return x
		}
	}
	b := plan.CalBoundsAround(c, now, loc)
	if len(f.cals) >= 4 {
		f.cals = f.cals[:0]
	}
	f.cals = append(f.cals, calCached{cal: c, loc: loc, b: b})
	return &f.cals[len(f.cals)-1]
}

// readCal reads the reply of calendar key k of c decided at t (µs): what
// the period holds and the time to its end, which is the window's reset
// and, when the request does not fit, its wait.
func readCal(r *ireader, c *call, k int32, t int64) {
	p := &c.plan
	j := p.WinStart[k]
	used := r.int(1 << 53)
	left := r.int(plan.CalNominal(rulespec.Month))
	if r.err == nil && left < 1 {
		r.fail("calendar period ended")
	}
	var wait int64
	if used+p.Cost[k] > p.Wins[j].Limit {
		wait = left
	}
	c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, left, wait
	b := &p.Cals[k].Bounds
	for i := 1; i < plan.CalBounds; i++ {
		if b[i] == t+left {
			p.Cals[k].Start = b[i-1] // the period the script counted in
		}
	}
}

// calUndo makes u, the undo of calendar key k of p, the adjustment of its
// counter by -cost in the period the script counted in; a key whose
// period is unknown (the script call failed: it may not have counted)
// gets none (cal 0), erring on the side of denying.
func calUndo(p *plan.Plan, u *undo, k int) {
	u.kind, u.delta, u.cal = kindCal, -p.Cost[k], p.Cals[k].Start
}

// takenExtra is what Finish needs of a distinct key a request took,
// beside its takenKey.
type takenExtra struct {
	at    int64  // the time the value counted anew
	prev  int64  // what a restore gives back (0: nothing)
	value string // the value's member
}

// takeCalendars records the calendar keys of p in t: no allocation, they
// fit in takenKey.
func (t *taken) takeCalendars(p *plan.Plan) {
	for _, r := range p.CalWindows {
		k := &t.keys[r.Key]
		k.kind, k.cost, k.check = kindCal, p.Cost[r.Key], int8(r.Check)
		k.cal = p.CalStartAt(int(r.Key), t.at)
	}
}

// takeExtra records the distinct keys of p in t.
func (t *taken) takeExtra(p *plan.Plan) {
	t.extra = make([]takenExtra, len(t.keys))
	for k := range t.keys {
		if p.IsDistinct(k) {
			t.keys[k].kind = kindDistinct
			x := &t.extra[k]
			x.value = p.Distinct[k]
			if k < len(p.DistinctPrev) {
				x.at, x.prev = p.DistinctAt[k], p.DistinctPrev[k]
			}
		}
	}
}

// extraUndo makes u the finish of calendar or distinct key i of t: a
// calendar key's counter changes by delta in the request's period; a
// distinct key's value is restored (delta unused). It reports false when
// there is nothing to do.
func (t *taken) extraUndo(i int, u *undo, delta int64) bool {
	if u.kind == kindCal {
		u.cal, u.delta, u.mode = t.keys[i].cal, delta, 's'
		if delta < 0 && delta == -t.keys[i].cost {
			u.mode = 'r' // the local fallback removes the entry
		}
		return true
	}
	x := &t.extra[i]
	u.value, u.at, u.prev = x.value, x.at, x.prev
	return x.prev > 0 || t.src == fromLocal // the fallback removes the request's entry
}

// calDeltas sets in d the change of every calendar key of t when its checks
// settle to actual (-1: unchanged), as deltas does for the rate keys.
func (t *taken) calDeltas(actual, d []int64) error {
	for k := range t.keys {
		if t.keys[k].kind != kindCal {
			continue
		}
		c := t.keys[k].check
		a := actual[c]
		if a < 0 {
			continue
		}
		delta := a - t.keys[k].cost
		switch {
		case delta != 0 && !t.checks[c].priced:
			return &requestError{Check: int(c), Window: -1, Reason: "only a limiter with a cost settles: this one counts requests"}
		case d[k] != 0 && d[k] != delta:
			return &requestError{Check: int(c), Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) settle to different costs"}
		}
		d[k] = delta
	}
	return nil
}
