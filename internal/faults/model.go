// Package faults is the fault harness's reference: a model of what the
// windows of a rule group may hold under faults, a generator of seeded
// histories (requests from several engines, clock steps, outcomes and
// faults), and a shrinker that reduces a failing history.
//
// The model shares no code with the engine. It reads a history of
// decisions, each tagged with the process that made it and who decided
// (Redis, the process's cache, its local fallback, or its fail mode),
// and the moments Redis lost data. From these alone it bounds, for every
// subject, window and span of that window's period, how many admissions
// the span may hold, following docs/operations.md (Fail modes) and
// docs/engine.md (Redis configuration):
//
//   - Redis admits at most L in any span of a window while it keeps its
//     data; a loss (a restart without persistence, an eviction, a failover
//     that loses writes) starts afresh, so a span that holds k losses may
//     hold (k+1)·L admissions of Redis.
//   - A process's local fallback starts each subject from what Redis last
//     told it: the entries Redis held then count against the fallback in
//     every span that still holds them, so a full subject gets 0 more, a
//     subject with k of L used at most L-k more, and a subject the process
//     never asked Redis about at most L, in every span. Of the answers of
//     one step (concurrent calls), which Redis decides in any order, the
//     one with the most entries counts.
//   - Fail-open admissions are not bounded; fail-closed admits nothing.
//   - A calendar window is bounded the same way over each calendar day
//     (see credit for what a counter without members adds), and a block:
//     by checkBlocks.
package faults

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Window is a sliding window of a rule group: at most Limit admissions in
// any span of Period.
type Window struct {
	Limit  int64
	Period time.Duration
	// Concurrent makes it an in-flight window ("N concurrent"): at most
	// Limit admissions holding a slot at once, from admission to release.
	Concurrent bool `json:",omitempty"`
	// Calendar ("day") makes it a calendar window: at most Limit
	// admissions since the start of the current calendar day in the
	// history's zone (docs/rules.md, Calendar windows). Period is zero.
	Calendar string `json:",omitempty"`
}

func (w Window) String() string {
	if w.Concurrent {
		return fmt.Sprintf("%d concurrent", w.Limit)
	}
	if w.Calendar != "" {
		return fmt.Sprintf("%d/calendar %s", w.Limit, w.Calendar)
	}
	return fmt.Sprintf("%d/%v", w.Limit, w.Period)
}

// Source says who made a decision.
type Source uint8

// Sources of a Decision.
const (
	Redis      Source = iota // Redis decided
	Cache                    // the process denied from what Redis last said
	Local                    // the local fallback decided (fail:local)
	FailOpen                 // admitted because Redis failed (fail:open)
	FailClosed               // denied because Redis failed (fail:closed)
)

var sourceNames = [...]string{"redis", "cache", "local", "fail-open", "fail-closed"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return fmt.Sprintf("source(%d)", s)
}

// Decision is one decision of the history.
type Decision struct {
	// Step orders events: a decision of a later step happened after every
	// event of an earlier one; decisions of one step ran concurrently.
	Step int
	// At is the decision time (the clock's, from the start of the history).
	At      time.Duration
	Proc    int // the process (engine incarnation) that decided
	Subject string
	Allowed bool
	Source  Source
	// GivenBack marks an admission that was given back (or whose give-back
	// was attempted and may have been applied): it counts nowhere. The
	// engine ignores a give-back of an admission settled before it (see
	// settledFirst).
	GivenBack bool
	// Unsure marks a give-back or settlement that failed: Redis may still
	// hold the entry as it was.
	Unsure bool
	// Cost is the units the request was admitted for (0 counts 1).
	Cost int64
	// Settled marks an admission settled to Actual units.
	Settled bool
	Actual  int64
	// Back is the step that gave the admission back or settled it (the
	// first), 0 if none did.
	Back int `json:",omitempty"`
	// Value is the request's distinct: value, in a group with Distinct.
	Value string
	// Released is the step that released the admission's slots (a
	// release or a give-back, even one that failed), 0 if none did: a
	// process that dies holds them until its lease ends.
	Released int
	// Limits are the limits the request was checked against, by window of
	// the history (see limitOf): a limit function's value ($name), a
	// rule override pushed at run time, a role's rules. Nil: the
	// windows' own.
	Limits []int64 `json:",omitempty"`
	// Resets are the Reset a Redis decision reported for each window of
	// the history, in its order; nil when not recorded (see checkResets).
	Resets []time.Duration `json:",omitempty"`
}

// Loss is a moment Redis lost data: every entry stored before it is gone,
// of every subject or, on a cluster, of the subjects of one master.
type Loss struct {
	Step     int
	At       time.Duration
	Why      string
	Subjects []string // nil: every subject
	// Maybe marks a loss that may have taken some entries or none (an
	// eviction, a failover whose replica may have every write): a loss
	// for the bounds, none for Held.
	Maybe bool `json:",omitempty"`
}

// hits reports whether the loss took subject s's entries.
func (l Loss) hits(s string) bool { return l.Subjects == nil || slices.Contains(l.Subjects, s) }

// of returns h with only the losses that hit subject s.
func (h History) of(s string) History {
	out := h
	out.Losses = nil
	for _, l := range h.Losses {
		if l.hits(s) {
			out.Losses = append(out.Losses, l)
		}
	}
	return out
}

// History is what a run did to one rule group.
type History struct {
	Windows []Window
	Fail    string // "local", "open" or "closed"
	// Distinct makes the group count distinct values (distinct:): a
	// value counts at its first admission, and again at one that finds
	// its last count older than the shortest window.
	Distinct  bool
	Decisions []Decision
	Losses    []Loss
	// Block is the group's block: length (0: none): a denial starts a
	// block of the subject, during which it is denied (docs/rules.md,
	// Blocks).
	Block time.Duration `json:",omitempty"`
	// Origin is the time a decision's At counts from, and Zone the zone of
	// the calendar windows (nil: UTC).
	Origin time.Time
	Zone   *time.Location
}

// periodOf returns the start of the calendar day holding at, in the
// history's zone, as an offset from Origin. Days start at local midnight,
// computed by the wall clock (docs/rules.md): a day may last 23 or 25 hours.
func (h History) periodOf(at time.Duration) time.Duration {
	zone := h.Zone
	if zone == nil {
		zone = time.UTC
	}
	t := h.Origin.Add(at).In(zone)
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, zone).Sub(h.Origin)
}

// within reports whether an entry made at r still counts in window w at
// time at (r <= at): within the period before at for a sliding window, in
// the same calendar period for a calendar window.
func (h History) within(w Window, r, at time.Duration) bool {
	if w.Calendar != "" {
		return h.periodOf(r) == h.periodOf(at)
	}
	return r > at-w.Period
}

// Violation is a span that held more admissions than the model allows,
// or a decision its source could not have made.
type Violation struct {
	Subject string
	Window  Window
	From    time.Duration // the span (From, To]
	To      time.Duration
	Count   int64
	Bound   int64
	Detail  string
}

func (v Violation) String() string {
	if v.Window.Limit == 0 {
		return fmt.Sprintf("subject %s: %s", v.Subject, v.Detail)
	}
	return fmt.Sprintf("subject %s, window %v: %d admissions in (%v, %v], bound %d (%s)",
		v.Subject, v.Window, v.Count, v.From, v.To, v.Bound, v.Detail)
}

// Check returns every violation of h: decisions their source could not have
// made, and spans holding more admissions than the model's bound.
func Check(h History) []Violation {
	h = settledFirst(h)
	var out []Violation
	for _, d := range h.Decisions {
		if why := badSource(h.Fail, d); why != "" {
			out = append(out, Violation{Subject: d.Subject, Detail: fmt.Sprintf("step %d, proc %d at %v: %s", d.Step, d.Proc, d.At, why)})
		}
	}
	subjects := map[string][]Decision{}
	var names []string
	for _, d := range h.Decisions {
		if subjects[d.Subject] == nil {
			names = append(names, d.Subject)
		}
		subjects[d.Subject] = append(subjects[d.Subject], d)
	}
	slices.Sort(names)
	for _, s := range names {
		if h.Block > 0 {
			if v, ok := checkBlocks(h.of(s), subjects[s]); !ok {
				v.Subject = s
				out = append(out, v)
			}
		}
		if h.Block == 0 {
			if v, ok := checkResets(h.of(s), subjects[s]); !ok {
				v.Subject = s
				out = append(out, v)
			}
		}
		for wi, w := range h.Windows {
			hs := h.of(s)
			if w.Concurrent {
				if v, ok := checkSlots(hs, subjects[s], wi); !ok {
					v.Subject = s
					out = append(out, v)
				}
				continue
			}
			if v, ok := checkWindow(hs, subjects[s], weights(hs, subjects[s]), wi); !ok {
				v.Subject = s
				out = append(out, v)
			}
		}
	}
	return out
}

// checkResets checks the Reset each Redis decision of one subject's ds
// reported for the history's sliding windows (engine.WindowState): at
// most the period, and, when Redis surely holds an entry in the window,
// never before the oldest entry it could hold leaves, so that a client
// waiting Reset is never early. Redis surely holds the decision's own
// admission and an earlier step's Redis admission that was neither given
// back, settled nor lost since; it could hold any admission by Redis or
// the fallback within the period, of the same step too. A block (not
// checked here) may stretch a Reset beyond the period.
func checkResets(h History, ds []Decision) (Violation, bool) {
	for i, d := range ds {
		if d.Source != Redis || len(d.Resets) != len(h.Windows) {
			continue
		}
		for wi, w := range h.Windows {
			if w.Concurrent || w.Calendar != "" {
				continue
			}
			least, sure := w.Period, false
			for j, e := range ds {
				if !e.Allowed || e.Source != Redis && e.Source != Local || e.Step > d.Step || e.At <= d.At-w.Period {
					continue
				}
				least = min(least, e.At+w.Period-d.At)
				sure = sure || e.Source == Redis && (j == i || e.Step < d.Step && !e.GivenBack && !e.Settled && !lostBetween(h, e.Step, d.Step))
			}
			if !sure {
				least = 0 // Redis may hold nothing there
			}
			if got := d.Resets[wi]; got > w.Period || got < least {
				return Violation{Detail: fmt.Sprintf("step %d, proc %d at %v: window %v reported Reset %v, want within [%v, %v]",
					d.Step, d.Proc, d.At, w, got, least, w.Period)}, false
			}
		}
	}
	return Violation{}, true
}

// badSource says why a decision could not come from its source under the
// group's fail mode, or "".
func badSource(fail string, d Decision) string {
	switch {
	case d.Source == Cache && d.Allowed:
		return "admitted from the cache, which only denies"
	case d.Source == FailClosed && d.Allowed:
		return "admitted by fail:closed"
	case d.Source == FailOpen && !d.Allowed:
		return "denied by fail:open"
	case d.Source == Local && fail != "local",
		d.Source == FailOpen && fail != "open",
		d.Source == FailClosed && fail != "closed":
		return fmt.Sprintf("decided by %v under fail:%s", d.Source, fail)
	}
	return ""
}

// counted reports whether an admission counts against the windows: fail-open
// admissions are unbounded, and given-back ones count nowhere.
func counted(d Decision) bool {
	return d.Allowed && !d.GivenBack && (d.Source == Redis || d.Source == Local)
}

// units returns what an admission counts: its cost, or what it was settled
// to when less (a settlement that adds is a debt docs/engine.md lets exceed
// the limit).
func units(d Decision) int64 {
	n := max(d.Cost, 1)
	if d.Settled {
		n = min(n, max(d.Actual, 0))
	}
	return n
}

// weights returns what each decision of one subject's ds counts against the
// bounds: the units of an admission that counts, 0 for the rest. With
// Distinct, a Redis admission counts 1 when it counts its value (its first
// since the last loss, or one finding its last count older than the
// shortest window), given back or not (a give-back leaves the value
// counted); a local one counts 1, as the fallback counts requests.
func weights(h History, ds []Decision) []int64 {
	ws := make([]int64, len(ds))
	if !h.Distinct {
		for i, d := range ds {
			if counted(d) {
				ws[i] = units(d)
			}
		}
		return ws
	}
	shortest := time.Duration(1<<63 - 1)
	for _, w := range h.Windows {
		if !w.Concurrent && w.Calendar == "" {
			shortest = min(shortest, w.Period)
		}
	}
	type count struct {
		at   time.Duration
		step int
	}
	last := map[string]count{}
	for i, d := range ds {
		switch {
		case !d.Allowed:
		case d.Source == Local && !d.GivenBack:
			ws[i] = 1
		case d.Source == Redis:
			c, ok := last[d.Value]
			if !ok || c.at <= d.At-shortest || lostBetween(h, c.step, d.Step) {
				ws[i] = 1
				last[d.Value] = count{d.At, d.Step}
			}
		}
	}
	return ws
}

// checkWindow checks every span (t-W, t] of one subject's decisions ds in
// window w. Counts and bounds change only where a span's end reaches an event
// (it enters) or passes it by W (it leaves), so those ends are all it checks.
// Redis's admissions and each fallback episode's are bounded separately
// (each bound holds whatever the others did), which implies the total the
// docs state: (losses+1)·L plus the sum of the episodes' allowances.
//
// L is the limit each admission was checked against (see limitOf): an
// admission of Redis is justified when the admissions before it in the
// span, itself included, are at most its own limit, and one of a
// fallback when its episode's are at most its limit less what Redis held.
func checkWindow(h History, ds []Decision, ws []int64, wi int) (Violation, bool) {
	w := h.Windows[wi]
	var ends []time.Duration
	for _, d := range ds {
		ends = append(ends, d.At, d.At+w.Period)
	}
	for _, l := range h.Losses {
		ends = append(ends, l.At, l.At+w.Period)
	}
	slices.Sort(ends)
	ends = slices.Compact(ends)
	for _, t := range ends {
		sp := newSpan(h, ds, ws, wi, t)
		count, floor := sp.count()
		if count <= floor {
			continue // every bound is at least the smallest L
		}
		v := Violation{Window: w, From: sp.from, To: t, Count: count}
		r, ok := sp.checkRedis(&v)
		if !ok {
			return v, false
		}
		local, ok := sp.checkLocal(&v)
		if !ok {
			return v, false
		}
		if bound := r.epochs*r.most + r.credits + local; count > bound {
			// Implied by the bounds above; kept as the docs' statement.
			v.Bound = bound
			v.Detail = fmt.Sprintf("%d Redis epoch(s), calendar credit %d, local allowance %d", r.epochs, r.credits, local)
			return v, false
		}
	}
	return Violation{}, true
}

// A span is one window's span of one subject's decisions, ending at t, as
// checkWindow checks it.
type span struct {
	h    History
	ds   []Decision
	ws   []int64
	wi   int
	w    Window
	from time.Duration
	in   func(at time.Duration) bool // whether an event at at lies in the span
}

// newSpan returns window wi's span ending at t. A calendar window's span
// is its period up to t: its count only grows within a period, so the
// decisions' times are ends enough.
func newSpan(h History, ds []Decision, ws []int64, wi int, t time.Duration) span {
	w := h.Windows[wi]
	sp := span{h: h, ds: ds, ws: ws, wi: wi, w: w, from: t - w.Period}
	sp.in = func(at time.Duration) bool { return at > t-w.Period && at <= t }
	if w.Calendar != "" {
		sp.from = h.periodOf(t)
		sp.in = func(at time.Duration) bool { return at <= t && h.periodOf(at) == sp.from }
	}
	return sp
}

// lim is the limit d was checked against (see limitOf).
func (sp span) lim(d Decision) int64 { return sp.h.limitOf(d, sp.wi) }

// once reports whether d counts in the span, noting it in seen. With
// Distinct, a window holds each value once, whatever the number of its
// counts inside it: a value counted again (older than the shortest window)
// is still one value in a longer one.
func (sp span) once(seen map[string]bool, d Decision) bool {
	if !sp.h.Distinct || d.Source != Redis {
		return true
	}
	k := fmt.Sprint(epochOf(sp.h, d.Step), "/", d.Value)
	if seen[k] {
		return false
	}
	seen[k] = true
	return true
}

// count returns the units the span holds and the smallest limit of its
// admissions.
func (sp span) count() (count, floor int64) {
	floor = int64(1<<63 - 1)
	seen := map[string]bool{}
	for i, d := range sp.ds {
		if sp.in(d.At) && sp.ws[i] > 0 && sp.once(seen, d) {
			count += sp.ws[i]
			floor = min(floor, sp.lim(d))
		}
	}
	return count, floor
}

// redisBound is what Redis's admissions of a span may hold together: the
// epochs between losses, the largest limit checked, and calendar credits.
type redisBound struct{ epochs, most, credits int64 }

// checkRedis checks Redis's admissions of the span: at most L per epoch
// between losses. It fills v and reports false on a violation.
func (sp span) checkRedis(v *Violation) (redisBound, bool) {
	h, ds, ws, w := sp.h, sp.ds, sp.ws, sp.w
	b := redisBound{epochs: 1}
	var epoch int64
	var last int64 // calendar credits of this epoch
	prev := -1     // the step of the span's previous Redis admission
	seen := map[string]bool{}
	rlim := func(d Decision) int64 { return valueLimit(h, ds, d, sp.lim) }
	for _, i := range redisOrder(ds, rlim) {
		d := ds[i]
		if ws[i] == 0 || d.Source != Redis || !sp.in(d.At) || !sp.once(seen, d) {
			continue
		}
		if prev >= 0 && lostBetween(h, prev, d.Step) {
			epoch = 0
			b.epochs++
			b.credits += last
			last = 0
		}
		prev = d.Step
		last = max(last, credit(h, ds, w, d))
		b.most = max(b.most, rlim(d))
		bound := rlim(d) + last
		if epoch += ws[i]; epoch > bound && !heldValue(h, ds, ws, i, w) {
			v.Bound = bound
			v.Detail = fmt.Sprintf("Redis admitted %d of them after step %d with no loss between", epoch, epochStart(h, d.Step))
			if rlim(d) != w.Limit {
				v.Detail += fmt.Sprintf(", the last (step %d, proc %d) checked against a limit of %d", d.Step, d.Proc, rlim(d))
			}
			return b, false
		}
	}
	b.credits += last
	return b, true
}

// checkLocal checks the span's local admissions by episode: the Redis
// answer each process last had about the subject before deciding locally.
// It returns the episodes' allowances together, or fills v and reports
// false on a violation.
func (sp span) checkLocal(v *Violation) (int64, bool) {
	type episode struct{ used, allowed int64 }
	eps := map[[2]int]*episode{} // (proc, anchor index or -1)
	var keys [][2]int
	for i, d := range sp.ds {
		if sp.ws[i] == 0 || d.Source != Local || !sp.in(d.At) {
			continue
		}
		// Of the concurrent answers of the process's last step with
		// Redis, the fallback starts from the highest count, whatever
		// the order Redis decided them in (docs/operations.md, Fail
		// modes); it may also start from an answer of the same step
		// (a concurrent call of the same process): take the largest.
		last, same := anchors(sp.ds, i)
		n := sp.lim(d) // no answer: L
		for _, a := range last {
			n = min(n, sp.allowed(d, a))
		}
		for _, a := range same {
			n = max(n, sp.allowed(d, a))
		}
		key := [2]int{d.Proc, -1}
		if len(last) > 0 {
			key[1] = last[0]
		}
		e := eps[key]
		if e == nil {
			e = &episode{}
			eps[key] = e
			keys = append(keys, key)
		}
		e.used += sp.ws[i]
		e.allowed = max(e.allowed, n)
	}
	var local int64
	for _, k := range keys {
		e := eps[k]
		local += e.allowed
		if e.used > e.allowed {
			v.Bound = e.allowed
			from := "no Redis answer before"
			if k[1] >= 0 {
				from = fmt.Sprintf("Redis's answer of step %d", sp.ds[k[1]].Step)
			}
			v.Detail = fmt.Sprintf("proc %d's fallback admitted %d of them, starting from %s", k[0], e.used, from)
			return local, false
		}
	}
	return local, true
}

// allowed returns what the fallback may admit for local decision d
// starting from Redis's answer a. The answer's count is the counter's,
// which give-backs made before it of admissions made before a loss may
// have lowered below the admissions it saw (see credit): the fallback's
// L-k starts from that count (found by Redis seed 3605589467463604364).
func (sp span) allowed(d Decision, a int) int64 {
	var held int64
	seen := map[string]bool{}
	for _, r := range visible(sp.h, sp.ds, sp.ws, a, sp.w) {
		if sp.in(sp.ds[r].At) && sp.once(seen, sp.ds[r]) {
			held += sp.ws[r]
		}
	}
	return sp.lim(d) - max(0, held-creditBy(sp.h, sp.ds, sp.w, sp.ds[a], sp.ds[a].Step))
}

// credit returns what a calendar window's counter may have lost, at ds's
// decision d, to give-backs and settlements of admissions it never held: a
// give-back or settlement lowers the counter of the period the request
// counted in, never below zero (docs/rules.md, Calendar windows), and a
// counter keeps no members, so one of an admission made before a loss,
// applied after it, lowers the counter of the admissions made since. Such
// an admission counts nowhere in the model (it was given back), so the
// epoch of its give-back may hold its units more. A give-back or
// settlement that failed may be applied in any later epoch. Sliding
// windows remove the request's own member: nothing to credit.
func credit(h History, ds []Decision, w Window, d Decision) int64 {
	return creditBy(h, ds, w, d, math.MaxInt)
}

// creditBy is credit counting only the give-backs and settlements made at
// step by or before (a failed one may have been applied from then on).
func creditBy(h History, ds []Decision, w Window, d Decision, by int) int64 {
	if w.Calendar == "" {
		return 0
	}
	var n int64
	for _, r := range ds {
		if r.Source != Redis || !r.Allowed || r.Back == 0 || r.Back > by || h.periodOf(r.At) != h.periodOf(d.At) {
			continue
		}
		if !lostBetween(h, r.Step, d.Step) || (!r.Unsure && epochOf(h, r.Back) != epochOf(h, d.Step)) {
			continue
		}
		switch {
		case r.GivenBack:
			n += max(r.Cost, 1)
		case r.Settled:
			n += max(max(r.Cost, 1)-r.Actual, 0)
		}
	}
	return n
}

// checkSlots checks an in-flight window: at every step, the admissions
// Redis made since the subject's last loss that hold a slot (not released
// before the step, this step's included) are at most N, and so are each
// process's local ones. A slot of a process that died is held until its
// lease ends, which the harness makes longer than a history.
func checkSlots(h History, ds []Decision, wi int) (Violation, bool) {
	w := h.Windows[wi]
	lim := func(d Decision) int64 { return h.limitOf(d, wi) }
	holds := func(r Decision, step int) bool {
		return r.Allowed && r.Step <= step && (r.Released == 0 || r.Released > step)
	}
	for i, d := range ds {
		if !d.Allowed || (d.Source != Redis && d.Source != Local) {
			continue
		}
		var n int64
		for j, r := range ds {
			if r.Source != d.Source || !holds(r, d.Step) || !before(ds, j, i, lim) {
				continue
			}
			if d.Source == Redis && lostBetween(h, r.Step, d.Step) {
				continue
			}
			if d.Source == Local && r.Proc != d.Proc {
				continue
			}
			n++
		}
		if n > lim(d) {
			who := "Redis"
			if d.Source == Local {
				who = fmt.Sprintf("proc %d's fallback", d.Proc)
			}
			return Violation{Window: w, To: d.At, Count: n, Bound: lim(d),
				Detail: fmt.Sprintf("%s let %d hold slots at step %d", who, n, d.Step)}, false
		}
	}
	return Violation{}, true
}

// lostBetween reports whether Redis lost data between two steps.
func lostBetween(h History, from, to int) bool {
	for _, l := range h.Losses {
		if l.Step > from && l.Step < to {
			return true
		}
	}
	return false
}

// epochOf returns the number of losses before step.
func epochOf(h History, step int) int {
	n := 0
	for _, l := range h.Losses {
		if l.Step < step {
			n++
		}
	}
	return n
}

// epochStart returns the step of the last loss before step, or 0.
func epochStart(h History, step int) int {
	s := 0
	for _, l := range h.Losses {
		if l.Step < step {
			s = max(s, l.Step)
		}
	}
	return s
}

// anchors returns the indexes in ds of the decisions Redis made for the
// process of ds[i] in the last step before ds[i]'s that had any (none if
// no step had), and those of ds[i]'s own step: the answers the process's
// fallback starts from, and those it may start from.
func anchors(ds []Decision, i int) (last, same []int) {
	for j, d := range ds {
		if d.Proc != ds[i].Proc || d.Source != Redis {
			continue
		}
		switch {
		case d.Step < ds[i].Step && (len(last) == 0 || d.Step > ds[last[0]].Step):
			last = append(last[:0], j)
		case d.Step < ds[i].Step && d.Step == ds[last[0]].Step:
			last = append(last, j)
		case d.Step == ds[i].Step:
			same = append(same, j)
		}
	}
	return last, same
}

// visible returns the indexes in ds of the admissions Redis surely held in
// window w when it answered ds[a]: those of earlier steps (and ds[a]
// itself) that Redis decided and that count (see weights), within the
// window, not lost since. Leaving out what it may also have held
// (concurrent admissions, given-back ones) only loosens the bound.
func visible(h History, ds []Decision, ws []int64, a int, w Window) []int {
	at := ds[a]
	var out []int
	for j, r := range ds {
		if r.Source != Redis || ws[j] == 0 || (r.Step >= at.Step && j != a) {
			continue
		}
		if r.At > at.At || !h.within(w, r.At, at.At) || lostBetween(h, r.Step, at.Step) {
			continue
		}
		out = append(out, j)
	}
	return out
}

// Held returns the most Redis may hold now (at t, after every step) for
// subject s in window w: the admissions Redis decided since the last loss,
// within the window, not surely given back (each at the larger of its cost
// and its settlement; with Distinct, given back or not), plus every
// decision of the window that went elsewhere or whose give-back or
// settlement failed (a call that timed out may have been applied, or be
// cleaned up later). A window holding more has an entry no admission
// accounts for: a denied request left one.
func Held(h History, s string, w Window, t time.Duration) int64 {
	h = settledFirst(h).of(s)
	last := -1
	for _, l := range h.Losses {
		if !l.Maybe {
			last = max(last, l.Step)
		}
	}
	var n int64
	for _, d := range h.Decisions {
		if d.Subject != s || !h.within(w, d.At, t) {
			continue
		}
		if d.Step < last {
			// A settlement that raised a cost, applied to a calendar
			// counter after a loss, adds to the admissions since (a
			// counter has no members: see credit; found by miniredis
			// seed 877942683702998641).
			if w.Calendar != "" && d.Source == Redis && d.Allowed && d.Settled && (d.Back > last || d.Unsure) {
				n += max(d.Actual-max(d.Cost, 1), 0)
			}
			continue
		}
		most := max(d.Cost, 1)
		if d.Settled {
			most = max(most, d.Actual)
		}
		switch {
		case d.Source == Redis && d.Allowed && (!d.GivenBack || d.Unsure || h.Distinct):
			n += most
		case d.Source != Redis && d.Source != Cache:
			n += most
		}
	}
	return n
}

func (d Decision) String() string {
	s := fmt.Sprintf("step %3d at %v: proc %d %s: ", d.Step, d.At, d.Proc, d.Subject)
	if d.Allowed {
		s += "allowed"
	} else {
		s += "denied"
	}
	s += " by " + d.Source.String()
	if d.Cost > 1 {
		s += fmt.Sprintf(", cost %d", d.Cost)
	}
	if d.Value != "" {
		s += ", value " + d.Value
	}
	if d.Limits != nil {
		s += fmt.Sprintf(", limits %v", d.Limits)
	}
	if d.Settled {
		s += fmt.Sprintf(", settled to %d", d.Actual)
	}
	if d.GivenBack {
		s += ", given back"
		if d.Unsure {
			s += " (failed)"
		}
	}
	return s
}

func (h History) String() string {
	var b strings.Builder
	i := 0
	for _, d := range h.Decisions {
		for ; i < len(h.Losses) && h.Losses[i].Step < d.Step; i++ {
			fmt.Fprintf(&b, "  %v\n", h.Losses[i])
		}
		fmt.Fprintf(&b, "  %v\n", d)
	}
	for ; i < len(h.Losses); i++ {
		fmt.Fprintf(&b, "  step %3d at %v: loss: %s\n", h.Losses[i].Step, h.Losses[i].At, h.Losses[i].Why)
	}
	return b.String()
}

func (l Loss) String() string {
	s := fmt.Sprintf("step %3d at %v: loss: %s", l.Step, l.At, l.Why)
	if l.Subjects != nil {
		s += fmt.Sprintf(" (subjects %v)", l.Subjects)
	}
	return s
}
