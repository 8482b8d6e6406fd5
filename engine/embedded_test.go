package engine

// The embedded default (miniredis, for the demo, quick tests and replays)
// must decide exactly as real Redis: these tests run the same traffic
// through an engine on each, with one fake clock and the same request ids,
// and compare every decision.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// roundClock is a clock reading whose shortest printed form is an
// exponent (2e+15 µs): miniredis prints such scores as 2e+15.
var roundClock = time.UnixMicro(2_000_000_000_000_000)

// twin is an engine on real Redis and one on miniredis, on one clock.
type twin struct {
	clock *redistest.Clock
	eng   [2]*Engine // real Redis, miniredis
}

var twinNames = [2]string{"redis", "miniredis"}

func newTwin(t testing.TB, rc *redis.Client, start time.Time) *twin {
	t.Helper()
	_, mc := redistest.Mini(t)
	tw := &twin{clock: redistest.NewClock()}
	tw.clock.SetTime(start)
	prefix := redistest.Prefix(t)
	for i, c := range []*redis.Client{rc, mc} {
		// Cached denials are off so that every decision is the script's;
		// the long lease keeps renewals (real time) out of the run.
		e := newEngine(t, c, WithClock(tw.clock.Now), WithKeyPrefix(prefix), WithFailMode(rules.FailClosed),
			WithCachedDenials(false), WithLease(time.Hour))
		var n int64
		e.newID = func() int64 { n++; return 1_000_000 + n }
		tw.eng[i] = e
	}
	return tw
}

func (tw *twin) advance(d time.Duration) { tw.clock.Add(d) }

// summary is what a decision says, for comparison.
func summary(d Decision, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("allowed=%v source=%v blocked=%v retry=%v time=%d denied=%+v windows=%+v",
		d.Allowed, d.Source, d.Blocked, d.RetryAfter, d.Time.UnixMicro(), d.Denied, d.Windows)
}

// decide runs Allow (or Peek) on both engines and fails the test when they
// differ or either did not decide through its Redis.
func (tw *twin) decide(t testing.TB, req Request, peek bool, why func() string) [2]Decision {
	t.Helper()
	var ds [2]Decision
	var got [2]string
	for i, e := range tw.eng {
		var err error
		if peek {
			ds[i], err = e.peek(context.Background(), req)
		} else {
			ds[i], err = e.Allow(context.Background(), req)
		}
		got[i] = summary(ds[i], err)
		if err == nil && ds[i].Source != "redis" {
			got[i] += " (not decided by Redis)"
		}
	}
	if got[0] != got[1] || strings.HasPrefix(got[0], "error") || strings.Contains(got[0], "not decided") {
		t.Fatalf("%s\n  redis:     %s\n  miniredis: %s", why(), got[0], got[1])
	}
	return ds
}

// both runs f on both engines and fails the test when the errors differ.
func (tw *twin) both(t testing.TB, what string, why func() string, f func(i int, e *Engine) error) {
	t.Helper()
	var errs [2]string
	for i, e := range tw.eng {
		if err := f(i, e); err != nil {
			errs[i] = err.Error()
		}
	}
	if errs[0] != "" || errs[1] != "" {
		t.Fatalf("%s: %s\n  redis:     %q\n  miniredis: %q", why(), what, errs[0], errs[1])
	}
}

// checksOf parses a rule text into the checks of a request.
func checksOf(t testing.TB, text string) []Check {
	t.Helper()
	g, err := rules.Parse(text)
	if err != nil {
		t.Fatalf("rules %q: %v", text, err)
	}
	checks := make([]Check, len(g.Rules))
	for i, l := range g.Rules {
		checks[i] = Check{Rule: l, Block: g.Block}
	}
	return checks
}

// TestEmbeddedIssueCases runs the windows that crashed the embedded
// default (issue 33), one request every few seconds for 400 requests, and
// compares each decision with real Redis's.
func TestEmbeddedIssueCases(t *testing.T) {
	t.Parallel()
	rc := redistest.Start(t).Client()
	for _, tc := range []struct {
		rules string
		start time.Time
	}{
		{"ip:30/5min", redistest.Epoch},
		{"ip:30/10min", redistest.Epoch},
		{"ip:30/100s", redistest.Epoch},
		{"ip:30/15min", redistest.Epoch},
		{"ip:10/50min", redistest.Epoch},
		{"ip[bytes]:3000/10min", redistest.Epoch},
		{"ip:30/10min~1min", redistest.Epoch},
		{"ip:10/5min; block:5min", redistest.Epoch},
		{"ip:30/5min", roundClock},
		{"ip:5/s,30/5min; user[bytes]:3000/10min~1min; block:100s", roundClock},
	} {
		t.Run(fmt.Sprintf("%s@%d", tc.rules, tc.start.UnixMicro()), func(t *testing.T) {
			t.Parallel()
			tw := newTwin(t, rc, tc.start)
			rng := rand.New(rand.NewPCG(33, uint64(len(tc.rules))))
			checks := checksOf(t, tc.rules)
			admitted := 0
			for i := range 400 {
				tw.advance(time.Duration(1000+rng.IntN(5000)) * time.Millisecond)
				req := Request{Scope: "s", Checks: append([]Check(nil), checks...)}
				for c := range req.Checks {
					req.Checks[c].Subject = "a"
					if req.Checks[c].Rule.Cost != "" {
						req.Checks[c].Cost = int64(1 + rng.IntN(300))
					}
				}
				ds := tw.decide(t, req, false, func() string { return fmt.Sprintf("rules %q, request %d", tc.rules, i+1) })
				if ds[0].Allowed {
					admitted++
				}
			}
			if admitted == 0 || admitted == 400 {
				t.Errorf("admitted %d of 400: the case tests nothing", admitted)
			}
		})
	}
}

// diffPeriods are the periods random rules draw from: the ones whose µs
// are d × 10^k with k ≥ 8 (printed as exponents by miniredis) and others.
var diffPeriods = []string{"s", "7s", "min", "100s", "5min", "10min", "15min", "50min", "100min", "1000s", "h", "90s"}

// diffSteps are the clock steps of random traffic, from 1 ms to minutes.
var diffSteps = []time.Duration{
	time.Millisecond, 7 * time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond, time.Second,
	3 * time.Second, 10 * time.Second, 45 * time.Second, 2 * time.Minute, 6 * time.Minute,
}

// randomWindows returns n windows with distinct periods, as rule text.
func randomWindows(rng *rand.Rand, n int, maxLimit int, grains bool) string {
	perm := rng.Perm(len(diffPeriods))[:n]
	ws := make([]string, n)
	for i, p := range perm {
		ws[i] = fmt.Sprintf("%d/%s", 1+rng.IntN(maxLimit), diffPeriods[p])
		if grains && rng.IntN(2) == 0 {
			ws[i] += "~" + []string{"s", "10s", "min"}[rng.IntN(3)]
		}
	}
	return strings.Join(ws, ",")
}

// randomRules returns a valid rule text: a count rule with one to three
// windows and maybe an in-flight window, maybe a byte rule with grains,
// maybe a block.
func randomRules(t testing.TB, rng *rand.Rand) string {
	t.Helper()
	for range 100 {
		parts := []string{"ip:" + randomWindows(rng, 1+rng.IntN(3), 12, rng.IntN(4) == 0)}
		if rng.IntN(3) == 0 {
			parts[0] += fmt.Sprintf(",%d concurrent", 1+rng.IntN(3))
		}
		if rng.IntN(2) == 0 {
			parts = append(parts, "user[bytes]:"+randomWindows(rng, 1+rng.IntN(2), 3000, true))
		}
		if rng.IntN(3) == 0 {
			parts = append(parts, "block:"+diffPeriods[rng.IntN(len(diffPeriods))])
		}
		text := strings.Join(parts, "; ")
		if _, err := rules.Parse(text); err == nil {
			return text
		}
	}
	t.Fatal("no valid random rules in 100 tries")
	return ""
}

// held is an admitted request, as each engine decided it.
type held struct {
	req Request
	d   [2]Decision
}

// runDiff runs steps random operations of random rules from seed on a twin
// and fails with the rules and the seed at the first difference.
func runDiff(t testing.TB, rc *redis.Client, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 33))
	start := redistest.Epoch.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
	if rng.IntN(2) == 0 {
		start = roundClock
	}
	text := randomRules(t, rng)
	checks := checksOf(t, text)
	tw := newTwin(t, rc, start)
	var running []held
	for i := range steps {
		why := func() string {
			return fmt.Sprintf("seed %d, rules %q, start %d µs, step %d", seed, text, start.UnixMicro(), i+1)
		}
		tw.advance(diffSteps[rng.IntN(len(diffSteps))])
		switch op := rng.IntN(100); {
		case op < 70 || len(running) == 0:
			req := Request{Scope: "s", Checks: append([]Check(nil), checks...)}
			subject := fmt.Sprintf("s%d", rng.IntN(2))
			for c := range req.Checks {
				req.Checks[c].Subject = subject
				if req.Checks[c].Rule.Cost != "" {
					req.Checks[c].Cost = 1 + rng.Int64N(min(700, smallestLimit(req.Checks[c].Windows)))
				}
			}
			peek := op >= 60 && op < 70
			ds := tw.decide(t, req, peek, why)
			if ds[0].Allowed && !peek {
				running = append(running, held{req, ds})
			}
		default:
			j := rng.IntN(len(running))
			h := running[j]
			running = append(running[:j], running[j+1:]...)
			switch {
			case op < 78: // count: gives the request back
				tw.both(t, "GiveBack", why, func(i int, e *Engine) error { return e.giveBack(context.Background(), h.req, h.d[i]) })
			case op < 90: // settlement to a random actual cost; -1 keeps one
				actual := make([]int64, len(h.req.Checks))
				for c := range actual {
					actual[c] = -1 // a rule counting requests keeps its count
					if h.req.Checks[c].Rule.Cost != "" {
						actual[c] = int64(rng.IntN(1400)) - 1
					}
				}
				tw.both(t, "Settle", why, func(i int, e *Engine) error {
					return e.settle(context.Background(), h.req, h.d[i], actual)
				})
				tw.both(t, "Release", why, func(i int, e *Engine) error { return e.release(context.Background(), h.req, h.d[i]) })
			default: // the request ends
				tw.both(t, "Release", why, func(i int, e *Engine) error { return e.release(context.Background(), h.req, h.d[i]) })
			}
		}
	}
}

// TestEmbeddedMatchesRedis runs random rules and traffic through the
// embedded default and real Redis and compares every decision.
func TestEmbeddedMatchesRedis(t *testing.T) {
	t.Parallel()
	rc := redistest.Start(t).Client()
	for seed := range uint64(24) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runDiff(t, rc, seed, 300)
		})
	}
}

// FuzzEmbeddedMatchesRedis is TestEmbeddedMatchesRedis with seeds from the
// fuzzer (CI runs a few thousand: each input makes a few hundred Redis
// calls).
func FuzzEmbeddedMatchesRedis(f *testing.F) {
	for seed := range uint64(4) {
		f.Add(seed)
	}
	s := redistest.Start(f)
	rc := s.Client()
	f.Fuzz(func(t *testing.T, seed uint64) {
		runDiff(t, rc, seed, 60)
	})
}

// smallestLimit returns the smallest limit of ws: a cost above it could
// never be admitted (an invalid request).
func smallestLimit(ws []rules.Window) int64 {
	m := ws[0].Limit
	for _, w := range ws[1:] {
		m = min(m, w.Limit)
	}
	return m
}
