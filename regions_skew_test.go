package slidelimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/middleware"
)

// skewRig is three regions on three miniredis servers whose clocks the
// test sets: region i's script reads its own server's TIME, the reference
// clock plus offset[i]. Peers reach each other's server directly.
type skewRig struct {
	minis  []*miniredis.Miniredis
	lims   []*slidelimit.Limiter
	routes []http.Handler
}

// startSkewRig starts the three regions deciding rulesText for user "u".
func startSkewRig(t *testing.T, rulesText string) *skewRig {
	t.Helper()
	g := &skewRig{}
	clients := make([]*redis.Client, len(regionNames))
	for i := range regionNames {
		m, c := redistest.Mini(t)
		g.minis, clients[i] = append(g.minis, m), c
	}
	// The servers' clocks run ahead of the local one, which cached
	// denials measure time by: every decision asks Redis.
	lims := regionLimiters(t, clients, redistest.Prefix(t), slidelimit.WithEngineOptions(engine.WithCachedDenials(false)))
	for _, lim := range lims {
		mw, err := lim.Middleware(rulesText, middleware.WithScope("api"))
		if err != nil {
			t.Fatal(err)
		}
		g.lims = append(g.lims, lim)
		g.routes = append(g.routes, mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	}
	return g
}

// regionLimiters starts a Limiter per region of regionNames on clients
// (in that order), each the others' peer, deciding for user "u", with
// opts after those; they close when the test ends.
func regionLimiters(t *testing.T, clients []*redis.Client, prefix string, opts ...slidelimit.Option) []*slidelimit.Limiter {
	t.Helper()
	lims := make([]*slidelimit.Limiter, len(regionNames))
	for i, name := range regionNames {
		peers := map[string]engine.Client{}
		for j, p := range regionNames {
			if j != i {
				peers[p] = clients[j]
			}
		}
		lim, err := slidelimit.New(clients[i], append([]slidelimit.Option{slidelimit.WithKeyPrefix(prefix),
			slidelimit.WithRegions(slidelimit.Regions{Local: name, Peers: peers}),
			slidelimit.WithIdentity(func(*http.Request) (string, []string) { return "u", nil })}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		lims[i] = lim
	}
	return lims
}

// drained waits until every region's peers have applied every admission
// (no queue left), for at most a generous deadline.
func (g *skewRig) drained(t *testing.T) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		left := 0
		for _, l := range g.lims {
			for _, s := range l.RegionStats() {
				left += s.Queue
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("replication did not drain within 5 s")
}

// run drives the regions on the reference clock from base for d in steps
// of step, each region asking once per step after the clocks are set to
// base plus the step plus their offsets, and replication is left to
// drain. It returns the admissions' reference times.
func (g *skewRig) run(t *testing.T, base time.Time, offsets []time.Duration, d, step time.Duration) []time.Duration {
	var adm []time.Duration
	for at := time.Duration(0); at < d; at += step {
		for i, m := range g.minis {
			m.SetTime(base.Add(at + offsets[i]))
		}
		for k := range g.routes {
			r := (k + int(at/step)) % len(g.routes) // each region in turn goes first
			w := httptest.NewRecorder()
			g.routes[r].ServeHTTP(w, httptest.NewRequest("GET", "/api", nil))
			if w.Code == http.StatusOK {
				adm = append(adm, at)
			}
		}
		g.drained(t)
	}
	return adm
}

// skewExcess reports the reference window (a-w, a], ending at an
// admission a, that holds the most admissions beyond limit plus the
// admissions of its first span eps: the bound of docs/regions.md (Clock
// skew) is exceeded where the excess is positive. It returns that excess,
// the window's end and its count.
func skewExcess(adm []time.Duration, w, eps time.Duration, limit int) (excess int, end time.Duration, most int) {
	excess = -1 << 30
	for _, a := range adm {
		in, head := 0, 0
		for _, b := range adm {
			if b > a-w && b <= a {
				in++
				if b <= a-w+eps {
					head++
				}
			}
		}
		if in-limit-head > excess {
			excess, end = in-limit-head, a
		}
		most = max(most, in)
	}
	return excess, end, most
}

// TestRegionsClockSkew runs three regions whose Redis clocks disagree by
// fixed offsets (0, +300 ms, -200 ms: a skew of ε = 500 ms between the
// fastest and the slowest) at 20 per 2 s, every region asking far above
// the limit, on miniredis, whose TIME the test sets (a real redis-server's
// TIME cannot be offset without faketime). Counted on the reference clock,
// every window of 2 s holds at most L + R - 1 plus the admissions of its
// first ε, the bound docs/regions.md states for skew; with no skew the same
// run holds at most L + R - 1, and the skewed one more (the skew reaches
// the scripts). Each step waits for replication to drain, so the lag is
// nil on the reference clock and only the skew widens the bound.
func TestRegionsClockSkew(t *testing.T) {
	const limit, window = 20, 2 * time.Second
	rule := "user:20/2s; fail:closed"
	base := time.Now().Truncate(time.Second)
	for _, c := range []struct {
		name    string
		offsets []time.Duration
	}{
		{"skew", []time.Duration{0, 300 * time.Millisecond, -200 * time.Millisecond}},
		{"none", []time.Duration{0, 0, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startSkewRig(t, rule)
			adm := g.run(t, base, c.offsets, 3*window, 25*time.Millisecond)
			eps := max(c.offsets[0], c.offsets[1], c.offsets[2]) - min(c.offsets[0], c.offsets[1], c.offsets[2])
			excess, end, most := skewExcess(adm, window, eps, limit+len(regionNames)-1)
			t.Logf("skew %v: %d admitted, at most %d in a window, excess over the bound %d (window ending %v)",
				eps, len(adm), most, excess, end)
			if excess > 0 {
				t.Errorf("skew %v: the window ending %v holds %d beyond L + R - 1 plus its first %v's admissions",
					eps, end, excess, eps)
			}
			if eps > 0 && most <= limit+len(regionNames)-1 {
				t.Errorf("skew %v: at most %d in a window: the skew did not reach the scripts", eps, most)
			}
			if len(adm) < 2*limit {
				t.Errorf("%d admitted in 3 windows of %d: the regions barely admit", len(adm), limit)
			}
		})
	}
}

// TestRegionsShareDenialHeader checks that a request denied by the share
// rule alone (region eu, index 1 of 3, whose peers never acknowledge: a
// share of floor((10 + 1) / 3) = 3 of an empty window of 10) is a 429
// whose RateLimit field reports r=0: the region admits nothing more now,
// though the window holds only 3.
func TestRegionsShareDenialHeader(t *testing.T) {
	_, mc := redistest.Mini(t)
	_, rc := redistest.StartClient(t)
	for name, c := range map[string]*redis.Client{"miniredis": mc, "redis": rc} {
		t.Run(name, func(t *testing.T) {
			peers := map[string]engine.Client{}
			for _, p := range []string{"ap", "us"} {
				d := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 20 * time.Millisecond})
				t.Cleanup(func() { d.Close() })
				peers[p] = d
			}
			lim, err := slidelimit.New(c, slidelimit.WithKeyPrefix(redistest.Prefix(t)),
				slidelimit.WithRegions(slidelimit.Regions{Local: "eu", Peers: peers}),
				slidelimit.WithIdentity(func(*http.Request) (string, []string) { return "u", nil }))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			mw, err := lim.Middleware("user:10/1m; fail:closed", middleware.WithScope("api"))
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			for i := range 4 {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest("GET", "/api", nil))
				if want := map[bool]int{true: 200, false: 429}[i < 3]; w.Code != want {
					t.Fatalf("request %d: status %d, want %d", i, w.Code, want)
				}
				rl := w.Header().Get("RateLimit")
				if i == 3 && !strings.Contains(rl, ";r=0;") {
					t.Errorf("share denial: RateLimit %q, want r=0", rl)
				}
				if i == 2 && !strings.Contains(rl, ";r=7;") {
					t.Errorf("third admission: RateLimit %q, want the ordinary r=7", rl)
				}
			}
		})
	}
}
