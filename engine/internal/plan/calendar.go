package plan

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// Calendar windows (rules.Window.Calendar) count in a calendar key of
// their own per check and unit: the rule's key (with its hash tag, so
// the same cluster slot) followed by CalSuffix and the unit, as in
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
const CalSuffix = ":cal:"

// CalBounds is the number of period boundaries a calendar key's fields
// carry.
const CalBounds = 4

// CalNominal returns the nominal period of calendar c in µs, the longest
// one of its periods can last, which is how long the local fallback and
// the cache remember one; 0 for an unknown calendar.
func CalNominal(c string) int64 { return calNominals[calUnit(c)] }

// calNominals are the nominal periods of calUnits, in µs.
var calNominals = [...]int64{
	0,
	int64(25 * time.Hour / time.Microsecond),
	int64((7*24 + 1) * time.Hour / time.Microsecond),
	int64((31*24 + 1) * time.Hour / time.Microsecond),
}

// CalKey is what a plan knows of one of its keys that is a calendar key
// (unit is 0 for the others).
type CalKey struct {
	Unit   uint8 // index in calUnits (0: not a calendar key); no pointer makes it cheap to append
	Priced bool  // the rule has a cost: requests count different amounts
	Parent int32 // the rate key whose name it extends, -1 when not in the plan
	Start  int64 // the start of the period the script counted in (µs, 0: unknown)
	Bounds [CalBounds]int64
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

// Cal returns the calendar of key k, a calendar key.
func (p *Plan) Cal(k int) string { return calUnits[p.Cals[k].Unit] }

// CalRef ties the calendar window win of check check to its key.
type CalRef struct {
	Check, Win, Key int32
}

// calendar registers window j of check i, a calendar window, with its own
// calendar key; kc is the rule's key cost, cost what the check counts
// and rate the index of its rate key, which the calendar key extends (-1:
// none, the key is built).
func (p *Plan) calendar(k *Keyer, req *Request, i, j int, kc string, cost int64, rate int32) error {
	c := &req.Checks[i]
	w := &c.Windows[j]
	unit := calUnit(w.Calendar)
	if unit == 0 {
		return &Error{Check: i, Window: j, Reason: "unknown calendar " + string(w.Calendar)}
	}
	if w.Period != 0 || w.Grain != 0 || w.Concurrent {
		return &Error{Check: i, Window: j, Reason: "calendar window with a period, a grain or slots"}
	}
	start := len(p.Buf)
	if rate >= 0 {
		p.Buf = append(p.Buf, p.keyBytes(rate)...)
	} else {
		p.Buf = k.AppendKeyOf(p.Buf, req.Scope, c.Kind, c.Name, kc, c.Subject, c.Hashed)
	}
	p.Buf = append(append(p.Buf, CalSuffix...), w.Calendar...)
	idx := p.key(start, cost, false, false)
	if p.Cost[idx] != cost {
		return &Error{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different costs"}
	}
	p.growCals(int(idx) + 1)
	ck := &p.Cals[idx]
	ck.Unit, ck.Priced = unit, kc != ""
	if rate >= 0 {
		ck.Parent = rate
	}
	p.CalWindows = append(p.CalWindows, CalRef{Check: int32(i), Win: int32(j), Key: idx})
	if c.Block != 0 {
		return p.block(i, int(idx), c.Block)
	}
	return nil
}

// Priced reports whether requests may count different amounts in key k:
// a weighted key, or the calendar key of a rule with a cost.
func (p *Plan) Priced(k int) bool {
	return p.Weighted[k] || k < len(p.Cals) && p.Cals[k].Priced
}

// IsCal reports whether key k is a calendar key.
func (p *Plan) IsCal(k int) bool { return k < len(p.Cals) && p.Cals[k].Unit != 0 }

// calWindows merges the calendar windows of the checks mapping to calendar
// key key into p.Wins: one window, its nominal period, the smallest limit.
func (p *Plan) calWindows(req *Request, key int32) {
	first := len(p.Wins)
	for _, r := range p.CalWindows {
		if r.Key != key {
			continue
		}
		w := &req.Checks[r.Check].Windows[r.Win]
		if len(p.Wins) == first {
			p.Wins = append(p.Wins, Window{Period: CalNominal(w.Calendar), Limit: w.Limit})
		} else {
			p.Wins[first].Limit = min(p.Wins[first].Limit, w.Limit)
		}
	}
}

// calOrigin returns the index in p.Wins of the window of calendar window
// j of check i.
func (p *Plan) calOrigin(i, j int) int32 {
	for _, r := range p.CalWindows {
		if r.Check == int32(i) && r.Win == int32(j) {
			return p.WinStart[r.Key]
		}
	}
	return -1
}

// zone returns the plan's time zone: UTC unless the request named one.
func (p *Plan) Location() *time.Location {
	if p.zone == nil {
		return time.UTC
	}
	return p.zone
}

// CalBoundsAround returns the boundaries of four consecutive periods of c
// around now (µs since 1970) in loc: the previous period's start, the
// current one's, the next one's and its end.
func CalBoundsAround(c string, now int64, loc *time.Location) [CalBounds]int64 {
	start, end := ruletime.Bounds(c, time.UnixMicro(now), loc)
	prev, _ := ruletime.Bounds(c, start.Add(-time.Microsecond), loc)
	_, next := ruletime.Bounds(c, end, loc)
	return [CalBounds]int64{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
}

// CalStartAt returns the start (µs since 1970) of the period of calendar
// key k that the script counted in, or else the one that holds at.
func (p *Plan) CalStartAt(k int, at int64) int64 {
	if s := p.Cals[k].Start; s > 0 {
		return s
	}
	start, _ := ruletime.Bounds(p.Cal(k), time.UnixMicro(at), p.Location())
	return start.UnixMicro()
}

// CalResetKeys returns the calendar keys of l's calendar windows for
// subject in scope and their block keys, for Reset.
func (k *Keyer) CalResetKeys(scope string, l *rules.Rule, subject string, hashed bool) []string {
	var keys []string
	for _, w := range l.Windows {
		if w.Calendar != "" {
			key := string(k.AppendKeyOf(nil, scope, l.Kind, l.Name, KeyCost(l), subject, hashed)) + CalSuffix + string(w.Calendar)
			keys = append(keys, key, BlockKey(key))
		}
	}
	return keys
}

// CalSpan returns the start and end (µs since 1970) of the period of
// calendar key k that holds t, for the local fallback.
func (p *Plan) CalSpan(k int, t int64) (start, end int64) {
	s, e := ruletime.Bounds(p.Cal(k), time.UnixMicro(t), p.Location())
	return s.UnixMicro(), e.UnixMicro()
}

// CalKeyOf returns the calendar key whose window is p.Wins[m].
func (p *Plan) CalKeyOf(m int32) int32 {
	for _, r := range p.CalWindows {
		if p.WinStart[r.Key] == m {
			return r.Key
		}
	}
	return -1
}

// validCalendar checks calendar window j of check i, w, which counts cost.
func validCalendar(i, j int, w *rules.Window, cost int64) error {
	switch {
	case w.Limit < 1 || w.Limit > rulelimits.MaxBoundedLimit:
		return &Error{Check: i, Window: j, Reason: "limit outside 1..2^50"}
	case cost > w.Limit:
		return &Error{Check: i, Window: j, Reason: "cost " + strconv.FormatInt(cost, 10) +
			" is above the window's limit " + strconv.FormatInt(w.Limit, 10) + ": the request can never be admitted"}
	}
	return nil
}

// calendars registers the calendar windows of check i with their keys;
// rate is the index of the check's rate key, or -1.
func (p *Plan) calendars(k *Keyer, req *Request, i int, kc string, cost int64, rate int32) error {
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
func (p *Plan) sizeCalendars() {
	if len(p.Cals) > 0 {
		p.growCals(len(p.Keys))
	}
}

// growCals gives p.Cals an entry for each of the first n keys.
func (p *Plan) growCals(n int) {
	for len(p.Cals) < n {
		p.Cals = append(p.Cals, CalKey{Parent: -1})
	}
}

// Colocated reports whether calendar key k of p is known in the cache
// entry of its rate key, which p also holds, instead of an entry of its
// own: both come from the same answers, and a cached denial then looks up
// one entry for the two. Its windows are kept there with their periods
// negated, apart from the rate windows. Keys with a cost or a block keep
// their own entries (see store and blocked).
func (p *Plan) Colocated(k int) bool {
	if k >= len(p.Cals) || p.Blocked > 0 {
		return false
	}
	ck := &p.Cals[k]
	return ck.Unit != 0 && ck.Parent >= 0 && !ck.Priced
}
