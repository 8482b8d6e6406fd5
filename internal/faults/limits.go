package faults

import (
	"cmp"
	"slices"
)

// Limits that vary from request to request: a limit function's value
// ($name, docs/rules.md, Limit functions), a rule override pushed at run
// time (SetRules), a role's own rules. The engine's keys name the
// scope, rule and subject, never the limits (docs/rules.md, "keys name
// those, never the limits"), so every admission of a key counts against
// every later request of that key, whatever limit it was admitted under:
// a lower limit denies until enough admissions leave the window, a higher
// one admits at once. The model's bounds take, for each admission, the
// limit its own request was checked against (see checkWindow and
// checkSlots).

// limitOf returns the limit of window i of h that decision d was checked
// against: d.Limits[i] when set, else the window's own.
func (h History) limitOf(d Decision, i int) int64 {
	if i < len(d.Limits) && d.Limits[i] > 0 {
		return d.Limits[i]
	}
	return h.Windows[i].Limit
}

// redisOrder returns the indexes of ds in an order Redis may have decided
// them in: by step (a later step's decisions came after), and within a
// step, whose decisions ran concurrently and reached Redis in an order the
// history does not record, by increasing limit. That order is the one
// that best justifies the step's admissions: with each admission needing
// the count before it plus its own to be at most its limit, a deadline,
// the earliest deadline first meets every deadline whenever any order
// does.
func redisOrder(ds []Decision, lim func(Decision) int64) []int {
	idx := make([]int, len(ds))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(ds[a].Step, ds[b].Step), cmp.Compare(lim(ds[a]), lim(ds[b])))
	})
	return idx
}

// before reports whether ds[j] comes no later than ds[i] in redisOrder:
// of an earlier step, or of the same step with a smaller limit, or the
// same limit and no later in ds.
func before(ds []Decision, j, i int, lim func(Decision) int64) bool {
	a, b := ds[j], ds[i]
	switch {
	case a.Step != b.Step:
		return a.Step < b.Step
	case lim(a) != lim(b):
		return lim(a) < lim(b)
	}
	return j <= i
}

// heldValue reports whether window w held the distinct: value of ds[i], a
// Redis admission, when Redis admitted it: a count of the value by Redis
// (ws > 0) of an earlier step within w's period before it, not lost
// since. A window that holds the value has room for it whatever its count
// (docs/rules.md, distinct:), so such an admission needs none: with a
// limit lowered since the value was counted (an override, a limit
// function), the window may hold more values than the new limit and
// still admit those it holds (found by miniredis seed 511484622181869596).
func heldValue(h History, ds []Decision, ws []int64, i int, w Window) bool {
	d := ds[i]
	if !h.Distinct || w.Calendar != "" {
		return false
	}
	for j, r := range ds {
		if r.Source == Redis && ws[j] > 0 && r.Value == d.Value && r.Step < d.Step &&
			r.At > d.At-w.Period && r.At <= d.At && !lostBetween(h, r.Step, d.Step) {
			return true
		}
	}
	return false
}

// valueLimit returns the limit of Redis admission d as the model takes it:
// its own, or with distinct: the largest of the admissions of its value in
// its step. Concurrent requests of one value count it once (weights gives
// the count to the first in the history), and whichever Redis decided
// first counted it, under its own limit; the others found it held (found
// by miniredis seed 7256485418858828835: a value asked under limits 1 and
// 2 at once, counted under 2).
func valueLimit(h History, ds []Decision, d Decision, lim func(Decision) int64) int64 {
	l := lim(d)
	if !h.Distinct || d.Source != Redis {
		return l
	}
	for _, r := range ds {
		if r.Source == Redis && r.Allowed && r.Step == d.Step && r.Value == d.Value {
			l = max(l, lim(r))
		}
	}
	return l
}
