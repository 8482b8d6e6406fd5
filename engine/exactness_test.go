package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// auditDuration is how long the exactness audits hammer Redis. It is the
// same with and without -race: the race detector slows the callers, not
// Redis, and 16 callers per engine still keep every window saturated.
const auditDuration = 3 * time.Second

// auditEngines returns the audits' three engines, each on a client from
// client (one per engine, as in separate processes, or a shared one), with
// snowflake nodes 1 to 3 (so that their members never collide) and opts.
func auditEngines(t *testing.T, client func() Client, opts ...Option) []*Engine {
	t.Helper()
	var engines []*Engine
	for node := range int64(3) {
		engines = append(engines, newEngine(t, client(), append(opts[:len(opts):len(opts)], WithNode(node+1))...))
	}
	return engines
}

// hammer runs callers goroutines per engine, each calling Allow with
// next() until d has passed, and returns the number of admissions. Every
// decision must come from Redis, or be a denial from its cached answers.
func hammer(t *testing.T, engines []*Engine, callers int, d time.Duration, next func(i int) Request) int64 {
	t.Helper()
	return hammerRecord(t, engines, callers, d, next, nil)
}

// hammerRecord is hammer, recording in ds (unless nil) the denials that
// Redis decided.
func hammerRecord(t *testing.T, engines []*Engine, callers int, d time.Duration, next func(i int) Request, ds *deniedLog) int64 {
	t.Helper()
	var admitted atomic.Int64
	hammerLoop(t, engines, callers, d, func(e *Engine, _, i int) error {
		r := next(i)
		start := time.Now()
		dec, err := e.Allow(context.Background(), r)
		if err == nil && ds != nil {
			ds.record(e, r, dec, start)
		}
		// A denial may come from the cache of Redis's answers; nothing
		// else may come from anywhere but Redis.
		cachedDenial := dec.Source == "cache" && !dec.Allowed
		if err == nil && dec.Source != "redis" && !cachedDenial {
			err = fmt.Errorf("source %v (allowed %v) without error", dec.Source, dec.Allowed)
		}
		if err == nil && dec.Allowed {
			admitted.Add(1)
		}
		return err
	})
	t.Logf("%d admitted", admitted.Load())
	return admitted.Load()
}

// hammerLoop runs callers goroutines per engine, goroutine g calling
// step(e, g, i) for i = g, g+callers, ... until d has passed or a step
// fails, which fails the test.
func hammerLoop(t *testing.T, engines []*Engine, callers int, d time.Duration, step func(e *Engine, g, i int) error) {
	t.Helper()
	var calls atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	errs := make(chan error, 1)
	for _, e := range engines {
		for g := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; time.Now().Before(stop); i += callers {
					calls.Add(1)
					if err := step(e, g, i); err != nil {
						select {
						case errs <- err:
						default:
						}
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("Allow: %v", err)
	default:
	}
	t.Logf("%d calls", calls.Load())
}

// checkWindows asserts that no window (t-W, t] ever holds more than its
// limit: the count peaks at an admission, so sliding over them suffices.
func checkWindows(t *testing.T, name string, ts []int64, ws []rules.Window) {
	t.Helper()
	for _, w := range ws {
		per := w.Period.Microseconds()
		lo, peak := 0, 0
		for i, at := range ts {
			for ts[lo] <= at-per {
				lo++
			}
			peak = max(peak, i-lo+1)
			if int64(i-lo+1) > w.Limit {
				t.Errorf("%s: %d entries in (%d-%v, %d], limit %d", name, i-lo+1, at, w.Period, at, w.Limit)
				break
			}
		}
		t.Logf("%s: window %d/%v peaked at %d", name, w.Limit, w.Period, peak)
	}
}

// greedy returns the most admissions the windows allow in [from, to] µs
// after the admissions in prior: it admits every request as early as
// possible, which maximises the count.
func greedy(prior []int64, from, to int64, ws []rules.Window) int {
	ts := slices.Clone(prior)
	n := 0
	for at := from; ; {
		for moved := true; moved; {
			moved = false
			for _, w := range ws {
				per := w.Period.Microseconds()
				lo, _ := slices.BinarySearch(ts, at-per+1)
				if used := len(ts) - lo; int64(used) >= w.Limit {
					at = ts[lo+used-int(w.Limit)] + per
					moved = true
				}
			}
		}
		if at > to {
			return n
		}
		ts = append(ts, at)
		n++
	}
}

func TestAuditSingle(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	engines := auditEngines(t, func() Client { return rc }, WithKeyPrefix(prefix))
	ws := []rules.Window{win(20, 200*ms), win(50, time.Second)}
	hot := req(user("hot", ws...))
	key := engines[0].keyOf("s", hot.Checks[0])
	// A group with an hour-long window shares the key, so that nothing is
	// trimmed and every admission can be audited afterwards.
	mustAllow(t, engines[0], req(user("hot", win(1_000_000, time.Hour))), true)

	var ds deniedLog
	admitted := hammerRecord(t, engines, 16, auditDuration, func(int) Request { return hot }, &ds)

	ts := entries(t, rc, key)
	if int64(len(ts)) != admitted+1 {
		t.Fatalf("%d entries, %d admissions counted by the callers (+1 keeper)", len(ts), admitted)
	}
	checkWindows(t, "hot", ts, ws)
	if checkDenials(t, "hot", key, &ds, admissionsOf(ts), false, false) == 0 {
		t.Error("no denial by a window; the audit did not saturate them")
	}
	checkCapacity(t, ts, ws)
}

// checkCapacity logs how much of the capacity the windows allow the run
// used: sampled every millisecond from one longest window after the first
// admission to the last admission, the average fill of the tightest window
// (highest used/limit). It is informative only: the fill measures
// throughput, which a loaded machine lowers by starving the callers (89%
// and less at a load average of 15 on 2 cores), so a wrongly denying
// limiter is caught by checkDenials instead. It asserts only progress, at
// least one longest window's limit admitted, which any machine makes in an
// audit's seconds.
func checkCapacity(t *testing.T, ts []int64, ws []rules.Window) {
	t.Helper()
	var longest int64
	for _, w := range ws {
		longest = max(longest, w.Period.Microseconds())
	}
	var sum float64
	n := 0
	for at := ts[0] + longest; at <= ts[len(ts)-1]; at += 1000 {
		var fill float64
		for _, w := range ws {
			lo, _ := slices.BinarySearch(ts, at-w.Period.Microseconds()+1)
			hi, _ := slices.BinarySearch(ts, at+1)
			fill = max(fill, float64(hi-lo)/float64(w.Limit))
		}
		sum += fill
		n++
	}
	if n == 0 {
		t.Fatalf("run too short: %v", time.Duration(ts[len(ts)-1]-ts[0])*time.Microsecond)
	}
	avg := sum / float64(n)
	t.Logf("windows %.1f%% full on average over %v (%d admissions, greedy optimum %d)", 100*avg,
		time.Duration(n)*time.Millisecond, len(ts), greedy(nil, ts[0], ts[len(ts)-1], ws))
	checkProgress(t, "", int64(len(ts)), ws)
}

// checkProgress asserts that admitted, a count or a cost, reaches the
// limit of the longest of ws: one full window's worth.
func checkProgress(t *testing.T, name string, admitted int64, ws []rules.Window) {
	t.Helper()
	longest := ws[0]
	for _, w := range ws {
		if w.Period > longest.Period {
			longest = w
		}
	}
	if admitted < longest.Limit {
		t.Errorf("%s: %d admitted, want at least a %v window's limit %d", name, admitted, longest.Period, longest.Limit)
	}
}

// admissionsOf returns the entry times ts as admissions of cost 1.
func admissionsOf(ts []int64) []audited {
	as := make([]audited, len(ts))
	for i, at := range ts {
		as[i] = audited{at: at, cost: 1}
	}
	return as
}
