package slidelimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit"
	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// reset resets the rig's user in region r's first process, and records
// the call (sent, answered) for resetCalls.
func (g *regionsRig) reset(r int) {
	at := time.Since(g.start)
	err := g.lims[r][0].Reset(context.Background(), "api", "user", "u", false)
	done := time.Since(g.start)
	if err != nil {
		return // the region's Redis is down: no reset, none recorded
	}
	g.mu.Lock()
	g.resets = append(g.resets, faults.RegionAdmission{Region: r, At: at, Done: done})
	g.mu.Unlock()
}

// resetCalls returns the resets recorded so far.
func (g *regionsRig) resetCalls() []faults.RegionAdmission {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]faults.RegionAdmission(nil), g.resets...)
}

// TestRegionsResetPublic checks Limiter.Reset under regions through the
// public API, on three redis-servers 5-10 ms apart: a user blocked in
// every region (a full window's block, replicated) is admitted again in
// every region within the lag of a reset made in eu; a regions:local
// group's reset lifts eu only.
func TestRegionsResetPublic(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		rules string
		local bool
	}{
		{"user:5/10s; block:1m", false},
		{"user:5/10s; block:1m; regions:local", true},
	} {
		t.Run(tc.rules, func(t *testing.T) {
			g := startRegionsRig(t, tc.rules, 5*time.Millisecond, 10*time.Millisecond)
			// Every region blocked for the minute: the limit taken, a
			// block started and replicated (or, regional, each region's
			// own).
			blocked := func(r int) bool {
				w := httptest.NewRecorder()
				g.routes[r][0].ServeHTTP(w, httptest.NewRequest("GET", "/api", nil))
				n, err := strconv.Atoi(w.Header().Get("Retry-After"))
				return w.Code == http.StatusTooManyRequests && err == nil && n >= 50
			}
			redistest.Eventually(t, "every region blocked", func() bool {
				all := true
				for r := range regionNames {
					all = blocked(r) && all
				}
				return all
			})
			start := time.Now()
			if err := g.lims[1][0].Reset(ctx, "api", "user", "u", false); err != nil {
				t.Fatal(err)
			}
			if tc.local {
				if !g.ask(1) {
					t.Error("eu denies after its reset")
				}
				time.Sleep(200 * time.Millisecond) // a replicated reset would have arrived
				for _, r := range []int{0, 2} {
					if g.ask(r) {
						t.Errorf("a regional reset in eu lifted region %d", r)
					}
				}
				return
			}
			for r := range regionNames {
				redistest.Eventually(t, "region "+strconv.Itoa(r)+" admits after eu's reset", func() bool { return g.ask(r) })
			}
			took := time.Since(start)
			t.Logf("every region admits %v after the reset", took.Round(time.Millisecond))
			if took > time.Second {
				t.Errorf("the reset reached every region after %v; the lag is 10-20 ms a round trip", took)
			}
		})
	}
}

// TestRegionsSetRulesLocal pins what SetRules does under regions today: an
// override is stored in the region's own Redis and reaches that region's
// processes only (the peers' keep the code's group), and an override
// the regions refuse (a calendar window without regions:local) is a
// *ConfigError that stores nothing. eu's override of user:10/min by
// user:2/min holds eu to its share of 2 (1), while us keeps its share of
// 10 (3 or 4).
func TestRegionsSetRulesLocal(t *testing.T) {
	ctx := context.Background()
	var clients []*redis.Client
	for range regionNames {
		_, c := redistest.Mini(t)
		clients = append(clients, c)
	}
	lims := regionLimiters(t, clients, redistest.Prefix(t))
	muxes := make([]*http.ServeMux, len(regionNames))
	for i, lim := range lims {
		muxes[i] = http.NewServeMux()
		if err := lim.Handle(muxes[i], "GET /x", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "user:10/min"); err != nil {
			t.Fatal(err)
		}
	}
	var ce *slidelimit.ConfigError
	if err := lims[1].SetRules(ctx, "GET /x", "user:5/calendar day"); !errors.As(err, &ce) {
		t.Errorf("an override with a calendar window under regions: %v, want a *ConfigError", err)
	}
	if err := lims[1].SetRules(ctx, "GET /x", "user:2/min"); err != nil {
		t.Fatal(err)
	}
	for i, lim := range lims {
		_, in, err := lim.RuleOverrides(ctx)
		if want := map[bool]int{true: 1, false: 0}[i == 1]; err != nil || len(in) != want {
			t.Errorf("region %d holds overrides %v (%v), want %d", i, in, err, want)
		}
	}
	burst := func(r int) int {
		n := 0
		for {
			w := httptest.NewRecorder()
			muxes[r].ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
			if w.Code != http.StatusOK {
				return n
			}
			n++
		}
	}
	redistest.Eventually(t, "eu follows its override", func() bool { return burst(1) == 1 })
	// us's share of the code's 10: 4, or 3 once eu's admission arrived.
	if n := burst(2); n < 3 || n > 4 {
		t.Errorf("us admitted %d at once, want its share of the code's 10 (3 or 4)", n)
	}
}
