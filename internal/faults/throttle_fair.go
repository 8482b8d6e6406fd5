package faults

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
)

// The properties of a Fair history, whose calls a throttle serves by
// classes (share statements) and tenants rather than in arrival order
// (docs/throttle.md, Classes and tenants). A call's class is the one a
// share names, or OtherClass, whose part is what the shares leave (at
// least 1%); its flow is its class and tenant. Each property is checked
// per lane, away from faults (Settle after each) and learned blocks:
//
//   - share: while every class has a waiter in the lane, the lane's
//     admissions (N of them, calls counted, not costs: a lane whose rules
//     count a cost is not checked) give each class at least
//     ⌊P·N/100⌋ − ShareSlack of them;
//   - turns: once a waiter is the oldest of its flow (its tenant's in its
//     class: first come first served within a tenant) and has waited
//     Bound, no other tenant of its class is admitted twice before it is
//     admitted or gone (round robin across tenants, Bound allowing for the
//     fleet's news of its arrival); where the class's calls differ in
//     cost, ⌈longest / shortest⌉ of their fair intervals times plus one
//     (turnsOf). A class's credit shifts all its tenants alike and
//     allows no more. Each call of its tenant admitted at once and
//     charged (CallRecord.Charged) from Bound before it arrived allows
//     one more: such a call goes ahead of its tag's place in its round,
//     and its tenant's next call comes a round later, so another tenant
//     may be admitted twice around it;
//   - starve: once a waiter is the oldest of its flow and has waited
//     Bound, the calls of other flows admitted before it is admitted or
//     gone are at most Σ (⌈P_f/P_w⌉·n_w + 1) over the flows f admitted
//     meanwhile, P_w its class's part, n_w the tenants of its class seen
//     by then (a tenant's finish tag may stay ahead after its waiters
//     left), plus ShareCredit for each flow f of a class with a share:
//     start-time fair queuing's bound (docs/throttle.md, Classes and
//     tenants), its class's part split between those tenants.

// OtherClass is the class of the calls whose class no share names.
const OtherClass = "other"

// ShareSlack is how many admissions fewer than its share a class may get
// while every class waits: one for the admissions decided as the classes'
// waiters arrived, one for the discreteness of the turns.
const ShareSlack = 2

// ShareCredit is how many increments earlier than its finish tag the
// throttle tags a call of a flow of a class with a share, so that such a
// flow with no call waiting starts that many before virtual time
// (docs/throttle.md, Credit): up to that many more calls of such a flow
// may pass a waiter. internal/throttle's TestModelConstants keeps it equal
// to the throttle's.
const ShareCredit = 2

// creditOf returns the credit of the flows of class.
func (h ThrottleHistory) creditOf(class string) int {
	if class == OtherClass {
		return 0
	}
	return ShareCredit
}

// classOf returns c's class: its Class if a share names it, else
// OtherClass.
func (h ThrottleHistory) classOf(c CallRecord) string {
	if slices.ContainsFunc(h.Shares, func(s ThrottleShare) bool { return s.Class == c.Class }) {
		return c.Class
	}
	return OtherClass
}

// partOf returns class's part of the admissions, percent.
func (h ThrottleHistory) partOf(class string) int {
	rest := 100
	for _, s := range h.Shares {
		if s.Class == class {
			return s.Percent
		}
		rest -= s.Percent
	}
	return max(rest, 1)
}

// classes returns the classes of the history's shares and OtherClass.
func (h ThrottleHistory) classes() []string {
	var out []string
	for _, s := range h.Shares {
		out = append(out, s.Class)
	}
	return append(out, OtherClass)
}

// flow returns c's flow: its class and tenant.
func (h ThrottleHistory) flow(c CallRecord) string { return h.classOf(c) + "/" + c.Tenant }

// keyed reports whether calls of different key values wait in
// different lanes.
func (h ThrottleHistory) keyed() bool {
	return slices.ContainsFunc(h.Rules, func(l ThrottleRule) bool { return l.Key })
}

// inLane reports whether c waits in lane.
func (h ThrottleHistory) inLane(c CallRecord, lane int, keyed bool) bool {
	return !keyed || c.Key == lane
}

// admittedBy returns how many calls of lane were admitted by t.
func (h ThrottleHistory) admittedBy(lane int, keyed bool, t time.Duration) int {
	n := 0
	for _, c := range h.Calls {
		if c.Admitted && !c.Phantom && h.inLane(c, lane, keyed) && c.Decided <= t {
			n++
		}
	}
	return n
}

// quiet reports whether no fault (nor the Settle after it) and no learned
// block of lane touches [from, to].
func (h ThrottleHistory) quiet(lane int, keyed bool, from, to time.Duration) bool {
	for _, f := range h.Faults {
		if f.From <= to && f.To+h.Settle >= from {
			return false
		}
	}
	for _, b := range h.Blocks {
		if (!keyed || b.Key == lane) && b.From <= to && b.To >= from {
			return false
		}
	}
	return true
}

// end returns when c stopped waiting: its admission, or its end.
func end(c CallRecord) time.Duration {
	if c.Admitted {
		return min(c.Decided, c.Ended)
	}
	return c.Ended
}

// oldestOfFlow returns when w, call i, became the oldest waiter of its
// flow in lane: when it arrived, or when the last of the flow's calls
// that may have arrived before it (by then, or within Skew after it)
// stopped waiting.
func (h ThrottleHistory) oldestOfFlow(i int, lane int, keyed bool) time.Duration {
	w := h.Calls[i]
	oldest := w.Arrived
	for j, o := range h.Calls {
		if j != i && h.inLane(o, lane, keyed) && h.flow(o) == h.flow(w) && o.Arrived <= w.Arrived+h.Skew && end(o) > oldest {
			oldest = end(o)
		}
	}
	return oldest
}

// checkFair checks the properties of a Fair history.
func (h ThrottleHistory) checkFair() []ThrottleViolation {
	keyed := h.keyed()
	lanes := 1
	if keyed {
		lanes = max(h.Keys, 1)
	}
	var out []ThrottleViolation
	for lane := range lanes {
		out = append(out, h.checkShares(lane, keyed)...)
		out = append(out, h.checkTurns(lane, keyed)...)
		out = append(out, h.checkStarve(lane, keyed)...)
	}
	return out
}

// checkShares finds the spans when every class had a waiter in lane and
// checks each class's part of the lane's admissions in each.
func (h ThrottleHistory) checkShares(lane int, keyed bool) []ThrottleViolation {
	if slices.ContainsFunc(h.Rules, func(l ThrottleRule) bool { return l.Cost != "" }) {
		return nil
	}
	classes := h.classes()
	var out []ThrottleViolation
	from := time.Duration(-1)
	for t := time.Duration(0); t <= h.End+idleStep; t += idleStep {
		all := t <= h.End
		for _, cl := range classes {
			all = all && slices.ContainsFunc(h.Calls, func(c CallRecord) bool {
				return h.inLane(c, lane, keyed) && h.classOf(c) == cl && h.waiting(c, t)
			})
		}
		switch {
		case all && from < 0:
			from = t
		case !all && from >= 0:
			if h.quiet(lane, keyed, from, t) {
				out = append(out, h.shareSpan(lane, keyed, from, t)...)
			}
			from = -1
		}
	}
	return out
}

// shareSpan checks the classes' admissions of lane in [from, to), when
// every class waited.
func (h ThrottleHistory) shareSpan(lane int, keyed bool, from, to time.Duration) []ThrottleViolation {
	by := map[string]int{}
	n := 0
	for _, c := range h.Calls {
		if c.Admitted && !c.Phantom && h.inLane(c, lane, keyed) && c.Decided >= from && c.Decided < to {
			by[h.classOf(c)]++
			n++
		}
	}
	var out []ThrottleViolation
	for _, cl := range h.classes() {
		if want := h.partOf(cl)*n/100 - ShareSlack; by[cl] < want {
			out = append(out, ThrottleViolation{Property: "share", Detail: fmt.Sprintf(
				"lane %d: while every class waited, from %v to %v, class %s (%d%%) got %d of %d admissions, fewer than %d",
				lane, from, to, cl, h.partOf(cl), by[cl], n, want)})
		}
	}
	return out
}

// checkTurns checks that no tenant is admitted twice while another
// tenant of its class has waited Bound.
func (h ThrottleHistory) checkTurns(lane int, keyed bool) []ThrottleViolation {
	var out []ThrottleViolation
	for i, w := range h.Calls {
		if !h.inLane(w, lane, keyed) || w.Phantom {
			continue
		}
		from, to := h.oldestOfFlow(i, lane, keyed)+h.Bound, end(w)
		if from >= to || !h.quiet(lane, keyed, w.Arrived, to) {
			continue
		}
		by := map[string][]time.Duration{}
		for _, c := range h.Calls {
			if c.Admitted && !c.Phantom && h.inLane(c, lane, keyed) && c.Tenant != w.Tenant &&
				h.classOf(c) == h.classOf(w) && c.Decided > from && c.Decided < to {
				by[c.Tenant] = append(by[c.Tenant], c.Decided)
			}
		}
		turns := h.turnsOf(lane, keyed, h.classOf(w)) + h.chargedOf(lane, keyed, w, w.Arrived-h.Bound, to)
		for _, tenant := range slices.Sorted(maps.Keys(by)) {
			if ds := slices.Sorted(slices.Values(by[tenant])); len(ds) > turns {
				out = append(out, ThrottleViolation{Property: "turns", Detail: fmt.Sprintf(
					"lane %d: %v, its tenant's oldest from %v, had waited %v when tenant %q of its class was admitted at %v and %d times more, to %v (at most %d)",
					lane, w, from-h.Bound, h.Bound, tenant, ds[0], len(ds)-1, ds[len(ds)-1], turns)})
				break
			}
		}
	}
	return out
}

// chargedOf returns how many calls of w's flow in lane were admitted at
// once and charged in [from, to).
func (h ThrottleHistory) chargedOf(lane int, keyed bool, w CallRecord, from, to time.Duration) int {
	n := 0
	for _, c := range h.Calls {
		if c.Charged && c.Admitted && !c.Phantom && h.inLane(c, lane, keyed) && h.flow(c) == h.flow(w) &&
			c.Decided >= from && c.Decided < to {
			n++
		}
	}
	return n
}

// turnsOf returns how many times another tenant of class may be admitted
// while a waiter of class in lane waits (turns): once for calls of equal
// cost; else ⌈longest / shortest⌉ of the class's calls' fair intervals,
// since a tenant's turn lasts its last call's interval (docs/throttle.md,
// Classes and tenants: a call of k times the cost takes k turns).
func (h ThrottleHistory) turnsOf(lane int, keyed bool, class string) int {
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for _, c := range h.Calls {
		if h.inLane(c, lane, keyed) && !c.Phantom && h.classOf(c) == class {
			iv := h.interval(c)
			lo, hi = min(lo, iv), max(hi, iv)
		}
	}
	if hi <= 0 || lo <= 0 {
		return 1
	}
	return int((hi + lo - 1) / lo)
}

// interval returns c's fair interval as the throttle reckons it: the
// longest time one of its sliding windows takes to admit its cost again.
func (h ThrottleHistory) interval(c CallRecord) time.Duration {
	var d time.Duration
	for _, l := range h.Rules {
		cost := int64(1)
		if l.Cost != "" {
			cost = max(c.Cost, 1)
		}
		for _, w := range l.Windows {
			if w.Concurrent || w.Calendar != "" || w.Limit <= 0 || w.Period <= 0 {
				continue
			}
			d = max(d, time.Duration(int64(w.Period)*cost/w.Limit))
		}
	}
	return d
}

// checkStarve checks how many calls of other flows pass a waiter once it
// is its flow's oldest.
func (h ThrottleHistory) checkStarve(lane int, keyed bool) []ThrottleViolation {
	var out []ThrottleViolation
	for i, w := range h.Calls {
		if !h.inLane(w, lane, keyed) || w.Phantom {
			continue
		}
		oldest := h.oldestOfFlow(i, lane, keyed)
		from, to := oldest+h.Bound, end(w)
		if from >= to || !h.quiet(lane, keyed, w.Arrived, to) {
			continue
		}
		passed, flows, tenants := 0, map[string]bool{}, map[string]bool{}
		for _, c := range h.Calls {
			// A tenant's finish tag may stay ahead after its waiters left:
			// every tenant of the class seen by then counts.
			if h.inLane(c, lane, keyed) && h.classOf(c) == h.classOf(w) && c.Arrived <= to {
				tenants[c.Tenant] = true
			}
		}
		for _, c := range h.Calls {
			if c.Admitted && !c.Phantom && h.inLane(c, lane, keyed) && h.flow(c) != h.flow(w) && c.Decided > from && c.Decided < to {
				passed++
				flows[h.flow(c)] = true
			}
		}
		bound := 0
		for f := range flows {
			var c CallRecord
			for _, x := range h.Calls {
				if h.flow(x) == f {
					c = x
					break
				}
			}
			ratio := float64(h.partOf(h.classOf(c))) / float64(h.partOf(h.classOf(w)))
			bound += int(math.Ceil(ratio))*len(tenants) + 1 + h.creditOf(h.classOf(c))
		}
		if passed > bound {
			out = append(out, ThrottleViolation{Property: "starve", Detail: fmt.Sprintf(
				"lane %d: %v, its flow's oldest from %v, was passed by %d calls of %d other flows from %v to %v, more than %d",
				lane, w, oldest, passed, len(flows), from, to, bound)})
		}
	}
	return out
}
