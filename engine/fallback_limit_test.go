package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// TestFallbackSeedLimitChanged: the fallback starts a subject from the
// count Redis last reported, whatever limit that answer was made under. A
// limit function ($quota) or a rule override may check a request against
// a limit below what the window holds; its answer says so (4 used of 2),
// and the fallback, deciding a request of a higher limit (5), must start
// from the 4 entries, not from the 2 its limit had room for: at most 5−4
// more (found by TestFaults, miniredis seed 1 with limit functions).
func TestFallbackSeedLimitChanged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cost string
		unit int64
	}{
		{"count", "", 1},
		{"bytes", "bytes", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, clk, e := miniEngine(t, rules.FailLocal, WithKeyPrefix(redistest.Prefix(t)))
			req := func(limit int64) Request {
				w := rules.Window{Limit: limit * tc.unit, Period: time.Minute, LimitFunc: "quota"}
				l := rules.Rule{Kind: rules.User, Cost: tc.cost, Windows: []rules.Window{w}}
				return Request{Scope: "s", Checks: []Check{{Rule: l, Subject: "alice", Cost: tc.unit}}}
			}
			ctx := context.Background()
			for i := range 4 {
				if d, err := e.Allow(ctx, req(8)); err != nil || !d.Allowed || d.Source != "redis" {
					t.Fatalf("request %d of limit 8: %+v, %v", i, d, err)
				}
			}
			if d, err := e.Allow(ctx, req(2)); err != nil || d.Allowed || d.Source != "redis" {
				t.Fatalf("request of limit 2: %+v, %v; want denied by Redis", d, err)
			}
			m.Close()
			clk.Set(time.Second)
			admitted := 0
			for range 5 {
				d, err := e.Allow(ctx, req(5)) // err reports Redis's failure
				if d.Source != "local" {
					t.Fatalf("request of limit 5 with Redis down: %+v, %v; want decided by the fallback", d, err)
				}
				if d.Allowed {
					admitted++
				}
			}
			if admitted != 1 {
				t.Fatalf("the fallback admitted %d requests of limit 5 after Redis reported 4 used; want 1", admitted)
			}
		})
	}
}

// TestFallbackSeedCalendarAfterGiveBack: a give-back invalidates what the
// process knew of a subject, and the fallback then starts from the answer
// it cleared (seedOf) — its calendar window too, which a group without a
// cost or block keeps in its rate key's cache entry: the calendar key
// started from nothing, and a day at 2 of 3 gave 3 more instead of 1
// (found by TestFaults, miniredis seed 4156674472817935029).
func TestFallbackSeedCalendarAfterGiveBack(t *testing.T) {
	t.Parallel()
	m, clk, e := miniEngine(t, rules.FailLocal, WithKeyPrefix(redistest.Prefix(t)))
	req := Request{Scope: "s", Checks: []Check{{
		Rule:    rules.Rule{Kind: rules.User, Windows: []rules.Window{win(100, time.Minute), calWin(3, ruletime.Day)}},
		Subject: "alice",
	}}}
	ctx := context.Background()
	var last Decision
	for i := range 2 {
		d, err := e.Allow(ctx, req)
		if err != nil || !d.Allowed || d.Source != "redis" {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		last = d
	}
	if err := e.Finish(ctx, last, Outcome{GiveBack: true}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	clk.Set(time.Second)
	admitted := 0
	for range 4 {
		d, _ := e.Allow(ctx, req) // the error reports Redis's failure
		if d.Source != "local" {
			t.Fatalf("with Redis down: %+v; want decided by the fallback", d)
		}
		if d.Allowed {
			admitted++
		}
	}
	// The cleared answer said 2 of 3: it errs on denying (docs/operations.md).
	if admitted != 1 {
		t.Fatalf("the fallback admitted %d in a day Redis last saw at 2 of 3; want 1", admitted)
	}
}
