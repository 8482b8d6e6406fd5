package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/rules"
)

func gwin(limit int64, period, grain time.Duration) rules.Window {
	return rules.Window{Limit: limit, Period: period, Grain: grain}
}

// grainScenarios are the scenarios of weighted keys whose outcome differs
// from an exact log (merged entries, removals from the middle), so they do
// not run on the local limiter, which treats grains as exact and removes
// entries exactly.
func grainScenarios() []scenario {
	sec := time.Second
	g := req(user("u", gwin(10, sec, 100*ms)))
	two := req(user("u", gwin(2, sec, 100*ms)))
	return []scenario{
		{"grain merges entries", []step{
			{at: 0, req: g, allow: true, wins: [][3]time.Duration{{1, 9, sec}}},
			// The entry of t0 merges into this one (same 100ms grain).
			{at: 10 * ms, req: g, allow: true, wins: [][3]time.Duration{{2, 8, 990 * ms}}},
			// The merged entry leaves with its latest request, at 1010ms.
			{at: 20 * ms, peek: true, req: g, allow: true, wins: [][3]time.Duration{{2, 8, 990 * ms}}},
			{at: 1005 * ms, peek: true, req: g, allow: true, wins: [][3]time.Duration{{2, 8, 5 * ms}}},
			{at: 1010 * ms, peek: true, req: g, allow: true, wins: [][3]time.Duration{{0, 10, 0}}},
		}},
		{"grain denies at most one grain early", []step{
			{at: 0, req: two, allow: true, wins: [][3]time.Duration{{1, 1, sec}}},
			{at: 10 * ms, req: two, allow: true, wins: [][3]time.Duration{{2, 0, 990 * ms}}},
			// An exact log would admit at 1000ms; the merged entry leaves
			// at 1010ms.
			{at: 20 * ms, req: two, retry: 990 * ms, wins: [][3]time.Duration{{2, 0, 990 * ms}}},
			{at: 1000 * ms, req: two, retry: 10 * ms, wins: [][3]time.Duration{{2, 0, 10 * ms}}},
			{at: 1010 * ms, req: two, allow: true, wins: [][3]time.Duration{{1, 1, sec}}},
			// Another grain: not merged.
			{at: 1110 * ms, req: two, allow: true, wins: [][3]time.Duration{{2, 0, 900 * ms}}},
			{at: 1120 * ms, req: two, retry: 890 * ms, wins: [][3]time.Duration{{2, 0, 890 * ms}}},
		}},
		{"give back the newest of merged entries", []step{
			{at: 0, req: req(bytesOf("u", 3, gwin(10, sec, 100*ms))), allow: true, wins: [][3]time.Duration{{3, 7, sec}}},
			{at: 1 * ms, req: req(bytesOf("u", 4, gwin(10, sec, 100*ms))), allow: true, wins: [][3]time.Duration{{7, 3, sec - ms}}},
			// The entry of 4 stands for the 3 too: only 4 go.
			{at: 2 * ms, giveBack: 2},
			{at: 3 * ms, peek: true, req: req(bytesOf("u", 1, gwin(10, sec, 100*ms))), allow: true, wins: [][3]time.Duration{{3, 7, sec - 2*ms}}},
			// The 3 were merged away: nothing to find.
			{at: 4 * ms, giveBack: 1},
			{at: 5 * ms, peek: true, req: req(bytesOf("u", 1, gwin(10, sec, 100*ms))), allow: true, wins: [][3]time.Duration{{3, 7, sec - 4*ms}}},
		}},
	}
}

func TestSemanticsGrains(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	_, mc := redistest.Mini(t)
	s1, c1 := redistest.StartClient(t)
	s2, c2 := redistest.StartClient(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s1.Addr, "b": s2.Addr}})
	t.Cleanup(func() { ring.Close() })
	for _, b := range []struct {
		name string
		c    Client
		ttl  []*redis.Client
	}{{"redis", rc, []*redis.Client{rc}}, {"miniredis", mc, nil}, {"ring", ring, []*redis.Client{c1, c2}}} {
		for sc, cached := range cacheModes(grainScenarios()) {
			t.Run(b.name+"/"+sc.name+cacheName(cached), func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				for _, c := range b.ttl {
					afterTTLs(t, c, prefix)
				}
				clk := redistest.NewClock()
				e := newEngine(t, b.c, WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached))
				runScenario(t, e, clk, sc, fromRedis)
			})
		}
	}
}

func TestCostErrors(t *testing.T) {
	t.Parallel()
	e := newEngine(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{req(bytesOf("u", 11, win(10, time.Second))),
			"engine: invalid request: check 0 window 0: cost 11 is above the window's limit 10: the request can never be admitted"},
		{req(user("u", win(10, time.Second)), bytesOf("u", 5, win(100, time.Minute), win(4, time.Second))),
			"engine: invalid request: check 1 window 1: cost 5 is above the window's limit 4: the request can never be admitted"},
		{req(Check{Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{win(10, time.Second)}}, Subject: "u", Cost: 2}),
			"engine: invalid request: check 0: cost 2 above 1 needs a rule with a cost (Rule.Cost), which names its own key"},
		{req(bytesOf("u", -1, win(10, time.Second))), "engine: invalid request: check 0: negative cost -1"},
		{req(bytesOf("u", 2, win(10, time.Second)), bytesOf("u", 3, win(10, time.Minute))),
			"engine: invalid request: check 1: checks sharing a key (same scope, limiter and subject) count different costs"},
		{req(user("u", gwin(10, time.Second, time.Second))), "engine: invalid request: check 0 window 0: grain outside 1µs..period"},
		{req(user("u", win(plan.MaxCountLimit+1, time.Second))), "engine: invalid request: check 0 window 0: limit outside 1..1000000000"},
		{req(bytesOf("u", 1, win(rulelimits.MaxBoundedLimit+1, time.Second))), "engine: invalid request: check 0 window 0: limit outside 1..2^50"},
	} {
		d, err := e.Allow(context.Background(), tc.r)
		var re *requestError
		if !errors.As(err, &re) || err.Error() != tc.want || d.Allowed {
			t.Errorf("Allow: %v (allowed %v), want %q", err, d.Allowed, tc.want)
		}
	}
	// A constant cost counts when the check leaves Cost 0, and a grained
	// count rule shares the key of the cost 1.
	r := req(Check{Rule: rules.Rule{Kind: rules.IP, Cost: "5", Windows: []rules.Window{win(100, time.Second)}}, Subject: "i"})
	c := plannedCall(t, r)
	if c.plan.Cost[0] != 5 || !c.plan.Weighted[0] || c.plan.Keys[0] != "p:{s|ip|i}|5" {
		t.Errorf("constant cost: cost %d weighted %v key %q", c.plan.Cost[0], c.plan.Weighted[0], c.plan.Keys[0])
	}
	c = plannedCall(t, req(user("u", win(5, time.Second), gwin(100, time.Hour, time.Minute))))
	c1 := plannedCall(t, req(Check{Rule: rules.Rule{Kind: rules.User, Cost: "1", Windows: []rules.Window{win(5, time.Second)}}, Subject: "u"}))
	if c.plan.Keys[0] != "p:{s|user|u}|1" || c.plan.Keys[0] != c1.plan.Keys[0] {
		t.Errorf("grained key %q, cost-1 key %q", c.plan.Keys[0], c1.plan.Keys[0])
	}
	if c := plannedCall(t, req(user("u", win(5, time.Second)))); c.plan.Keys[0] != "p:{s|user|u}" || c.plan.Weighted[0] {
		t.Errorf("count key %q weighted %v", c.plan.Keys[0], c.plan.Weighted[0])
	}
}

// audited is one admitted request as the audits record it: its decision
// time and its cost, and how long its Allow call took (µs, wall clock; 0
// when read from Redis's entries).
type audited struct{ at, cost, lat int64 }

// hammerCosts runs callers goroutines per engine, each calling Allow with
// next(i, cost) and a random cost 1..1000 until d has passed, and returns
// per key (by check order of the request) the admissions, recording in ds
// the denials. Every decision must come from Redis.
func hammerCosts(t *testing.T, engines []*Engine, callers int, d time.Duration, next func(i int, cost int64) Request, ds *deniedLog) map[string][]audited {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]audited{}
	rngs := make([]*rand.Rand, callers*len(engines))
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
	}
	idx := map[*Engine]int{}
	for i, e := range engines {
		idx[e] = i * callers
	}
	hammerLoop(t, engines, callers, d, func(e *Engine, g, i int) error {
		cost := 1 + rngs[idx[e]+g].Int64N(1000)
		r := next(i, cost)
		start := time.Now()
		dec, err := e.Allow(context.Background(), r)
		took := time.Since(start)
		if err == nil {
			ds.record(e, r, dec, start)
		}
		if err == nil && dec.Source != "redis" {
			err = fmt.Errorf("source %v (allowed %v) without error", dec.Source, dec.Allowed)
		}
		if err == nil && dec.Allowed {
			mu.Lock()
			for _, c := range r.Checks {
				k := e.keyOf(r.Scope, c)
				got[k] = append(got[k], audited{dec.Time.UnixMicro(), cost, took.Microseconds()})
			}
			mu.Unlock()
		}
		return err
	})
	n := 0
	for _, as := range got {
		n = max(n, len(as))
	}
	t.Logf("up to %d admissions per key", n)
	return got
}

// checkCostWindows asserts that no window (t-W, t] ever holds more cost
// than its limit, and returns the average fill of the tightest window,
// sampled every millisecond from one longest window after the first
// admission to the last.
func checkCostWindows(t *testing.T, name string, as []audited, ws []rules.Window) float64 {
	t.Helper()
	slices.SortFunc(as, func(a, b audited) int { return int(a.at - b.at) })
	sumIn := func(lo, hi int64) (s int64) { // costs in (lo, hi]
		i, _ := slices.BinarySearchFunc(as, lo+1, func(a audited, at int64) int { return int(a.at - at) })
		for ; i < len(as) && as[i].at <= hi; i++ {
			s += as[i].cost
		}
		return s
	}
	var longest int64
	for _, w := range ws {
		per := w.Period.Microseconds()
		longest = max(longest, per)
		peak := int64(0)
		for _, a := range as {
			s := sumIn(a.at-per, a.at)
			peak = max(peak, s)
			if s > w.Limit {
				t.Errorf("%s: cost %d in (%d-%v, %d], limit %d", name, s, a.at, w.Period, a.at, w.Limit)
				break
			}
		}
		t.Logf("%s: window %d/%v peaked at %d", name, w.Limit, w.Period, peak)
	}
	var sum float64
	n := 0
	for at := as[0].at + longest; at <= as[len(as)-1].at; at += 1000 {
		var fill float64
		for _, w := range ws {
			fill = max(fill, float64(sumIn(at-w.Period.Microseconds(), at))/float64(w.Limit))
		}
		sum += fill
		n++
	}
	if n == 0 {
		t.Fatalf("%s: run too short", name)
	}
	return sum / float64(n)
}

// costWindows are the audits' windows: one exact, one with a grain.
var costWindows = []rules.Window{win(20000, 200*ms), gwin(100000, time.Second, 100*ms)}

func TestAuditCosts(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	engines := auditEngines(t, func() Client { return rc }, WithKeyPrefix(prefix))
	var ds deniedLog
	got := hammerCosts(t, engines, 16, auditDuration, func(_ int, cost int64) Request {
		return req(bytesOf("hot", cost, costWindows...))
	}, &ds)
	key := engines[0].keyOf("s", bytesOf("hot", 1, costWindows...))
	fill := checkCostWindows(t, "hot", got[key], costWindows)
	// The fill is informative (see checkCapacity); checkDenials is what
	// catches a limiter that wrongly denies.
	t.Logf("windows %.1f%% full on average", 100*fill)
	if checkDenials(t, "hot", key, &ds, got[key], false, false) == 0 {
		t.Error("no denial by a window; the audit did not saturate them")
	}
	checkProgress(t, "hot", costOf(got[key]), costWindows)
	// Merged: 1s/100ms = 10 grains, plus the entries not mergeable yet
	// (the exact 200ms window and one grain: about 300ms of admissions,
	// 60 at the average cost of 500), with room for bursts. Without
	// merging the key would hold every admission of the last second.
	checkMembers(t, rc, key, 120)
}

// checkMembers asserts that key holds at most max entries (markers left
// out) and logs them.
func checkMembers(t *testing.T, rc redis.Cmdable, key string, most int) {
	t.Helper()
	n, err := rc.ZCount(context.Background(), key, "0", "+inf").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d entries", key, n)
	if n > int64(most) {
		t.Errorf("%s: %d entries, want at most %d", key, n, most)
	}
}

// auditCostsCluster audits costs on a cluster: two users share an IP, each
// request a check on its user and one on the IP, in different slots, so
// that denials roll back reservations.
func auditCostsCluster(t *testing.T, cl *redistest.Cluster) {
	prefix := redistest.Prefix(t)
	afterClusterTTLs(t, cl, prefix)
	// One clock per call for every slot: the audit reads admissions by
	// their decision time, which is then each key's.
	engines := auditEngines(t, func() Client { return cl.Client(t) }, WithKeyPrefix(prefix), WithClock(time.Now))
	ipWs := []rules.Window{win(30000, 200*ms), gwin(150000, time.Second, 100*ms)}
	ipOf := func(cost int64) Check {
		return Check{Rule: rules.Rule{Kind: rules.IP, Cost: "bytes", Windows: ipWs}, Subject: "10.0.0.1", Cost: cost}
	}
	var ds deniedLog
	got := hammerCosts(t, engines, 16, auditDuration, func(i int, cost int64) Request {
		return req(bytesOf(fmt.Sprint("u", i%2), cost, costWindows...), ipOf(cost))
	}, &ds)
	for u := range 2 {
		k := engines[0].keyOf("s", bytesOf(fmt.Sprint("u", u), 1, costWindows...))
		checkCostWindows(t, k, got[k], costWindows)
	}
	k := engines[0].keyOf("s", ipOf(1))
	if slot(k) == slot(engines[0].keyOf("s", bytesOf("u0", 1))) {
		t.Fatal("ip and user keys share a slot; the test needs them apart")
	}
	fill := checkCostWindows(t, k, got[k], ipWs)
	// The fill is informative (see checkCapacity); checkDenials is what
	// catches a limiter that wrongly denies.
	t.Logf("ip windows %.1f%% full on average", 100*fill)
	denied := 0
	for dk := range got {
		if slices.ContainsFunc(ds.list, func(d denial) bool { return d.key == dk }) {
			// fitOnly: see checkDenials on this audit's local clock.
			denied += checkDenials(t, dk, dk, &ds, got[dk], true, true)
		}
	}
	if denied == 0 {
		t.Errorf("no denial by a window; the audit did not saturate them")
	}
	checkProgress(t, "ip", costOf(got[k]), ipWs)
}

// costOf returns the total cost of as.
func costOf(as []audited) (s int64) {
	for _, a := range as {
		s += a.cost
	}
	return s
}

// TestMemory drives rules through a day of admissions under a test
// clock and measures the key with MEMORY USAGE on real Redis.
func TestMemory(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name  string
		c     Check
		n     int   // admissions, evenly spaced over a day
		cost  int64 // per request
		most  int64 // bytes of the key at most; 0 to only log
		entry int   // entries at most; 0 to only log
	}{
		// Seed 001's group with grains on the long windows.
		{"user:200/10s,5000/h~2m,20000/d~30m", user("u", win(200, 10*time.Second), gwin(5000, time.Hour, 2*time.Minute), gwin(20000, day, 30*time.Minute)), 20000, 1, 16 << 10, 90},
		{"user:200/10s,5000/h~1m,20000/d~15m", user("u", win(200, 10*time.Second), gwin(5000, time.Hour, time.Minute), gwin(20000, day, 15*time.Minute)), 20000, 1, 0, 0},
		{"user:200/10s,5000/h,20000/d~15m", user("u", win(200, 10*time.Second), win(5000, time.Hour), gwin(20000, day, 15*time.Minute)), 20000, 1, 0, 0},
		{"user:200/10s,5000/h,20000/d", user("u", win(200, 10*time.Second), win(5000, time.Hour), win(20000, day)), 20000, 1, 0, 0},
		{"user[bytes]:2Gi/d~15m", bytesOf("u", 0, gwin(2<<30, day, 15*time.Minute)), 2048, 1 << 20, 16 << 10, 100},
		{"user[bytes]:2Gi/d", bytesOf("u", 0, win(2<<30, day)), 2048, 1 << 20, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			afterTTLs(t, rc, prefix)
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
			c := tc.c
			c.Cost = tc.cost
			r := req(c)
			step := day / time.Duration(tc.n)
			admitted := 0
			for i := range tc.n {
				clk.Set(time.Duration(i) * step)
				d, err := e.Allow(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted++
				}
			}
			if admitted != tc.n {
				t.Errorf("%d admitted, want %d: spaced evenly, an exact log admits them all", admitted, tc.n)
			}
			// The day's window is now full: the next request is denied.
			clk.Set(day - time.Second)
			if d, _ := e.Allow(context.Background(), r); d.Allowed {
				t.Errorf("request %d of the day admitted", tc.n+1)
			}
			key := e.keyOf("s", c)
			mem, err := rc.MemoryUsage(context.Background(), key, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			n, err := rc.ZCard(context.Background(), key).Result()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d admissions over a day: %d bytes, %d members (markers included)", tc.name, admitted, mem, n)
			if tc.most > 0 && mem > tc.most {
				t.Errorf("%d bytes, want at most %d", mem, tc.most)
			}
			if tc.entry > 0 && n > int64(tc.entry) {
				t.Errorf("%d members, want at most %d", n, tc.entry)
			}
		})
	}
}

// TestCostsDifferential drives random costs, peeks and give-backs through
// exact windows of a cost rule on real Redis (weighted key: running
// totals) and on the fallback limiter (a plain log of costs), and requires
// the same decisions from both.
func TestCostsDifferential(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	clk := redistest.NewClock()
	re := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now))
	le := newEngine(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}),
		WithClock(clk.Now), WithFailMode(rules.FailLocal), WithCachedDenials(false))
	rng := rand.New(rand.NewPCG(9, 9))
	ws := []rules.Window{win(100, time.Second), win(250, 5*time.Second)}
	var at time.Duration
	type pair struct {
		r      Request
		rd, ld Decision
	}
	var admitted []pair
	for i := range 600 {
		at += time.Duration(rng.IntN(300)) * ms
		clk.Set(at)
		if len(admitted) > 0 && rng.IntN(8) == 0 {
			p := admitted[rng.IntN(len(admitted))]
			if err := re.giveBack(context.Background(), p.r, p.rd); err != nil {
				t.Fatal(err)
			}
			if err := le.giveBack(context.Background(), p.r, p.ld); err != nil {
				t.Fatal(err)
			}
			continue
		}
		r := req(bytesOf("u", 1+rng.Int64N(40), ws...))
		f, g := re.Allow, le.Allow
		if rng.IntN(5) == 0 {
			f, g = re.peek, le.peek
		}
		rd, err := f(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		ld, _ := g(context.Background(), r)
		if ld.Source != "local" {
			t.Fatalf("local decision from %v", ld.Source)
		}
		if rd.Allowed != ld.Allowed || rd.RetryAfter != ld.RetryAfter || !slices.Equal(rd.Windows, ld.Windows) {
			t.Fatalf("step %d at %v, cost %d: redis %v %v %+v, local %v %v %+v", i, at, r.Checks[0].Cost,
				rd.Allowed, rd.RetryAfter, rd.Windows, ld.Allowed, ld.RetryAfter, ld.Windows)
		}
		if rd.Allowed && rd.admitted != nil {
			admitted = append(admitted, pair{r, rd, ld})
		}
	}
	t.Logf("%d admissions", len(admitted))
}
