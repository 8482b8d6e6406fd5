package engine

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/admission"
	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/rules"
)

// source says what made a decision; Decision.Source holds its name.
type source uint8

// Sources of a Decision.
const (
	fromRedis      source = iota // decided by Redis
	fromFailOpen                 // allowed: Redis failed, fail mode open
	fromFailClosed               // denied: Redis failed, fail mode closed
	fromLocal                    // decided by the in-process fallback limiter
	fromCache                    // denied in-process from Redis's last answer
)

// String returns the source's name, as Decision.Source holds it.
func (s source) String() string {
	switch s {
	case fromRedis:
		return "redis"
	case fromFailOpen:
		return "fail-open"
	case fromFailClosed:
		return "fail-closed"
	case fromLocal:
		return "local"
	case fromCache:
		return "cache"
	}
	return "source(" + strconv.Itoa(int(s)) + ")"
}

// WindowState is the state of one window of one check after a decision.
type WindowState struct {
	// Check is the index of the check in Request.Checks.
	Check int
	// Window is the window's limit and period.
	Window rules.Window
	// Used is what the window counts, in cost units (slots held, for an
	// in-flight window), including this request when it was admitted.
	Used int64
	// Remaining is Window.Limit - Used, never negative.
	Remaining int64
	// Reset is the time until the window's oldest entry leaves it, freeing
	// what it counted. It is zero when the window is empty, and for an
	// in-flight window.
	//
	// It is exact for every window of a request that was denied or that
	// filled a window, and for every window more than an eighth full.
	// Otherwise Redis does not read the oldest entry of a count window (a
	// check's count windows, calendar and in-flight ones aside) that is at
	// most an eighth full, this request counted, nor of a key's shortest
	// window with more remaining than another window of that key: such a
	// window reports its period instead, an upper bound, as its oldest
	// entry leaves within a period. The fallback limiter reports exact
	// times.
	//
	// While the check's subject is blocked (Check.Block), Remaining is 0
	// and Reset at least the time until the block ends: nothing is free
	// before then.
	Reset time.Duration
}

// Decision is the outcome of Allow.
type Decision struct {
	// Allowed reports whether the request was admitted.
	Allowed bool
	// Source says who decided:
	//   - "redis": Redis.
	//   - "fail-open" or "fail-closed": the fail mode, when Redis failed.
	//   - "local": the in-process fallback limiter (fail mode local).
	//   - "cache": a denial made without a Redis call, from what Redis
	//     last said (see WithCachedDenials).
	Source string
	// Time is the decision time: Redis server time, or the local clock for
	// fallback decisions.
	Time time.Time
	// RetryAfter is, for a denied request, the time until it would fit in
	// every window if nothing else were admitted meanwhile. It is zero when
	// the request was allowed.
	RetryAfter time.Duration
	// Denied is a copy of the state of the window that denied the request,
	// the one with the longest wait. It is the zero WindowState when the
	// request was allowed, and when no window denied it: a fail-closed
	// denial, or a Decision built by hand. Its Window.Limit is then 0,
	// where every real window's is at least 1. Test for a denying window
	// with Denied != (WindowState{}).
	Denied WindowState
	// Windows holds the state of every window of every check, in check
	// order then window order.
	Windows []WindowState
	// Blocked reports that a check's subject is blocked (Check.Block). The
	// request was denied by a block in force, or its denial started one.
	// RetryAfter is then at least the time until the block ends.
	Blocked bool

	// admitted is what an admitted Allow took, for Finish; nil when it
	// counted nothing.
	admitted *admission.Record
}

// decision builds the Decision of c from its outcome (c.status, c.res and
// the time), which Redis or the fallback limiter filled in.
func (c *call) decision(req *Request, src source) Decision {
	p := &c.plan
	admitted := c.status == codec.StatusAdmitted
	d := Decision{
		Allowed: admitted,
		Source:  src.String(),
		Time:    time.Unix(c.sec, c.usec*1000),
		Windows: make([]WindowState, len(p.Origin)),
	}
	counted := admitted && c.mode == opAllow
	var wait int64
	denied := -1
	j := 0
	for i := range req.Checks {
		for n := range req.Checks[i].Windows {
			w := &req.Checks[i].Windows[n] // a pointer: a Window is 48 bytes
			m := p.Origin[j]
			mw := p.Wins[m]
			used, reset, wait1 := c.res[3*m], c.res[3*m+1], c.res[3*m+2]
			key := p.KeyOf[i]
			if w.Calendar != "" {
				key = p.CalKeyOf(m) // a calendar window has a key of its own
			}
			if w.Concurrent {
				// A slot frees when a request ends: there is no time at
				// which it must (see slotRetry).
				reset, wait1 = 0, 0
				if counted {
					used++
				} else if !admitted && used >= mw.Limit {
					wait1 = int64(slotRetry / time.Microsecond)
				}
			} else if reset == codec.ResetUnread {
				// Not read, as the request was not denied: at most the
				// period (see WindowState.Reset).
				reset = mw.Period
			} else if counted && used == 0 && reset == 0 {
				reset = mw.Period // the request itself is the oldest
			}
			if counted && !w.Concurrent && (src != fromRedis || !p.HeldAt(m)) {
				used += p.Cost[key]
			}
			ws := &d.Windows[j]
			ws.Check, ws.Window, ws.Used = i, *w, used
			ws.Remaining = max(w.Limit-used, 0)
			// A check of in-flight windows only has no key of its own
			// (keyOf -1), and so no block.
			if k := key; len(c.bleft) > 0 && k >= 0 && c.bleft[k] > 0 {
				d.Blocked, ws.Remaining, reset = true, 0, max(reset, c.bleft[k])
			}
			ws.Reset = time.Duration(reset) * time.Microsecond
			// A merged window reports the wait for its smallest limit; the
			// check that set that limit is the one that denies.
			if !admitted && w.Limit == mw.Limit && wait1 > wait {
				wait, denied = wait1, j
			}
			j++
		}
	}
	if denied >= 0 {
		d.RetryAfter = time.Duration(wait) * time.Microsecond
		d.Denied = d.Windows[denied]
	}
	if counted && (src == fromRedis || src == fromLocal) {
		d.admitted = c.take(req, src)
	}
	return d
}
