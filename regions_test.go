package slidelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
)

// regionNames are the test regions, in the order of their indexes.
var regionNames = []string{"ap", "eu", "us"}

// regionsRig is three regions on one machine (redistest.StartRegions), a
// Limiter in each with WithRegions and one route whose rule group limits
// one user, and a record of every admission with its time.
type regionsRig struct {
	rs     *redistest.Regions
	routes [][]http.Handler // per region, one per process
	lims   [][]*slidelimit.Limiter
	turn   atomic.Int64
	start  time.Time
	prefix string // of the Limiters' keys

	// blockAfter, when positive, records the requests denied with a
	// Retry-After of at least that many seconds: blocked by a block:
	// statement longer than any window.
	blockAfter int

	mu      sync.Mutex
	adm     []faults.RegionAdmission
	blocked []faults.RegionAdmission
	resets  []faults.RegionAdmission // Limiter.Reset calls (reset)
}

// regionClient is a client of addr that fails at once when the server is
// down, as the README advises.
func regionClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	tb.Cleanup(func() { c.Close() })
	return c
}

// startRegionsRig starts three regions whose links delay each way by min
// to max, and a Limiter in each deciding rulesText for the user "u".
func startRegionsRig(t *testing.T, rulesText string, min, max time.Duration) *regionsRig {
	t.Helper()
	return startRegionsProcs(t, rulesText, min, max, 1)
}

// startRegionsProcs is startRegionsRig with procs Limiters per region, as
// processes of a region are: each with its own clients, the region's
// requests taking them in turn.
func startRegionsProcs(t *testing.T, rulesText string, min, max time.Duration, procs int) *regionsRig {
	t.Helper()
	return startRegionsOn(t, rulesText, redistest.StartRegions(t, len(regionNames), min, max), procs)
}

// startRegionsOn is startRegionsProcs on regions rs.
func startRegionsOn(t *testing.T, rulesText string, rs *redistest.Regions, procs int) *regionsRig {
	t.Helper()
	g := startRegionsClients(t, rulesText, procs,
		func(i int) engine.Client { return regionClient(t, rs.Servers[i].Addr) },
		func(i, j int) engine.Client { return regionClient(t, rs.Link(i, j).Addr) })
	g.rs = rs
	return g
}

// startRegionsClients starts procs Limiters per region on the clients
// local and peer return: region i's own, and region j's as i reaches it.
func startRegionsClients(t *testing.T, rulesText string, procs int, local func(i int) engine.Client,
	peer func(i, j int) engine.Client) *regionsRig {
	t.Helper()
	prefix := redistest.Prefix(t)
	g := &regionsRig{routes: make([][]http.Handler, len(regionNames)), lims: make([][]*slidelimit.Limiter, len(regionNames)), prefix: prefix}
	for i, name := range regionNames {
		for range procs {
			peers := map[string]engine.Client{}
			for j, p := range regionNames {
				if j != i {
					peers[p] = peer(i, j)
				}
			}
			lim, err := slidelimit.New(local(i),
				slidelimit.WithKeyPrefix(prefix),
				slidelimit.WithRegions(slidelimit.Regions{Local: name, Peers: peers}),
				slidelimit.WithIdentity(func(*http.Request) (string, []string) { return "u", nil }))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			g.lims[i] = append(g.lims[i], lim)
			mw, err := lim.Middleware(rulesText, middleware.WithScope("api"))
			if err != nil {
				t.Fatal(err)
			}
			g.routes[i] = append(g.routes[i], mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		}
	}
	g.start = time.Now()
	return g
}

// ask sends one request to region r's route and records it if admitted,
// between the moments it was sent and answered: the admission was made
// between them.
func (g *regionsRig) ask(r int) bool {
	at := time.Since(g.start)
	w := httptest.NewRecorder()
	procs := g.routes[r]
	procs[int(g.turn.Add(1))%len(procs)].ServeHTTP(w, httptest.NewRequest("GET", "/api", nil))
	done := time.Since(g.start)
	if w.Code != http.StatusOK {
		if n, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil && g.blockAfter > 0 && n >= g.blockAfter {
			g.mu.Lock()
			g.blocked = append(g.blocked, faults.RegionAdmission{Region: r, At: at, Done: done})
			g.mu.Unlock()
		}
		return false
	}
	g.mu.Lock()
	g.adm = append(g.adm, faults.RegionAdmission{Region: r, At: at, Done: done})
	g.mu.Unlock()
	return true
}

// drive sends each region's requests at its rate (per second) from now
// until d after the rig started, and returns when every sender has.
func (g *regionsRig) drive(rates []float64, d time.Duration) {
	var wg sync.WaitGroup
	for r, rate := range rates {
		if rate <= 0 {
			continue
		}
		wg.Go(func() {
			every := time.Duration(float64(time.Second) / rate)
			for next := time.Since(g.start); next < d; next += every {
				time.Sleep(time.Until(g.start.Add(next)))
				g.ask(r)
			}
		})
	}
	wg.Wait()
}

// blocks returns every request answered as blocked so far (blockAfter).
func (g *regionsRig) blocks() []faults.RegionAdmission {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]faults.RegionAdmission(nil), g.blocked...)
}

// admissions returns every admission so far.
func (g *regionsRig) admissions() []faults.RegionAdmission {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]faults.RegionAdmission(nil), g.adm...)
}

// watchStamps reads the stamps Redis keeps of the rig's admissions (its
// count keys' members, by their scores in µs) from every region's server
// every 250 ms, until the function it returns is called, which reads once
// more and returns them, in order. An entry stays in its count key for its
// window, so none is missed.
func (g *regionsRig) watchStamps() func() []time.Duration {
	ctx := context.Background()
	seen := map[string]float64{}
	read := func() {
		for i := range regionNames {
			c := g.rs.Local(i)
			keys, _ := c.Keys(ctx, g.prefix+"*}").Result()
			for _, k := range keys {
				zs, _ := c.ZRangeWithScores(ctx, k, 0, -1).Result()
				for _, z := range zs {
					if m, ok := z.Member.(string); ok && z.Score > 0 {
						seen[m] = z.Score
					}
				}
			}
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
				read()
			}
		}
	}()
	return func() []time.Duration {
		close(stop)
		<-done
		read()
		var out []time.Duration
		for _, us := range seen {
			out = append(out, time.Duration(us)*time.Microsecond)
		}
		slices.Sort(out)
		return out
	}
}

// mostWithin is the most of the sorted times ts in any window of w.
func mostWithin(ts []time.Duration, w time.Duration) int {
	most, from := 0, 0
	for i := range ts {
		for ts[i]-ts[from] >= w {
			from++
		}
		most = max(most, i+1-from)
	}
	return most
}

// regionsSlack is how late, beyond the links' lag and a batch, the tests
// let a replicated admission arrive: the time a loaded machine adds.
const regionsSlack = 250 * time.Millisecond

// checkRegionWindows checks every window of the rig's admissions against
// the bound of docs/regions.md for plan (its limit, window, links and
// faults), and returns the most admissions any window held.
func checkRegionWindows(t *testing.T, g *regionsRig, plan faults.RegionsPlan) int64 {
	t.Helper()
	c := plan.CheckRegions(g.admissions(), regionsSlack)
	if c.MaxOver > 0 {
		t.Errorf("the bound of docs/regions.md failed: %s", c.Violation)
	}
	return c.MaxInWindow
}

// regionsLimit and regionsWindow scale the issue's 100/10s down to a
// window of 2 s: the bounds of docs/regions.md are stated per window.
const (
	regionsLimit  = 100
	regionsWindow = 2 * time.Second
)

var regionsRule = fmt.Sprintf("user:%d/%v; fail:closed", regionsLimit, regionsWindow)

// regionsPlan describes a run of the rig at regionsRule for the checker.
func regionsPlan(rates []float64, d time.Duration, fs ...faults.RegionFault) faults.RegionsPlan {
	return faults.RegionsPlan{Limit: regionsLimit, Window: regionsWindow, Duration: d,
		MinLag: 30 * time.Millisecond, MaxLag: 80 * time.Millisecond, Batch: 10 * time.Millisecond,
		Rates: rates, Faults: fs}
}

// TestRegionsSteady runs three regions 30-80 ms apart, each with its own
// Redis, under even and 90/5/5 traffic at more than twice the limit: every
// window holds at most the bound of docs/regions.md, and the regions
// together use at least 95% of the limit over two windows. The share rule
// leaves up to about a round trip per window unused under even traffic,
// and R round trips under skewed traffic (a region takes a third of the
// headroom per round trip), so the even case runs 100/5s and the skewed
// one the 100/10s, side by side; a third case runs two processes
// (Limiters) per region.
func TestRegionsSteady(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rates  []float64
		window time.Duration
		procs  int
	}{
		{"even", []float64{20, 20, 20}, 5 * time.Second, 1},
		{"even, two processes per region", []float64{20, 20, 20}, 5 * time.Second, 2},
		{"90/5/5", []float64{18, 1, 1}, 10 * time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rule := fmt.Sprintf("user:%d/%v; fail:closed", regionsLimit, tc.window)
			g := startRegionsProcs(t, rule, 30*time.Millisecond, 80*time.Millisecond, tc.procs)
			stamps := g.watchStamps()
			d := 2 * tc.window
			g.drive(tc.rates, d)
			adm := g.admissions()
			plan := regionsPlan(tc.rates, d)
			plan.Window = tc.window
			most := checkRegionWindows(t, g, plan)
			// Two windows' worth of time: up to 2L, and at least 95% of it.
			if min := int(0.95 * 2 * regionsLimit); len(adm) < min {
				t.Errorf("%d admitted in %v, want at least %d (95%% of the limit)", len(adm), d, min)
			}
			// The steady-state bound near the limit, L + R - 1, in
			// windows of the stamps Redis keeps.
			at := stamps()
			byRedis := mostWithin(at, tc.window)
			if byRedis > regionsLimit+len(regionNames)-1 || len(at) != len(adm) {
				t.Errorf("by Redis's stamps: %d admissions, at most %d in a window; want %d, at most %d",
					len(at), byRedis, len(adm), regionsLimit+len(regionNames)-1)
			}
			t.Logf("%s: %d admitted in %v; most in any %v: %d by Redis's stamps, %d by the clients' clock",
				tc.name, len(adm), d, tc.window, byRedis, most)
		})
	}
}

// TestRegionsPartition cuts one region off from the others for a window
// while traffic continues everywhere: every window, during the cut and
// after it heals, holds at most the bound of docs/regions.md, and at most
// 110% of the limit (the target).
func TestRegionsPartition(t *testing.T) {
	rates := []float64{40, 40, 40}
	g := startRegionsRig(t, regionsRule, 30*time.Millisecond, 80*time.Millisecond)
	stamps := g.watchStamps()
	cutAt, d := regionsWindow*3/4, 3*regionsWindow
	cut := faults.RegionFault{Kind: faults.RegionPartition, Region: 1, At: cutAt, For: regionsWindow}
	done := make(chan struct{})
	go func() { defer close(done); g.drive(rates, d) }()
	time.Sleep(time.Until(g.start.Add(cutAt)))
	g.rs.Cut(1)
	time.Sleep(time.Until(g.start.Add(cutAt + regionsWindow)))
	g.rs.Heal(1)
	<-done
	// The cut's times as the test made them, which the checker needs.
	adm := g.admissions()
	most := checkRegionWindows(t, g, regionsPlan(rates, d, cut))
	byRedis := mostWithin(stamps(), regionsWindow)
	if most > regionsLimit*11/10 || byRedis > regionsLimit*11/10 {
		t.Errorf("a window of %v held %d (%d by Redis's stamps), above 110%% of %d", regionsWindow, most, byRedis, regionsLimit)
	}
	t.Logf("%d admitted in %v with region %s cut off for %v; most in any %v: %d by Redis's stamps, %d by the clients' clock",
		len(adm), d, regionNames[1], regionsWindow, regionsWindow, byRedis, most)
}

// TestRegionsLocalGroup checks that a group with regions:local stays in
// its region: each region admits the whole limit, while a replicated
// group's regions together admit it once (and the bound); on real servers
// 5-10 ms apart and on miniredis.
func TestRegionsLocalGroup(t *testing.T) {
	const limit = 20
	onMini := func(t *testing.T, rules string) *regionsRig {
		var cs []engine.Client
		for range regionNames {
			_, c := redistest.Mini(t)
			cs = append(cs, c)
		}
		return startRegionsClients(t, rules, 1, func(i int) engine.Client { return cs[i] },
			func(_, j int) engine.Client { return cs[j] })
	}
	onRedis := func(t *testing.T, rules string) *regionsRig {
		return startRegionsRig(t, rules, 5*time.Millisecond, 10*time.Millisecond)
	}
	for _, tc := range []struct {
		rules    string
		min, max int
	}{
		{fmt.Sprintf("user:%d/min; regions:local", limit), 3 * limit, 3 * limit},
		{fmt.Sprintf("user:%d/min", limit), limit, limit + len(regionNames) - 1},
	} {
		for name, start := range map[string]func(*testing.T, string) *regionsRig{"redis": onRedis, "miniredis": onMini} {
			t.Run(name+"/"+tc.rules, func(t *testing.T) {
				t.Parallel()
				g := start(t, tc.rules)
				// Each region in turn, until it has been denied for 600 ms:
				// by then every admission has been acknowledged.
				for r := range regionNames {
					for since := time.Now(); time.Since(since) < 600*time.Millisecond; {
						if g.ask(r) {
							since = time.Now()
							continue
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
				if n := len(g.admissions()); n < tc.min || n > tc.max {
					t.Errorf("the regions admitted %d, want %d to %d", n, tc.min, tc.max)
				}
			})
		}
	}
}

// TestRegionsShareDenialLifts checks that a burst in one region gets its
// share of the headroom again once its peers have acknowledged what it
// admitted, within a few round trips (docs/regions.md, The rule), not
// when its admissions leave the window.
func TestRegionsShareDenialLifts(t *testing.T) {
	g := startRegionsRig(t, "user:30/min", time.Millisecond, 2*time.Millisecond)
	burst := func() int {
		n := 0
		for g.ask(0) {
			n++
		}
		return n
	}
	// Region ap (index 0) may hold ⌊30/3⌋ = 10 unacknowledged admissions.
	if n := burst(); n != 10 {
		t.Fatalf("the first burst admitted %d, want 10", n)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !g.ask(0) {
		if time.Now().After(deadline) {
			t.Fatal("no admission 2 s after a burst acknowledged within milliseconds")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The round trip is about 5 ms; allow a loaded machine 300 ms.
	if took := time.Since(deadline.Add(-2 * time.Second)); took > 300*time.Millisecond {
		t.Errorf("the next admission came %v after the burst; want within a few round trips", took)
	}
}

// TestRegionsCloseLeavesNoGoroutine checks that a Limiter with regions,
// having replicated, returns every goroutine it started at Close.
func TestRegionsCloseLeavesNoGoroutine(t *testing.T) {
	rs := redistest.StartRegions(t, 2, time.Millisecond, 2*time.Millisecond)
	local, peer := regionClient(t, rs.Servers[0].Addr), regionClient(t, rs.Link(0, 1).Addr)
	local.Ping(context.Background())
	peer.Ping(context.Background())
	before := runtime.NumGoroutine()
	lim, err := slidelimit.New(local, slidelimit.WithKeyPrefix(redistest.Prefix(t)),
		slidelimit.WithRegions(slidelimit.Regions{Local: "eu", Peers: map[string]engine.Client{"us": peer}}),
		slidelimit.WithIdentity(func(*http.Request) (string, []string) { return "u", nil }))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := lim.Middleware("user:5/s", middleware.WithScope("api"))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 10 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api", nil))
	}
	rs.Cut(1) // a peer unreachable at Close must not hold it
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestRegionsBlockReplicated checks that a block: statement's block,
// started by a full window's denial in one region, reaches the others
// through the public API: their denials then report the block's wait (a
// minute), not the window's (ten seconds).
func TestRegionsBlockReplicated(t *testing.T) {
	g := startRegionsRig(t, "user:5/10s; block:1m", 5*time.Millisecond, 10*time.Millisecond)
	retryAfter := func(r int) (int, string) {
		w := httptest.NewRecorder()
		g.routes[r][0].ServeHTTP(w, httptest.NewRequest("GET", "/api", nil))
		return w.Code, w.Header().Get("Retry-After")
	}
	// The regions in turn until a denial says a minute: the window is
	// full, the block started (the share rule's denials before it start
	// none, and no region alone fills the window).
	blocked := -1
	redistest.Eventually(t, "a region blocked", func() bool {
		for r := range regionNames {
			code, ra := retryAfter(r)
			if n, err := strconv.Atoi(ra); code == http.StatusTooManyRequests && err == nil && n >= 50 {
				blocked = r
				return true
			}
		}
		time.Sleep(5 * time.Millisecond)
		return false
	})
	// The block's end, by region: one the region started itself would
	// end later than the first.
	ends := func() []string {
		var out []string
		for r := range regionNames {
			c := regionClient(t, g.rs.Servers[r].Addr)
			keys := c.Keys(context.Background(), g.prefix+"*:block").Val()
			if len(keys) != 1 {
				return nil
			}
			out = append(out, c.Get(context.Background(), keys[0]).Val())
		}
		return out
	}
	redistest.Eventually(t, "one block, ending at one time, in every region", func() bool {
		e := ends()
		return len(e) == len(regionNames) && e[0] == e[1] && e[1] == e[2]
	})
	for r := range regionNames {
		code, ra := retryAfter(r)
		if n, err := strconv.Atoi(ra); code != http.StatusTooManyRequests || err != nil || n < 50 {
			t.Errorf("region %d during region %d's block: %d, Retry-After %q; want blocked for a minute", r, blocked, code, ra)
		}
	}
	if e := ends(); len(e) != len(regionNames) || e[0] != e[1] || e[1] != e[2] {
		t.Errorf("the blocks' ends %v, want one", e)
	}
}
