package engine

import (
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

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
		k.kind, k.cost, k.check = codec.KindCal, p.Cost[r.Key], int8(r.Check)
		k.cal = p.CalStartAt(int(r.Key), t.at)
	}
}

// takeExtra records the distinct keys of p in t.
func (t *taken) takeExtra(p *plan.Plan) {
	t.extra = make([]takenExtra, len(t.keys))
	for k := range t.keys {
		if p.IsDistinct(k) {
			t.keys[k].kind = codec.KindDistinct
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
func (t *taken) extraUndo(i int, u *codec.Undo, delta int64) bool {
	if u.Kind == codec.KindCal {
		u.Cal, u.Delta, u.Mode = t.keys[i].cal, delta, 's'
		if delta < 0 && delta == -t.keys[i].cost {
			u.Mode = 'r' // the local fallback removes the entry
		}
		return true
	}
	x := &t.extra[i]
	u.Value, u.At, u.Prev = x.value, x.at, x.prev
	return x.prev > 0 || t.src == fromLocal // the fallback removes the request's entry
}

// calDeltas sets in d the change of every calendar key of t when its checks
// settle to actual (-1: unchanged), as deltas does for the rate keys.
func (t *taken) calDeltas(actual, d []int64) error {
	for k := range t.keys {
		if t.keys[k].kind != codec.KindCal {
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
