package engine

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/internal/scriptconst"
	"github.com/slidelimit/slidelimit/rules"
)

// Calendar windows (rules.Window.Calendar) count in a calendar key of
// their own per check and unit: the limiter's key (with its hash tag, so
// the same cluster slot) followed by calSuffix and the unit, as in
// "{scope|user|42}:cal:month". It is a hash of one field: the start of the
// period it counts (µs since 1970), holding what was admitted since; a
// period without a field counts 0. See lua/multi_window.lua (Calendars,
// key kinds 'P' and 'A') for the wire format.
//
// The script decides at its own time t, which is Redis's TIME unless the
// engine has a test clock (WithClock). The engine cannot know t beforehand,
// so it sends the boundaries of four consecutive periods around its own
// clock (the start of the previous period, of the current one, of the next
// one and the next one's end, computed in the request's zone with
// time.Date's normalisation): the script counts in the period that holds
// t. Periods last at least 23 hours, so any clock difference between the
// engine and Redis below that picks the right period; a larger one is an
// error reply. The time the script decided at then names the period for a
// give-back, a settlement or a rollback (Decision.Time).
const calSuffix = ":cal:"

// calBounds is the number of period boundaries a calendar key's fields
// carry.
const calBounds = 4

// calNominal returns the nominal period of calendar c in µs, the longest
// one of its periods can last, which is how long the local fallback and
// the cache remember one; 0 for an unknown calendar.
func calNominal(c string) int64 { return calNominals[calUnit(c)] }

// calNominals are the nominal periods of calUnits, in µs.
var calNominals = [...]int64{
	0,
	int64(25 * time.Hour / time.Microsecond),
	int64((7*24 + 1) * time.Hour / time.Microsecond),
	int64((31*24 + 1) * time.Hour / time.Microsecond),
}

// calKey is what a plan knows of one of its keys that is a calendar key
// (unit is 0 for the others).
type calKey struct {
	unit   uint8 // index in calUnits (0: not a calendar key); no pointer makes it cheap to append
	priced bool  // the limiter has a cost: requests count different amounts
	parent int32 // the rate key whose name it extends, -1 when not in the plan
	start  int64 // the start of the period the script counted in (µs, 0: unknown)
	bounds [calBounds]int64
}

// calUnits are the calendars of calKey.unit.
var calUnits = [...]string{"", ruletime.Day, ruletime.Week, ruletime.Month}

// calUnit returns the index of c in calUnits, 0 for an unknown calendar.
func calUnit(c string) uint8 {
	switch c {
	case ruletime.Day:
		return 1
	case ruletime.Week:
		return 2
	case ruletime.Month:
		return 3
	}
	return 0
}

// cal returns the calendar of key k, a calendar key.
func (p *plan) cal(k int) string { return calUnits[p.kcals[k].unit] }

// calRef ties the calendar window win of check check to its key.
type calRef struct {
	check, win, key int32
}

// calendar registers window j of check i, a calendar window, with its own
// calendar key; kc is the limiter's key cost, cost what the check counts
// and rate the index of its rate key, which the calendar key extends (-1:
// none, the key is built).
func (p *plan) calendar(k *keyer, req *Request, i, j int, kc string, cost int64, rate int32) error {
	c := &req.Checks[i]
	w := &c.Windows[j]
	unit := calUnit(w.Calendar)
	if unit == 0 {
		return &requestError{Check: i, Window: j, Reason: "unknown calendar " + string(w.Calendar)}
	}
	if w.Period != 0 || w.Grain != 0 || w.Concurrent {
		return &requestError{Check: i, Window: j, Reason: "calendar window with a period, a grain or slots"}
	}
	start := len(p.buf)
	if rate >= 0 {
		p.buf = append(p.buf, p.keyBytes(rate)...)
	} else {
		p.buf = k.appendKeyOf(p.buf, req.Scope, c.Kind, c.Name, kc, c.Subject, c.Hashed)
	}
	p.buf = append(append(p.buf, calSuffix...), w.Calendar...)
	idx := p.key(start, cost, false, false)
	if p.kcost[idx] != cost {
		return &requestError{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different costs"}
	}
	p.growCals(int(idx) + 1)
	ck := &p.kcals[idx]
	ck.unit, ck.priced = unit, kc != ""
	if rate >= 0 {
		ck.parent = rate
	}
	p.calw = append(p.calw, calRef{check: int32(i), win: int32(j), key: idx})
	if c.Block != 0 {
		return p.block(i, int(idx), c.Block)
	}
	return nil
}

// priced reports whether requests may count different amounts in key k:
// a weighted key, or the calendar key of a limiter with a cost.
func (p *plan) priced(k int) bool {
	return p.kw[k] || k < len(p.kcals) && p.kcals[k].priced
}

// isCal reports whether key k is a calendar key.
func (p *plan) isCal(k int) bool { return k < len(p.kcals) && p.kcals[k].unit != 0 }

// calWindows merges the calendar windows of the checks mapping to calendar
// key key into p.wins: one window, its nominal period, the smallest limit.
func (p *plan) calWindows(req *Request, key int32) {
	first := len(p.wins)
	for _, r := range p.calw {
		if r.key != key {
			continue
		}
		w := &req.Checks[r.check].Windows[r.win]
		if len(p.wins) == first {
			p.wins = append(p.wins, window{period: calNominal(w.Calendar), limit: w.Limit})
		} else {
			p.wins[first].limit = min(p.wins[first].limit, w.Limit)
		}
	}
}

// calOrigin returns the index in p.wins of the window of calendar window
// j of check i.
func (p *plan) calOrigin(i, j int) int32 {
	for _, r := range p.calw {
		if r.check == int32(i) && r.win == int32(j) {
			return p.kstart[r.key]
		}
	}
	return -1
}

// zone returns the plan's time zone: UTC unless the request named one.
func (p *plan) zoneOf() *time.Location {
	if p.zone == nil {
		return time.UTC
	}
	return p.zone
}

// calBoundsAround returns the boundaries of four consecutive periods of c
// around now (µs since 1970) in loc: the previous period's start, the
// current one's, the next one's and its end.
func calBoundsAround(c string, now int64, loc *time.Location) [calBounds]int64 {
	start, end := ruletime.Bounds(c, time.UnixMicro(now), loc)
	prev, _ := ruletime.Bounds(c, start.Add(-time.Microsecond), loc)
	_, next := ruletime.Bounds(c, end, loc)
	return [calBounds]int64{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
}

// calArgs appends the fields of calendar key k of p: 0, 'P', cost, limit,
// then the boundaries around now (µs since 1970), which p keeps for
// readCal; or, when an earlier key of the same script call sent those
// boundaries, 0, 'Q', cost, limit and the index in ARGV of the first; or,
// when the previous calendar key of the call was the same key with the
// same fields (a batch on a hot subject), 0 and 'q'.
func (f *flatArgs) calArgs(p *plan, k int32, now int64) {
	x := f.bounds(p.cal(int(k)), p.zoneOf(), now)
	p.kcals[k].bounds = x.b
	cost, limit := p.kcost[k], p.wins[p.kstart[k]].limit
	f.int(0)
	kind := byte('P')
	if x.call == f.call {
		kind = 'Q'
		if l := &f.lastCal; l.call == f.call && l.at == x.at && l.cost == cost && l.limit == limit && l.key == p.keys[k] {
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
	f.lastCal = calLast{key: p.keys[k], cost: cost, limit: limit, at: x.at, call: f.call}
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
	b    [calBounds]int64
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
	b := calBoundsAround(c, now, loc)
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
	j := p.kstart[k]
	used := r.int(scriptconst.MaxTotal)
	left := r.int(calNominal(ruletime.Month))
	if r.err == nil && left < 1 {
		r.fail("calendar period ended")
	}
	var wait int64
	if used+p.kcost[k] > p.wins[j].limit {
		wait = left
	}
	c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, left, wait
	b := &p.kcals[k].bounds
	for i := 1; i < calBounds; i++ {
		if b[i] == t+left {
			p.kcals[k].start = b[i-1] // the period the script counted in
		}
	}
}

// calUndo makes u, the undo of calendar key k of p, the adjustment of its
// counter by -cost in the period the script counted in; a key whose
// period is unknown (the script call failed: it may not have counted)
// gets none (cal 0), erring on the side of denying.
func (p *plan) calUndo(u *undo, k int) {
	u.kind, u.delta, u.cal = kindCal, -p.kcost[k], p.kcals[k].start
}

// calStartAt returns the start (µs since 1970) of the period of calendar
// key k that the script counted in, or else the one that holds at.
func (p *plan) calStartAt(k int, at int64) int64 {
	if s := p.kcals[k].start; s > 0 {
		return s
	}
	start, _ := ruletime.Bounds(p.cal(k), time.UnixMicro(at), p.zoneOf())
	return start.UnixMicro()
}

// calResetKeys returns the calendar keys of l's calendar windows for
// subject in scope and their block keys, for Reset.
func (k *keyer) calResetKeys(scope string, l *rules.Limiter, subject string, hashed bool) []string {
	var keys []string
	for _, w := range l.Windows {
		if w.Calendar != "" {
			key := string(k.appendKeyOf(nil, scope, l.Kind, l.Name, keyCost(l), subject, hashed)) + calSuffix + string(w.Calendar)
			keys = append(keys, key, blockKey(key))
		}
	}
	return keys
}

// calSpan returns the start and end (µs since 1970) of the period of
// calendar key k that holds t, for the local fallback.
func (p *plan) calSpan(k int, t int64) (start, end int64) {
	s, e := ruletime.Bounds(p.cal(k), time.UnixMicro(t), p.zoneOf())
	return s.UnixMicro(), e.UnixMicro()
}

// calKeyOf returns the calendar key whose window is p.wins[m].
func (p *plan) calKeyOf(m int32) int32 {
	for _, r := range p.calw {
		if p.kstart[r.key] == m {
			return r.key
		}
	}
	return -1
}

// validCalendar checks calendar window j of check i, w, which counts cost.
func validCalendar(i, j int, w *rules.Window, cost int64) error {
	switch {
	case w.Limit < 1 || w.Limit > rulelimits.MaxBoundedLimit:
		return &requestError{Check: i, Window: j, Reason: "limit outside 1..2^50"}
	case cost > w.Limit:
		return &requestError{Check: i, Window: j, Reason: "cost " + strconv.FormatInt(cost, 10) +
			" is above the window's limit " + strconv.FormatInt(w.Limit, 10) + ": the request can never be admitted"}
	}
	return nil
}

// calendars registers the calendar windows of check i with their keys;
// rate is the index of the check's rate key, or -1.
func (p *plan) calendars(k *keyer, req *Request, i int, kc string, cost int64, rate int32) error {
	for j := range req.Checks[i].Windows {
		if req.Checks[i].Windows[j].Calendar != "" {
			if err := p.calendar(k, req, i, j, kc, cost, rate); err != nil {
				return err
			}
		}
	}
	return nil
}

// sizeCalendars sizes the per-key calendar slices to the plan's keys,
// once every key is known.
func (p *plan) sizeCalendars() {
	if len(p.kcals) > 0 {
		p.growCals(len(p.keys))
	}
}

// growCals gives p.kcals an entry for each of the first n keys.
func (p *plan) growCals(n int) {
	for len(p.kcals) < n {
		p.kcals = append(p.kcals, calKey{parent: -1})
	}
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
func (t *taken) takeCalendars(p *plan) {
	for _, r := range p.calw {
		k := &t.keys[r.key]
		k.kind, k.cost, k.check = kindCal, p.kcost[r.key], int8(r.check)
		k.cal = p.calStartAt(int(r.key), t.at)
	}
}

// takeExtra records the distinct keys of p in t.
func (t *taken) takeExtra(p *plan) {
	t.extra = make([]takenExtra, len(t.keys))
	for k := range t.keys {
		if p.isDistinct(k) {
			t.keys[k].kind = kindDistinct
			x := &t.extra[k]
			x.value = p.kd[k]
			if k < len(p.dprev) {
				x.at, x.prev = p.dat[k], p.dprev[k]
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
