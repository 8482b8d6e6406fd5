package engine

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// denial is one denial decided by Redis as the audits record it: the
// decision time (Redis's, µs), the denying window as Redis reported it, the
// key of the check it belongs to, that check's cost, and the keys of the
// request's other checks.
type denial struct {
	at     int64
	key    string
	state  WindowState
	cost   int64
	others []string
}

// denials collects the audits' denials from concurrent callers, and the
// longest Allow call seen (µs, wall clock).
type denials struct {
	mu      sync.Mutex
	list    []denial
	slowest int64
}

// record adds dec to ds when Redis denied r by a window (not a denial from
// the cache of Redis's answers, nor a fail-closed one), and notes that the
// call took took.
func (ds *denials) record(e *Engine, r Request, dec Decision, took time.Duration) {
	ds.mu.Lock()
	ds.slowest = max(ds.slowest, took.Microseconds())
	ds.mu.Unlock()
	if dec.Allowed || dec.Source != FromRedis || dec.Denied == (WindowState{}) {
		return
	}
	d := denial{at: dec.Time.UnixMicro(), state: dec.Denied, cost: max(r.Checks[dec.Denied.Check].Cost, 1)}
	for i, c := range r.Checks {
		if k := e.keyOf(r.Scope, c); i == dec.Denied.Check {
			d.key = k
		} else {
			d.others = append(d.others, k)
		}
	}
	ds.mu.Lock()
	ds.list = append(ds.list, d)
	ds.mu.Unlock()
}

// checkDenials asserts that every denial of ds by a window of key was
// justified by the admissions the audit found in key afterwards (as, in
// any order): at the denial's time T, the window of period P held, in
// Redis's report, Used, and
//
//   - Used + cost > Limit: the request did not fit (Redis's arithmetic);
//   - Used <= the cost of the admissions in (T-P-G, T], G being the
//     window's grain (merging moves an entry's cost to a later entry of
//     the same grain, so a grained window may still count an admission
//     up to G after it left): Redis counted nothing that was never
//     admitted.
//
// Together they say that the request was denied only because admitted
// requests filled the window: a limiter that wrongly denies (counts
// phantom entries, misreads its limit or its clock) fails here whatever
// the machine's load, where a fill percentage fails a starved run.
//
// rollbacks is for a Redis Cluster, where a request's checks on other
// slots reserve it and are rolled back when one slot denies it: until the
// rollback, a concurrent call sees that reservation, which is then in no
// key's final entries. With rollbacks the second bound also allows, as
// reservations, the cost of every recorded denial that had a check on key
// but was denied by another check, and both sums are taken over
// (T-P-G-slack, T+slack], slack being twice the longest Allow call: a
// request's parts decide at their own nodes' times (the decision reports
// the latest), a local clock (WithClock) is read before the call reaches
// Redis, and a reservation lasts at most one call; the nodes share this
// machine's clock. This is weaker (a denial among concurrent rolled-back
// reservations is excused, and a loaded machine widens the slack), so the
// strict form is what a single server's audit uses. It returns the number
// of denials checked, which must not be 0: an audit that never denied
// tested nothing.
func checkDenials(t *testing.T, name, key string, dl *denials, as []admission, rollbacks bool) int {
	t.Helper()
	ds, slack := dl.list, 2*dl.slowest
	slices.SortFunc(as, func(a, b admission) int { return int(a.at - b.at) })
	sumIn := func(lo, hi int64) (s int64) { // costs in (lo, hi]
		i, _ := slices.BinarySearchFunc(as, lo+1, func(a admission, at int64) int { return int(a.at - at) })
		for ; i < len(as) && as[i].at <= hi; i++ {
			s += as[i].cost
		}
		return s
	}
	// The reservations a rolled-back request may have left in key.
	var rolled []admission
	if rollbacks {
		for _, d := range ds {
			if d.key != key && slices.Contains(d.others, key) {
				rolled = append(rolled, admission{d.at, d.cost})
			}
		}
		slices.SortFunc(rolled, func(a, b admission) int { return int(a.at - b.at) })
	}
	if !rollbacks {
		slack = 0
	} else {
		t.Logf("%s: slack %v", name, time.Duration(slack)*time.Microsecond)
	}
	n, bad := 0, 0
	for _, d := range ds {
		if d.key != key {
			continue
		}
		n++
		w := d.state.Window
		per, grain := w.Period.Microseconds(), w.Grain.Microseconds()
		held := sumIn(d.at-per-grain-slack, d.at+slack)
		var reserved int64
		for _, r := range rolled {
			if r.at > d.at-per-grain-slack && r.at <= d.at+slack {
				reserved += r.cost
			}
		}
		if d.state.Used+d.cost <= w.Limit || d.state.Used > held+reserved {
			if bad++; bad <= 5 {
				t.Errorf("%s: denial at %d by window %d/%v: used %d + cost %d, admitted %d (+ %d reserved) in the window",
					name, d.at, w.Limit, w.Period, d.state.Used, d.cost, held, reserved)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d unjustified denials in all", name, bad)
	}
	t.Logf("%s: %d denials checked, %d unjustified", name, n, bad)
	if n == 0 {
		t.Errorf("%s: no denial by its windows; the audit did not saturate them", name)
	}
	return n
}
