package lifecycle

import (
	"strconv"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// Quota units of the advertised windows (draft-ietf-httpapi-ratelimit-
// headers-11, Section 3.1.2).
const (
	// UnitRequests is the draft's default unit: windows of rules without
	// a cost, and of rules with a constant cost, advertised in requests
	// (the limit and remaining divided by the cost).
	UnitRequests = iota
	// UnitBytes is "content-bytes", the unit of a cost function named
	// bytes.
	UnitBytes
	// UnitConcurrent is "concurrent-requests", the unit of in-flight
	// windows (N concurrent): requests running at once.
	UnitConcurrent
	// UnitNone marks windows of other cost functions: their unit is not in
	// the draft's registry, and an item without qu would claim requests, so
	// they are not advertised.
	UnitNone
)

// Policy is one advertised window: a window of one check.
type Policy struct {
	Name   string
	Period string // the window's period as the rules write it, as in "1min"
	Check  int
	Window rules.Window
	Unit   int   // UnitRequests, UnitBytes, UnitConcurrent or UnitNone
	Per    int64 // a constant cost: quota values are divided by it; else 1
}

// Plan is what enforcing one rule list (a group's defaults or one
// role's rules) needs that depends on no request and no transport: the
// advertised policies of its windows and their RateLimit-Policy value. It
// is immutable and safe for concurrent use.
type Plan struct {
	Rules    []rules.Rule
	Policies []Policy // in check order then window order, as Decision.Windows
	Index    [][]int  // Index[check][window] is the position in Policies
	Field    string   // the RateLimit-Policy value (per request for windows with limit functions)
	Slots    bool     // some rule has an in-flight window: admitted requests hold slots
	Calendar bool     // some rule has a calendar window (see calendarItems)
	// Settle[i] is how Rules[i] settles after the handler, nil if it
	// does not; Settle is nil when no rule settles (see SettleWith).
	Settle  []*Settle
	settled []string // the settled cost function names, once each
	// Dynamic reports that some window has a limit function ($name): its
	// limit comes from Source.Limits for each request.
	Dynamic bool
	// Transport is what the transport keeps per plan (the middleware's
	// key and limit functions), set by NewRules' plan function.
	Transport any
	// costs[i] is the constant cost of Rules[i] (1 for none, 1 for an
	// invalid constant, which the transport reports), or -1 for a cost
	// function.
	costs []int64
}

// NewPlan returns the plan of ls. A rule's cost names its unit: none
// or a constant counts requests (the constant divides the advertised
// quota; an invalid one, which the transport reports, divides by 1), the
// cost function bytes counts content-bytes, other cost functions are not
// advertised, and an in-flight window counts concurrent requests.
func NewPlan(ls []rules.Rule) *Plan {
	p := &Plan{Rules: ls, Index: make([][]int, len(ls)), costs: make([]int64, len(ls))}
	for i, l := range ls {
		unit, per := UnitRequests, int64(1)
		switch {
		case l.Cost == "":
		case IsDecimal(l.Cost):
			if n, err := strconv.ParseInt(l.Cost, 10, 64); err == nil && n >= 1 {
				per = n
			}
		case l.Cost == "bytes":
			unit, per = UnitBytes, -1
		default:
			unit, per = UnitNone, -1
		}
		p.costs[i], per = per, max(per, 1)
		p.Dynamic = p.Dynamic || Dynamic(l)
		p.Index[i] = make([]int, len(l.Windows))
		for j, w := range l.Windows {
			p.Index[i][j] = len(p.Policies)
			u := unit
			if w.Concurrent {
				u, p.Slots = UnitConcurrent, true
			}
			p.Calendar = p.Calendar || w.Calendar != ""
			p.Policies = append(p.Policies, Policy{Name: PolicyName(l, w), Period: ruletime.FormatPeriod(w.Period), Check: i, Window: w, Unit: u, Per: per})
		}
	}
	uniqueNames(p.Policies)
	p.Field = policyField(p.Policies)
	return p
}

// IsDecimal reports whether s is a constant cost: decimal digits.
func IsDecimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// PolicyName returns the name under which window w of rule l is
// advertised in the RateLimit-Policy and RateLimit fields: the rule's ID,
// a hyphen and the period with its count, as in "ip-1s", "user-1min",
// "header(X-Api-Key)-30s" or "global-500ms"; an in-flight window (N
// concurrent) is named by the rule's ID and "-concurrent", as in
// "user-concurrent", and a calendar window by the ID, "-calendar-" and its
// unit, as in "user[bytes]-calendar-month".
func PolicyName(l rules.Rule, w rules.Window) string {
	if w.Concurrent {
		return l.ID() + "-concurrent"
	}
	if w.Calendar != "" {
		return calendarName(l, w)
	}
	return l.ID() + "-" + ruletime.FormatPeriod(w.Period)
}

// CeilSeconds converts d to whole seconds, rounding up so that a client
// waiting that long is never early. Negative durations give 0.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// windowSeconds is the w parameter of a window: the period in whole seconds,
// rounded up and at least 1, because the draft requires a positive integer.
// Rounding up understates the rate (5 per 500ms is advertised as 5 per 1s),
// so a client that paces itself by the advertised policy is never denied.
func windowSeconds(p time.Duration) int64 {
	return max(1, CeilSeconds(p))
}

// RetryAfterSeconds is the Retry-After value for a wait of d: whole seconds
// rounded up, at least 1, so that a client retrying at once is not told to.
func RetryAfterSeconds(d time.Duration) int64 {
	return max(1, CeilSeconds(d))
}

// appendSFString appends s as a Structured Field String (RFC 9651, Section
// 3.3.3). Bytes the type cannot hold are replaced by '?': policy names come
// from rule text and header names, which are printable ASCII in practice.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// policyField renders the RateLimit-Policy value of the policies: one List
// member per advertised window, such as `"ip-1s";q=5;w=1,
// "user[bytes]-1d";q=2147483648;qu="content-bytes";w=86400`. A window of a
// constant cost is advertised in requests, q being the limit divided by the
// cost (how many requests fit); windows of cost functions other than bytes
// are left out (see UnitNone). An in-flight window is advertised as
// `"user-concurrent";q=3;qu="concurrent-requests"`, without w.
func policyField(ps []Policy) string {
	var b []byte
	for i := range ps {
		b = AppendPolicy(b, &ps[i], ps[i].Window.Limit)
	}
	return string(b)
}

// AppendPolicy appends the List member of p with the limit limit (its
// window's, or what a limit function gave for a request) to the
// RateLimit-Policy value b; windows that are not advertised add nothing.
func AppendPolicy(b []byte, p *Policy, limit int64) []byte {
	if p.Unit == UnitNone {
		return b
	}
	if len(b) > 0 {
		b = append(b, ", "...)
	}
	b = appendSFString(b, p.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, limit/p.Per, 10)
	if p.Unit == UnitConcurrent {
		// No w: the quota is of requests at once, not per time.
		return append(b, `;qu="concurrent-requests"`...)
	}
	if p.Unit == UnitBytes {
		b = append(b, `;qu="content-bytes"`...)
	}
	b = append(b, ";w="...)
	return strconv.AppendInt(b, policySeconds(p.Window), 10)
}

// effectiveWindow is the effective window of a window state in the sense of
// draft-ietf-httpapi-ratelimit-headers-11, Section 4.1.2: the time within
// which the client can use no more than the window's remaining quota. In a
// sliding log no unit is freed before the oldest entry leaves, Reset from
// now, so until then Remaining is all the client may use, and one unit more
// is free right after: Reset is exactly the effective window. An empty
// window (Reset zero, as for a window that did not count a denied request)
// frees nothing either, but its whole quota may be used in any span of one
// period, so its effective window is the period.
func effectiveWindow(ws engine.WindowState) time.Duration {
	if ws.Reset > 0 {
		return ws.Reset
	}
	return ws.Window.Period
}

// effectiveSeconds is the t parameter of a window state: its effective
// window in whole seconds, rounded up and at least 1, capped at maxT when
// maxT is positive. Rounding up overstates the window by less than a second,
// which understates the rate a client may use, never the reverse: a client
// that spends r and then waits t is never early. The cap is the Retry-After
// value of a denial, because the draft's Section 6 says Retry-After should
// not point earlier than the end of the effective window; a shorter t is
// still true (within a shorter time the client can use no more either).
func effectiveSeconds(ws engine.WindowState, maxT int64) int64 {
	t := max(1, CeilSeconds(effectiveWindow(ws)))
	if maxT > 0 {
		t = min(t, maxT)
	}
	return t
}

// RateLimitField renders the RateLimit value for one window state, such as
// `"ip-1s";r=0;t=1`, with r in the policy's unit (the remaining units
// divided by a constant cost per, which is how many requests fit) and t
// from effectiveSeconds.
//
// The item of an in-flight window has r, its free slots, and no t: a slot
// frees whenever a running request ends, at no time the server knows.
func RateLimitField(name string, ws engine.WindowState, per, maxT int64) string {
	b := appendSFString(make([]byte, 0, len(name)+24), name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(0, ws.Remaining)/per, 10)
	if ws.Window.Concurrent {
		return string(b)
	}
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, effectiveSeconds(ws, maxT), 10)
	return string(b)
}

// deniedIndex returns the index in d.Windows of the denying window, or -1
// when no window denied. Denied is a copy of its element; two equal
// elements (a hand-built group repeating a window) have equal fields, so
// either serves.
func deniedIndex(d *engine.Decision) int {
	if d.Denied == (engine.WindowState{}) {
		return -1
	}
	for i := range d.Windows {
		if d.Windows[i] == d.Denied {
			return i
		}
	}
	return -1
}

// tighter reports whether window state a, with r = its remaining in its
// policy's unit, is more constrained than b with rb: fewer remaining, ties
// going to the longer effective window (the stronger statement: as little
// for longer).
func tighter(a engine.WindowState, ra int64, b engine.WindowState, rb int64) bool {
	return ra < rb || ra == rb && effectiveWindow(a) > effectiveWindow(b)
}

// mostConstrained returns the index in d.Windows of the denying window when
// there is one, else of the one with the fewest remaining, whatever its
// unit (see tighter). It returns -1 when d has no windows.
func mostConstrained(d *engine.Decision) int {
	if i := deniedIndex(d); i >= 0 {
		return i
	}
	best := -1
	for i, ws := range d.Windows {
		if best < 0 || tighter(ws, ws.Remaining, d.Windows[best], d.Windows[best].Remaining) {
			best = i
		}
	}
	return best
}

// constrained returns the windows the RateLimit field names, as indexes in
// d.Windows, and the primary window that events and denials report (-1 when
// d has no windows).
//
// For a denial that is the denying window, named when its unit is
// advertised. Otherwise it is, per advertised quota unit — requests first,
// then content-bytes, then concurrent-requests — the window with the fewest remaining in that unit
// (remaining requests and remaining bytes cannot be compared), ties going
// to the longer effective window; the primary window is the first of them,
// or the most constrained of all when none is advertised. Every advertised
// calendar window follows them (see calendarItems).
func (p *Plan) Constrained(d *engine.Decision) (items []int, primary int) {
	if i := deniedIndex(d); i >= 0 {
		ws := d.Windows[i]
		if pol := p.Lookup(ws.Check, ws.Window); pol != nil && pol.Unit != UnitNone {
			items = []int{i}
		}
		return items, i
	}
	best := [UnitNone]int{-1, -1, -1}
	var bestR [UnitNone]int64
	for i, ws := range d.Windows {
		pol := p.Lookup(ws.Check, ws.Window)
		if pol == nil || pol.Unit == UnitNone {
			continue
		}
		r := max(0, ws.Remaining) / pol.Per
		if b := best[pol.Unit]; b < 0 || tighter(ws, r, d.Windows[b], bestR[pol.Unit]) {
			best[pol.Unit], bestR[pol.Unit] = i, r
		}
	}
	for _, b := range best {
		if b >= 0 {
			items = append(items, b)
		}
	}
	items = p.calendarItems(d, items)
	if len(items) > 0 {
		return items, items[0]
	}
	return nil, mostConstrained(d)
}

// uniqueNames makes policy names unique by suffixing repeats with "-2",
// "-3", ...; validated groups never repeat a rule ID or period, but a
// hand-built group may, and duplicate names would make the fields ambiguous.
func uniqueNames(ps []Policy) {
	seen := make(map[string]int, len(ps))
	for i := range ps {
		n := ps[i].Name
		seen[n]++
		if c := seen[n]; c > 1 {
			for {
				cand := n + "-" + strconv.Itoa(c)
				if _, dup := seen[cand]; !dup {
					ps[i].Name = cand
					seen[cand] = 1
					break
				}
				c++
			}
		}
	}
}

// lookup returns the policy of window w of check c, or nil when the decision
// names a check or window the plan does not have.
// oversized returns the policy of a window whose limit is below the cost
// of its check, and the window with its limit for this request, or nil:
// such a request can never be admitted.
func (p *Plan) Oversized(cs []engine.Check) (*Policy, rules.Window) {
	for i := range cs {
		if cs[i].Cost <= 1 {
			continue
		}
		for _, w := range cs[i].Windows {
			if cs[i].Cost > w.Limit {
				return p.Lookup(i, w), w
			}
		}
	}
	return nil, rules.Window{}
}

func (p *Plan) Lookup(c int, w rules.Window) *Policy {
	if c < 0 || c >= len(p.Rules) {
		return nil
	}
	for j, pw := range p.Rules[c].Windows {
		// A window with a limit function comes back with the limit of
		// the request.
		if pw == w || pw.LimitFunc != "" && pw.LimitFunc == w.LimitFunc && pw.Period == w.Period && pw.Grain == w.Grain && pw.Calendar == w.Calendar {
			return &p.Policies[p.Index[c][j]]
		}
	}
	return nil
}
