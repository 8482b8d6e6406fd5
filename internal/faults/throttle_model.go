package faults

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// ThrottleHistory is what a run of a ThrottleScenario did. Its times are
// offsets from the run's start on the local clock; Redis's TIME, which the
// engine decides by, is read on the same machine (a real Redis and a
// Cluster on loopback, miniredis in the process).
type ThrottleHistory struct {
	Rules []ThrottleRule
	Keys  int
	Calls []CallRecord
	// Losses are the moments Redis lost every key (a restart empty; on a
	// Cluster, any master's: the model takes it for every key).
	Losses []time.Duration `json:",omitempty"`
	// Faults are the moments the fleet's order may break for a while:
	// Redis down or asleep, a decision that met a backend error, a
	// process's death.
	Faults []Span  `json:",omitempty"`
	Deaths []Death `json:",omitempty"`
	// SlotsLost are the moments a process's renewal found a slot of a
	// running call gone (its lease ran out while the process was slow:
	// engine.WithSlotLost). Each lets an in-flight window hold one call
	// more than its limit until such calls end; the model allows it from
	// then on.
	SlotsLost []time.Duration `json:",omitempty"`
	// Peeks are what Redis said of the in-flight windows one lease after
	// a process died (see SlotPeek).
	Peeks  []SlotPeek `json:",omitempty"`
	Blocks []Block    `json:",omitempty"`
	// Lease is the engine's slot lease: a dead process's slots free at
	// most one lease after its death. SlotRetry is how long a head refused
	// for a full in-flight window waits before it asks again, unless a
	// Finish in its process wakes it.
	Lease, SlotRetry time.Duration
	// MaxHold, when not 0, is the longest a Permit holds its slots
	// without Finish (WithMaxHold); 0: as long as its process lives
	// (renewed with every lease).
	MaxHold time.Duration `json:",omitempty"`
	// Bound is how long the fleet's oldest waiter of a lane may wait while
	// its windows have room; Settle how long after a fault the bound does
	// not apply (the fleet lease and a renewal: docs/throttle.md).
	Bound, Settle time.Duration
	// Skew is how far apart arrivals may be and still be in no known
	// order: a process stamps its callers on the Redis clock as it
	// estimates it (off by up to half a round trip), a little after the
	// harness noted them. The fleet's oldest waiter is then any of those
	// that arrived within Skew of the oldest.
	Skew time.Duration `json:",omitempty"`
	// Transit is the processes' transit bound: each admission counts
	// that much longer in the throttle's sliding windows, and reaches the
	// upstream within it (CallRecord.Transit).
	Transit time.Duration `json:",omitempty"`
	// Shares are the throttle's shares; Fair marks a history whose calls
	// are served by classes and tenants (throttle_fair.go).
	Shares []ThrottleShare `json:",omitempty"`
	Fair   bool            `json:",omitempty"`
	End    time.Duration
}

// Span is a time interval [From, To] of a history.
type Span struct {
	From, To time.Duration
	Why      string
}

// Death is the moment process Proc (an incarnation) died.
type Death struct {
	Proc int
	At   time.Duration
}

// Block is a learned block of the lane of key Key: the upstream's 429
// arrived at From and asked to wait until To.
type Block struct {
	Key      int
	From, To time.Duration
}

// SlotPeek is a look at the slots of rule Rule's subject Subject
// (-1: global) at At: Used of them were live in Redis.
type SlotPeek struct {
	At      time.Duration
	Rule    int
	Subject int
	Used    int64
}

// CallRecord is one call of a history.
type CallRecord struct {
	Step    int
	Proc    int // the process incarnation
	Key     int
	Cost    int64
	Actual  int64         // the settled cost, -1 for none
	Arrived time.Duration // Wait was called
	Ended   time.Duration // Wait returned
	// Admitted marks a call Redis admitted at Decided (its decision time,
	// Redis's clock) and the harness's upstream saw at Upstream (-1:
	// never, its process died first).
	Admitted bool
	Decided  time.Duration
	Upstream time.Duration
	// Transit is the call's transit, in [0, ThrottleHistory.Transit): the
	// upstream counts the call at Decided+Transit.
	Transit time.Duration `json:",omitempty"`
	// Finished is when Permit.Finish was called (or the body closed); 0:
	// never (dropped, or its process died first).
	Finished time.Duration
	// Phantom marks an admission the caller never got: its context ended
	// as it was admitted, and Wait gave it back.
	Phantom bool `json:",omitempty"`
	// Class and Tenant are the call's.
	Class  string `json:",omitempty"`
	Tenant string `json:",omitempty"`
	// Spread bounds how far from Decided the time a rule's key was
	// decided at may lie: 0 on one Redis (one script, one TIME); on a
	// Cluster, whose keys of one call may live on several masters, each
	// reading its own TIME during the call, the call's duration.
	Spread time.Duration `json:",omitempty"`
	// Charged marks an admission at once, untagged, while calls of its
	// lane waited (Permit.Charged in internal/throttle): it took its
	// flow's next turn ahead of its place in the round (checkTurns). The
	// harness knows it for Wait's calls, not for the Transport's.
	Charged bool `json:",omitempty"`
}

func (c CallRecord) String() string {
	s := fmt.Sprintf("step %d p%d k%d", c.Step, c.Proc, c.Key)
	if c.Cost > 0 {
		s += fmt.Sprintf(" $%d", c.Cost)
	}
	s += fmt.Sprintf(" arrived %v", c.Arrived)
	switch {
	case c.Phantom:
		s += fmt.Sprintf(", admitted at %v as its context ended (given back)", c.Decided)
	case c.Admitted:
		s += fmt.Sprintf(", admitted at %v, upstream at %v", c.Decided, c.Upstream)
		if c.Charged {
			s += " (at once, charged)"
		}
	default:
		s += fmt.Sprintf(", gave up at %v", c.Ended)
	}
	if c.Class != "" || c.Tenant != "" {
		s += fmt.Sprintf(" [%s/%s]", c.Class, c.Tenant)
	}
	if c.Finished > 0 {
		s += fmt.Sprintf(", finished at %v", c.Finished)
		if c.Actual >= 0 {
			s += fmt.Sprintf(" settled to %d", c.Actual)
		}
	} else if c.Admitted && !c.Phantom {
		s += ", never finished"
	}
	return s
}

// ThrottleViolation is a property a throttle's history broke.
type ThrottleViolation struct {
	Property string // "window", "slots", "idle"
	Detail   string
}

func (v ThrottleViolation) String() string { return v.Property + ": " + v.Detail }

// ThrottleReport is what CheckThrottle found: violations and the longest
// wait of an oldest waiter with room outside the periods after faults.
type ThrottleReport struct {
	Violations  []ThrottleViolation
	LongestIdle time.Duration
	Longest     string // which waiter waited LongestIdle, and since when
}

// CheckThrottle checks a throttle's history against its properties:
//
//   - window: no span of a sliding window's period plus Transit holds
//     more of a subject's admissions than its limit, per epoch between
//     losses of Redis's data (a span holding k losses may hold (k+1)·L),
//     by the decision times (within their Spread); and no span of the
//     period itself does by the arrivals at the upstream, each call's
//     decision plus its transit (docs/throttle.md, Transit bound);
//   - slots: at every admission at most N admissions of the epoch hold a
//     slot of an N concurrent window (from admission to Finish; a dead
//     process's slots until two thirds of a lease after its death, the
//     earliest their last renewal can end), one more per slot lost before;
//   - lease: a look at an in-flight window's slots in Redis a lease after
//     a process died finds no more live slots than the calls of live
//     processes hold (admitted, not finished Bound before), and the dead
//     process's whose lease cannot have ended: no slot outlives its
//     holder's lease;
//   - idle: the fleet's oldest waiter of a lane (any arrived within Skew
//     of the oldest, all of which must have room) whose windows have room
//     (by what the history admitted in each period plus Transit, counting
//     each call at the larger of its estimate and its settlement, a dead
//     process's slots held a full lease) and, in a paced history (one
//     with shares), whose lane's next slot has come (slotted), is
//     admitted within Bound, or within SlotRetry+Bound when the room came
//     from a dead holder's lease ending; except during Settle after a
//     fault.
func CheckThrottle(h ThrottleHistory) ThrottleReport {
	var rep ThrottleReport
	for li, l := range h.Rules {
		for _, s := range h.subjects(l) {
			for _, w := range l.Windows {
				if w.Concurrent {
					rep.Violations = append(rep.Violations, h.checkSlots(li, s, w)...)
					continue
				}
				rep.Violations = append(rep.Violations, h.checkWindow(li, s, w)...)
			}
		}
	}
	rep.Violations = append(rep.Violations, h.checkPeeks()...)
	if h.Fair {
		rep.Violations = append(rep.Violations, h.checkFair()...)
	}
	vs, longest, which := h.checkIdle()
	rep.Violations = append(rep.Violations, vs...)
	rep.LongestIdle, rep.Longest = longest, which
	return rep
}

// subjects returns the subjects of rule l: the key values of a key(k)
// rule, -1 for a global one.
func (h ThrottleHistory) subjects(l ThrottleRule) []int {
	if !l.Key {
		return []int{-1}
	}
	var out []int
	for k := range max(h.Keys, 1) {
		out = append(out, k)
	}
	return out
}

// in reports whether call c counts in rule l's subject s.
func in(c CallRecord, l ThrottleRule, s int) bool { return !l.Key || c.Key == s }

// low is what c counts in l at the least: its estimate, or its settlement
// when lower (one that raises it is a debt the windows may exceed by).
func low(c CallRecord, l ThrottleRule) int64 {
	if l.Cost == "" {
		return 1
	}
	if c.Finished > 0 && c.Actual >= 0 {
		return min(c.Cost, c.Actual)
	}
	return c.Cost
}

// high is what c counts in l at the most.
func high(c CallRecord, l ThrottleRule) int64 {
	if l.Cost == "" {
		return 1
	}
	if c.Finished > 0 && c.Actual >= 0 {
		return max(c.Cost, c.Actual)
	}
	return c.Cost
}

// epoch returns the number of losses before decision time at.
func (h ThrottleHistory) epoch(at time.Duration) int {
	n := 0
	for _, l := range h.Losses {
		if l < at {
			n++
		}
	}
	return n
}

func (h ThrottleHistory) checkWindow(li int, s int, w Window) []ThrottleViolation {
	l := h.Rules[li]
	var cs []CallRecord
	for _, c := range h.Calls {
		if c.Admitted && !c.Phantom && in(c, l, s) {
			cs = append(cs, c)
		}
	}
	seen := func(c CallRecord, view string) bool { return view == "redis" || c.Upstream >= 0 }
	at := func(c CallRecord, view string) time.Duration {
		if view == "upstream" {
			return c.Decided + c.Transit
		}
		return c.Decided
	}
	name := fmt.Sprintf("limiter %v subject %d window %v", l, s, w)
	for _, view := range []string{"redis", "upstream"} {
		span := w.Period + h.Transit // the throttle keeps each admission the transit bound longer
		if view == "upstream" {
			span = w.Period
		}
		for _, end := range cs {
			if !seen(end, view) {
				continue
			}
			t := at(end, view)
			byEpoch := map[int]int64{}
			for _, c := range cs {
				if a := at(c, view); !seen(c, view) || a <= t-span || a > t {
					continue
				}
				if a := at(c, view); a-c.Spread <= t+end.Spread-span {
					continue // perhaps out of the span by its master's clock
				}
				byEpoch[h.epoch(c.Decided)] += low(c, l)
			}
			for e, n := range byEpoch {
				if n > w.Limit {
					return []ThrottleViolation{{Property: "window", Detail: fmt.Sprintf(
						"%s: %d in (%v, %v] by the %s's clock, epoch %d, limit %d", name, n, t-span, t, view, e, w.Limit)}}
				}
			}
		}
	}
	return nil
}

// deathOf returns when proc died, or -1.
func (h ThrottleHistory) deathOf(proc int) time.Duration {
	for _, d := range h.Deaths {
		if d.Proc == proc {
			return d.At
		}
	}
	return -1
}

// releaseLow returns the earliest c's slot may have freed in Redis: its
// Finish, two thirds of a lease after its process died (its last renewal
// was at most a third of a lease before), or the longest hold after its
// admission (the hold's timer starts once the decision is back).
func (h ThrottleHistory) releaseLow(c CallRecord) time.Duration {
	end := time.Duration(math.MaxInt64)
	if c.Finished > 0 {
		end = c.Finished
	}
	if d := h.deathOf(c.Proc); d >= 0 {
		end = min(end, d+h.Lease*2/3)
	}
	if h.MaxHold > 0 {
		end = min(end, c.Decided+h.MaxHold)
	}
	return end
}

// releaseHigh returns the latest c's slot may free in Redis, and whether it
// is a lease or the longest hold that ends it (no Finish wakes the fleet's
// head then).
func (h ThrottleHistory) releaseHigh(c CallRecord) (time.Duration, bool) {
	end, expiry := time.Duration(math.MaxInt64), false
	if d := h.deathOf(c.Proc); d >= 0 {
		end, expiry = d+h.Lease, true
	}
	if h.MaxHold > 0 && c.Decided+h.MaxHold < end {
		end, expiry = c.Decided+h.MaxHold, true
	}
	if c.Finished > 0 && c.Finished < end {
		end, expiry = c.Finished, false
	}
	return end, expiry
}

func (h ThrottleHistory) checkSlots(li int, s int, w Window) []ThrottleViolation {
	l := h.Rules[li]
	for i, c := range h.Calls {
		if !c.Admitted || c.Phantom || !in(c, l, s) {
			continue
		}
		var holders []string
		for j, o := range h.Calls {
			if !o.Admitted || o.Phantom || !in(o, l, s) || h.epoch(o.Decided) != h.epoch(c.Decided) {
				continue
			}
			if i == j || o.Decided <= c.Decided && h.releaseLow(o) > c.Decided {
				holders = append(holders, o.String())
			}
		}
		lost := 0
		for _, at := range h.SlotsLost {
			if at <= c.Decided {
				lost++
			}
		}
		if int64(len(holders)) > w.Limit+int64(lost) {
			return []ThrottleViolation{{Property: "slots", Detail: fmt.Sprintf("limiter %v subject %d: %d calls held a slot of %v at %v: %v",
				l, s, len(holders), w, c.Decided, holders)}}
		}
	}
	return nil
}

// idleStep is the grid the idle property samples a history on.
const idleStep = 5 * time.Millisecond

// checkIdle samples the history every idleStep: at each moment, for each
// lane, the oldest caller waiting (alive, arrived, not yet admitted nor
// gone), whether its windows have room for it, and how long that has
// lasted. In a Fair history the lane's next call is any waiter's: the
// lane must admit someone within Bound while all its waiters have room.
func (h ThrottleHistory) checkIdle() ([]ThrottleViolation, time.Duration, string) {
	keyed := false
	for _, l := range h.Rules {
		keyed = keyed || l.Key
	}
	lanes := 1
	if keyed {
		lanes = max(h.Keys, 1)
	}
	var out []ThrottleViolation
	var longest time.Duration
	var which string
	paced := map[int]time.Duration{} // paceAfter by admission
	for lane := range lanes {
		run := -1 // the waiter of the run, an index in h.Calls
		var since time.Duration
		reported := map[int]bool{}
		for t := time.Duration(0); t <= h.End; t += idleStep {
			w := h.oldest(lane, keyed, t)
			if w < 0 || h.excluded(t) || !h.roomAll(w, keyed, t) || !h.slotted(lane, keyed, t, paced) {
				run = -1
				continue
			}
			id := w
			if h.Fair {
				// Any waiter may be next: the run lasts until the lane
				// admits anyone.
				id = len(h.Calls) + h.admittedBy(lane, keyed, t)
			}
			if id != run {
				run, since = id, t
			}
			waited := t - since
			allowed := h.Bound
			if h.expiredNear(h.Calls[w], since) {
				allowed += h.SlotRetry
			} else if waited > longest {
				longest = waited
				which = fmt.Sprintf("lane %d: %v, room from %v", lane, h.Calls[w], since)
			}
			if waited > allowed && !reported[run] {
				reported[run] = true
				out = append(out, ThrottleViolation{Property: "idle", Detail: fmt.Sprintf(
					"lane %d: the oldest waiter (%v) had room from %v and was still waiting at %v (%v, bound %v)",
					lane, h.Calls[w], since, t, waited, allowed)})
			}
		}
	}
	return out, longest, which
}

// PaceFactor is the spacing of a paced lane's admissions as a part of the
// fair interval of its tightest sliding window of calls (docs/throttle.md,
// Pacing): internal/throttle's, which its TestModelConstants keeps equal.
const PaceFactor = 0.95

// slotted reports whether a paced lane's next slot has come at t. A
// throttle with shares is paced (docs/throttle.md, Pacing): after the
// lane's last admission, at a, its next head asks no later than a plus the
// longest, over the sliding windows of calls of its rules, of PaceFactor
// times the window's fair interval and of the time until the window's
// oldest entry leaves over the calls it has room for left, plus one. A
// history without shares is not paced.
// paced caches paceAfter by the index of the admission.
func (h ThrottleHistory) slotted(lane int, keyed bool, t time.Duration, paced map[int]time.Duration) bool {
	if len(h.Shares) == 0 {
		return true
	}
	last := -1
	for i, c := range h.Calls {
		if c.Admitted && (!keyed || c.Key == lane) && c.Decided <= t &&
			(last < 0 || c.Decided > h.Calls[last].Decided) {
			last = i
		}
	}
	if last < 0 {
		return true
	}
	d, ok := paced[last]
	if !ok {
		d = h.paceAfter(h.Calls[last])
		paced[last] = d
	}
	return t >= h.Calls[last].Decided+d
}

// paceAfter returns the longest a paced lane waits after admitting a, by
// slotted's rule.
func (h ThrottleHistory) paceAfter(a CallRecord) time.Duration {
	var d time.Duration
	for _, l := range h.Rules {
		if l.Cost != "" {
			continue // estimates are not paced
		}
		s := -1
		if l.Key {
			s = a.Key
		}
		for _, win := range l.Windows {
			if win.Concurrent || win.Calendar != "" || win.Period <= 0 || win.Limit <= 0 {
				continue
			}
			d = max(d, time.Duration(PaceFactor*float64(win.Period)/float64(win.Limit)))
			span := win.Period + h.Transit
			var used int64
			oldest := a.Decided
			for _, c := range h.Calls {
				if c.Admitted && in(c, l, s) && c.Decided > a.Decided-span-a.Spread && c.Decided <= a.Decided {
					used += high(c, l)
					oldest = min(oldest, c.Decided)
				}
			}
			if left := win.Limit - used; left >= 0 {
				d = max(d, (oldest+span+a.Spread-a.Decided)/time.Duration(left+1))
			}
		}
	}
	return d
}

// oldest returns the index of the lane's oldest waiter at t, or -1.
func (h ThrottleHistory) oldest(lane int, keyed bool, t time.Duration) int {
	best := -1
	for i, c := range h.Calls {
		if keyed && c.Key != lane {
			continue
		}
		if !h.waiting(c, t) {
			continue
		}
		if best < 0 || c.Arrived < h.Calls[best].Arrived {
			best = i
		}
	}
	return best
}

// roomAll reports whether every waiter that may be the fleet's oldest at
// t has room: w, the oldest by the harness's clock, and the waiters of its
// lane that arrived within Skew after it. The fleet serves one of them
// first, which may wait for room while the others have it. In a Fair
// history any waiter of the lane may be served first: all must have room.
func (h ThrottleHistory) roomAll(w int, keyed bool, t time.Duration) bool {
	o := h.Calls[w]
	for i, c := range h.Calls {
		if i != w && (keyed && c.Key != o.Key || !h.Fair && c.Arrived > o.Arrived+h.Skew || !h.waiting(c, t)) {
			continue
		}
		if !h.room(c, keyed, t) {
			return false
		}
	}
	return true
}

// waiting reports whether c waits at t: arrived, neither admitted nor gone.
func (h ThrottleHistory) waiting(c CallRecord, t time.Duration) bool {
	end := c.Ended
	if c.Admitted {
		end = min(end, c.Decided)
	}
	return c.Arrived <= t && t < end
}

// excluded reports whether t lies within Settle after a fault.
func (h ThrottleHistory) excluded(t time.Duration) bool {
	for _, f := range h.Faults {
		if t >= f.From && t <= f.To+h.Settle {
			return true
		}
	}
	return false
}

// room reports whether every window of w's lane surely has room for w at
// t, and no learned block holds the lane.
func (h ThrottleHistory) room(w CallRecord, keyed bool, t time.Duration) bool {
	for _, b := range h.Blocks {
		if (!keyed || b.Key == w.Key) && t >= b.From && t < b.To {
			return false
		}
	}
	for _, l := range h.Rules {
		s := -1
		if l.Key {
			s = w.Key
		}
		cost := int64(1)
		if l.Cost != "" {
			cost = w.Cost
		}
		for _, win := range l.Windows {
			var used int64
			for _, c := range h.Calls {
				if !c.Admitted || !in(c, l, s) {
					continue
				}
				if win.Concurrent {
					if end, _ := h.releaseHigh(c); !c.Phantom && c.Decided <= t && t < end {
						used++
					}
				} else if c.Decided > t-win.Period-h.Transit && c.Decided <= t {
					used += high(c, l)
				}
			}
			if win.Concurrent && used >= win.Limit || !win.Concurrent && used+cost > win.Limit {
				return false
			}
		}
	}
	return true
}

// expiredNear reports whether a slot of w's subjects freed by a lease (or
// the longest hold) within SlotRetry before since: the head refused for it
// asks again SlotRetry after its refusal.
func (h ThrottleHistory) expiredNear(w CallRecord, since time.Duration) bool {
	for _, l := range h.Rules {
		if !slices.ContainsFunc(l.Windows, func(x Window) bool { return x.Concurrent }) {
			continue
		}
		s := -1
		if l.Key {
			s = w.Key
		}
		for _, c := range h.Calls {
			if !c.Admitted || c.Phantom || !in(c, l, s) {
				continue
			}
			if end, lease := h.releaseHigh(c); lease && end <= since && end > since-h.SlotRetry-h.Bound {
				return true
			}
		}
	}
	return false
}

// checkPeeks checks each SlotPeek against the calls that may hold a slot
// then: admitted by then, and not finished (or given back) more than
// Bound before (a Finish leaves within milliseconds), nor of a process dead
// for a lease (its last renewal was before its death).
func (h ThrottleHistory) checkPeeks() []ThrottleViolation {
	var out []ThrottleViolation
	for _, p := range h.Peeks {
		if p.Rule < 0 || p.Rule >= len(h.Rules) {
			continue
		}
		l := h.Rules[p.Rule]
		var may int64
		for _, c := range h.Calls {
			if !c.Admitted || !in(c, l, p.Subject) || c.Decided-c.Spread > p.At {
				continue
			}
			end, lease := h.releaseHigh(c)
			if c.Phantom {
				end = c.Ended
			}
			if !lease && end < math.MaxInt64-h.Bound {
				end += h.Bound // a Finish or give-back leaves within milliseconds
			}
			if end > p.At {
				may++
			}
		}
		if p.Used > may {
			out = append(out, ThrottleViolation{Property: "lease", Detail: fmt.Sprintf(
				"limiter %v subject %d: Redis held %d live slots at %v, the calls account for %d at most: a slot outlived its holder's lease",
				l, p.Subject, p.Used, p.At, may)})
		}
	}
	return out
}
