package engine

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/rules"
)

// Calendar windows (rules.Window.Calendar) count in a calendar key of
// their own per check and unit: the limiter's key (with its hash tag, so
// the same cluster slot) followed by calSuffix and the unit, as in
// "{scope|user|42}:cal:month". Its value is one counter, "START:COUNT",
// the start of the period it counts (µs since 1970) and what was admitted
// since; a counter of another period reads as 0. See lua/multi_window.lua
// (key kinds 'C' and 'A') for the wire format.
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

// nominal periods of calendar windows in µs: the longest a period can
// last, which is how long the local fallback and the cache remember one.
var calNominal = map[rules.Calendar]int64{
	rules.CalendarDay:   int64(25 * time.Hour / time.Microsecond),
	rules.CalendarWeek:  int64((7*24 + 1) * time.Hour / time.Microsecond),
	rules.CalendarMonth: int64((31*24 + 1) * time.Hour / time.Microsecond),
}

// calRef ties the calendar window win of check check to its key.
type calRef struct {
	check, win, key int32
}

// calendar registers window j of check i, a calendar window, with its own
// calendar key; kc is the limiter's key cost and cost what the check counts.
func (p *plan) calendar(k *keyer, req *Request, i, j int, kc string, cost int64) error {
	c := &req.Checks[i]
	w := &c.Windows[j]
	if _, ok := calNominal[w.Calendar]; !ok {
		return &RequestError{Check: i, Window: j, Reason: "unknown calendar " + string(w.Calendar)}
	}
	if w.Period != 0 || w.Grain != 0 || w.Concurrent {
		return &RequestError{Check: i, Window: j, Reason: "calendar window with a period, a grain or slots"}
	}
	start := len(p.buf)
	p.buf = k.appendKey(p.buf, req.Scope, c.Kind, c.Name, kc, c.Subject)
	p.buf = append(append(p.buf, calSuffix...), w.Calendar...)
	idx := p.key(start, cost, false, false)
	if p.kcost[idx] != cost {
		return &RequestError{Check: i, Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) count different costs"}
	}
	for len(p.kcal) <= int(idx) {
		p.kcal = append(p.kcal, "")
	}
	p.kcal[idx] = w.Calendar
	p.calw = append(p.calw, calRef{check: int32(i), win: int32(j), key: idx})
	if c.Block != 0 {
		return p.block(i, int(idx), c.Block)
	}
	return nil
}

// isCal reports whether key k is a calendar key.
func (p *plan) isCal(k int) bool { return k < len(p.kcal) && p.kcal[k] != "" }

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
			p.wins = append(p.wins, window{period: calNominal[w.Calendar], limit: w.Limit})
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
func calBoundsAround(c rules.Calendar, now int64, loc *time.Location) [calBounds]int64 {
	start, end := c.Bounds(time.UnixMicro(now), loc)
	prev, _ := c.Bounds(start.Add(-time.Microsecond), loc)
	_, next := c.Bounds(end, loc)
	return [calBounds]int64{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
}

// calArgs appends the fields of calendar key k of p: 0, 'C', cost, limit,
// then the boundaries around now (µs since 1970).
func (f *flatArgs) calArgs(p *plan, k int32, now int64) {
	f.int(0)
	f.buf = append(f.buf, 'C')
	f.ends = append(f.ends, int32(len(f.buf)))
	f.int(p.kcost[k])
	f.int(p.wins[p.kstart[k]].limit)
	for _, b := range calBoundsAround(p.kcal[k], now, p.zoneOf()) {
		f.int(b)
	}
}

// readCal reads the reply of calendar key k of c decided at t (µs): what
// the period holds and the time to its end, which is the window's reset
// and, when the request does not fit, its wait.
func readCal(r *ireader, c *call, k int32, t int64) {
	p := &c.plan
	j := p.kstart[k]
	used := r.int(1 << 53)
	left := r.int(calNominal[rules.CalendarMonth])
	if r.err == nil && left < 1 {
		r.fail("calendar period ended")
	}
	var wait int64
	if used+p.kcost[k] > p.wins[j].limit {
		wait = left
	}
	c.res[3*j], c.res[3*j+1], c.res[3*j+2] = used, left, wait
	p.kcalAt[k] = t
}

// setCalendarAt records t (µs since 1970) as the decision time of every
// calendar key of p: the period a give-back, settlement or rollback
// adjusts.
func (p *plan) setCalendarAt(t int64) {
	for k := range p.kcal {
		if p.kcal[k] != "" {
			p.kcalAt[k] = t
		}
	}
}

// calUndo turns u, the undo of key k of p, into the adjustment of a
// calendar counter by -cost in the period p decided in (mode 'c'); a key
// whose decision time is unknown (the script call failed: it may not have
// counted) gets no adjustment (cal empty), erring on the side of denying.
func (p *plan) calUndo(u *undo, k int) {
	u.mode, u.delta, u.cost = 'c', -p.kcost[k], 0
	if at := p.kcalAt[k]; at > 0 {
		start, end := p.kcal[k].Bounds(time.UnixMicro(at), p.zoneOf())
		u.cal = strconv.FormatInt(start.UnixMicro(), 10)
		u.until = max(u.until, time.Now().UnixMicro()+(end.UnixMicro()-at))
	}
}

// calAdjustArgs returns the arguments of the script call that adjusts the
// calendar counter of u (see lua/multi_window.lua, key kind 'A').
func (e *Engine) calAdjustArgs(u *undo) []any {
	return []any{"evalsha", e.shaArg, 1, u.key, 0, maxSuffix, "", 1, 0, "A", u.cal, u.delta}
}

// calResetKeys returns the calendar keys of l's calendar windows for
// subject in scope and their block keys, for Reset.
func (k *keyer) calResetKeys(scope string, l *rules.Limiter, subject string) []string {
	var keys []string
	for _, w := range l.Windows {
		if w.Calendar != "" {
			key := string(k.appendKey(nil, scope, l.Kind, l.Name, keyCost(l), subject)) + calSuffix + string(w.Calendar)
			keys = append(keys, key, blockKey(key))
		}
	}
	return keys
}

// calAdjusts runs the calendar adjustments of a removal pipeline (see
// Engine.remove), whose replies are the script's arrays, and reports each
// as an IntCmd of the pipeline's: 1 when sent and answered.
type calAdjusts struct {
	idx  []int
	cmds []*redis.IntSliceCmd
}

// add queues the adjustment of undo i with args on pipe, and returns the
// IntCmd that finish fills in; skip changes nothing.
func (a *calAdjusts) add(ctx context.Context, pipe redis.Pipeliner, i int, args []any, skip bool) *redis.IntCmd {
	done := redis.NewIntCmd(ctx)
	if skip {
		done.SetVal(0)
		return done
	}
	c := redis.NewIntSliceCmd(ctx, args...)
	_ = pipe.Process(ctx, c)
	a.idx, a.cmds = append(a.idx, i), append(a.cmds, c)
	return done
}

// finish copies the adjustments' outcomes into cmds, sending those Redis
// had no script for again with its source; it reports whether it did.
func (a *calAdjusts) finish(ctx context.Context, e *Engine, cmds []*redis.IntCmd) (retried bool) {
	for n, c := range a.cmds {
		if noScript(c.Err()) {
			c = redis.NewIntSliceCmd(ctx, asEval(c.Args(), e.srcArg)...)
			_ = e.client.Process(ctx, c)
			retried = true
		}
		if err := c.Err(); err != nil {
			cmds[a.idx[n]].SetErr(err)
		} else {
			cmds[a.idx[n]].SetVal(1)
		}
	}
	return retried
}

// calSpan returns the start and end (µs since 1970) of the period of
// calendar key k that holds t, for the local fallback.
func (p *plan) calSpan(k int, t int64) (start, end int64) {
	s, e := p.kcal[k].Bounds(time.UnixMicro(t), p.zoneOf())
	return s.UnixMicro(), e.UnixMicro()
}

// calDeltas sets the change of cost of every calendar key of p when req's
// checks settle to actual (-1: unchanged), as Settle does for the other
// keys.
func (p *plan) calDeltas(req *Request, actual, deltas []int64, set []bool) error {
	for _, r := range p.calw {
		a, k := actual[r.check], r.key
		if a < 0 {
			continue
		}
		delta := a - p.kcost[k]
		switch {
		case delta != 0 && req.Checks[r.check].Limiter.Cost == "":
			return &RequestError{Check: int(r.check), Window: -1, Reason: "only a limiter with a cost settles: this one counts requests"}
		case set[k] && deltas[k] != delta:
			return &RequestError{Check: int(r.check), Window: -1, Reason: "checks sharing a key (same scope, limiter and subject) settle to different costs"}
		}
		deltas[k], set[k] = delta, true
	}
	return nil
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
