package faults

import (
	"strings"
	"testing"
	"time"
)

// ev is n decisions of one step of subject "s": each admission of Redis
// or a fallback, or a denial, checked against limit (0: the window's own)
// in the history's windows, all of them when they are several.
type ev struct {
	step    int
	at      time.Duration
	proc    int
	allowed bool
	src     Source
	limit   int64
	n       int    // decisions (0 counts 1)
	value   string // distinct: value
	release int    // the step that released its slots
}

func (e ev) decisions(nw int) []Decision {
	var ds []Decision
	for range max(e.n, 1) {
		d := Decision{Step: e.step, At: e.at, Proc: e.proc, Subject: "s", Allowed: e.allowed, Source: e.src,
			Value: e.value, Released: e.release}
		if e.limit > 0 {
			for range nw {
				d.Limits = append(d.Limits, e.limit)
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// TestModelVaryingLimits: every admission is bounded by the limit its own
// request was checked against (a limit function's value, a rule override,
// a role's rules): the entries of its key in its window, itself
// included, at most that limit; a fallback's by its limit less what Redis
// last said; slots at most that limit held at once.
func TestModelVaryingLimits(t *testing.T) {
	rate := []Window{{Limit: 3, Period: 10 * sec}}
	slots := []Window{{Limit: 2, Concurrent: true}}
	distinct := []Window{{Limit: 3, Period: sec}, {Limit: 6, Period: 10 * sec}}
	for _, tc := range []struct {
		name     string
		windows  []Window
		distinct bool
		evs      []ev
		want     string // a violation's text, "" for none
	}{
		{name: "a higher limit admits at once", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, n: 3},
			{step: 2, at: sec, proc: 1, allowed: true, src: Redis, limit: 5, n: 2},
		}},
		{name: "over a higher limit", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, n: 3},
			{step: 2, at: sec, proc: 1, allowed: true, src: Redis, limit: 5, n: 3},
		}, want: "Redis admitted 6 of them"},
		{name: "a lower limit counts what the key holds", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 5, n: 2},
			{step: 2, at: 2 * sec, proc: 2, allowed: true, src: Redis, limit: 2},
		}, want: "checked against a limit of 2"},
		{name: "a lower limit once the entries left", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 5, n: 5},
			{step: 2, at: 11 * sec, proc: 2, allowed: true, src: Redis, limit: 1},
		}},
		{name: "concurrent requests in increasing limits", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 2, allowed: true, src: Redis, limit: 2},
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 1},
		}},
		{name: "concurrent requests over both limits", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 2, allowed: true, src: Redis, limit: 1},
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 1},
		}, want: "Redis admitted 2 of them"},
		// Redis said 4 used to a request of limit 2: a fallback request
		// of limit 5 has room for 1 (the engine's seed once kept 2).
		{name: "fallback from a count above the answer's limit", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 8, n: 4},
			{step: 2, at: sec, proc: 1, allowed: false, src: Redis, limit: 2},
			{step: 3, at: 2 * sec, proc: 1, allowed: true, src: Local, limit: 5},
		}},
		{name: "fallback over its limit less the answer's count", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 8, n: 4},
			{step: 2, at: sec, proc: 1, allowed: false, src: Redis, limit: 2},
			{step: 3, at: 2 * sec, proc: 1, allowed: true, src: Local, limit: 5, n: 2},
		}, want: "proc 1's fallback admitted 2 of them"},
		{name: "an unseen fallback gets its request's limit", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 2, allowed: true, src: Local, limit: 5, n: 5},
		}},
		{name: "an unseen fallback over its request's limit", windows: rate, evs: []ev{
			{step: 1, at: sec, proc: 2, allowed: true, src: Local, limit: 2, n: 3},
		}, want: "proc 2's fallback admitted 3 of them"},
		{name: "slots up to a higher limit", windows: slots, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, n: 2},
			{step: 2, at: sec, proc: 2, allowed: true, src: Redis, limit: 3},
		}},
		{name: "slots over a lower limit", windows: slots, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis},
			{step: 2, at: sec, proc: 2, allowed: true, src: Redis, limit: 1},
		}, want: "Redis let 2 hold slots"},
		{name: "slots over a lower limit, one released", windows: slots, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, release: 2},
			{step: 3, at: sec, proc: 2, allowed: true, src: Redis, limit: 1},
		}},
		// The 10 s window holds v1..v4 (4 values, 6 allowed); under a
		// limit of 3 it still admits v1 again (counted anew in the
		// second, older than it), not a new value.
		{name: "distinct: a held value under a lower limit", windows: distinct, distinct: true, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, value: "v1"},
			{step: 2, at: 3 * sec, proc: 1, allowed: true, src: Redis, value: "v2"},
			{step: 3, at: 3 * sec, proc: 1, allowed: true, src: Redis, value: "v3"},
			{step: 4, at: 3 * sec, proc: 1, allowed: true, src: Redis, value: "v4"},
			{step: 5, at: 5 * sec, proc: 2, allowed: true, src: Redis, limit: 3, value: "v1"},
		}},
		// Two requests of v2 at once, under limits 1 and 2: Redis
		// counted it for the second, and the first found it held.
		{name: "distinct: one value under two limits at once", windows: rate, distinct: true, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 2, value: "v1"},
			{step: 2, at: sec, proc: 1, allowed: true, src: Redis, limit: 1, value: "v2"},
			{step: 2, at: sec, proc: 2, allowed: true, src: Redis, limit: 2, value: "v2"},
		}},
		{name: "distinct: one value under a limit too low at once", windows: rate, distinct: true, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, limit: 2, value: "v1"},
			{step: 2, at: sec, proc: 1, allowed: true, src: Redis, limit: 1, value: "v2"},
			{step: 2, at: sec, proc: 2, allowed: true, src: Redis, limit: 1, value: "v2"},
		}, want: "checked against a limit of 1"},
		{name: "distinct: a new value over a lower limit", windows: distinct, distinct: true, evs: []ev{
			{step: 1, at: sec, proc: 1, allowed: true, src: Redis, value: "v1"},
			{step: 2, at: 3 * sec, proc: 1, allowed: true, src: Redis, value: "v2"},
			{step: 3, at: 3 * sec, proc: 1, allowed: true, src: Redis, value: "v3"},
			{step: 4, at: 3 * sec, proc: 1, allowed: true, src: Redis, value: "v4"},
			{step: 5, at: 5 * sec, proc: 2, allowed: true, src: Redis, limit: 3, value: "v5"},
		}, want: "checked against a limit of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := History{Windows: tc.windows, Fail: "local", Distinct: tc.distinct}
			for _, e := range tc.evs {
				h.Decisions = append(h.Decisions, e.decisions(len(tc.windows))...)
			}
			vs := Check(h)
			switch {
			case tc.want == "" && len(vs) > 0:
				t.Fatalf("violations %v, want none; history:\n%v", vs, h)
			case tc.want != "" && len(vs) == 0:
				t.Fatalf("no violation, want one saying %q; history:\n%v", tc.want, h)
			case tc.want != "" && !strings.Contains(vs[0].String(), tc.want):
				t.Fatalf("violation %v, want one saying %q", vs[0], tc.want)
			}
		})
	}
}

// TestModelVaryingLimitsOld: a history without per-request limits (every
// kept scenario's) is checked as before: by the windows' own limits.
func TestModelVaryingLimitsOld(t *testing.T) {
	h := newHist("local")
	h.add(3, 1, 1*sec, true, Redis)
	wantViolations(t, h, 0)
	h.Decisions[2].Limits = []int64{2} // the third was checked against 2
	wantViolations(t, h, 1)
	h.Decisions[2].Limits = []int64{3}
	wantViolations(t, h, 0)
}
