package engine

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/rules"
)

// TestCachedDenialCalendarCost checks that a calendar window of a limiter
// with a cost makes no cached denial of a request that fits: a denial of a
// large request says nothing of a smaller one.
func TestCachedDenialCalendarCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ws   []rules.Window
	}{
		{"calendar only", []rules.Window{calWin(1000, rules.CalendarMonth)}},
		{"with a sliding window", []rules.Window{win(1_000_000, time.Hour), calWin(1000, rules.CalendarMonth)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rc := startRedis(t)
			e := newEngine(t, rc, WithPrefix(testPrefix(t)))
			waitTrusted(t, e)
			lim := rules.Limiter{Kind: rules.User, Cost: "bytes", Windows: tc.ws}
			r := func(cost int64) Request {
				return Request{Scope: "s", Checks: []Check{{Limiter: lim, Subject: "alice", Cost: cost}}, Fail: rules.FailClosed}
			}
			ctx := context.Background()
			for i, s := range []struct {
				cost  int64
				allow bool
				used  int64
			}{
				{600, true, 600},
				{600, false, 600},
				{600, false, 600},
				{100, true, 700},
				{300, true, 1000},
				{1, false, 1000},
			} {
				d, err := e.Allow(ctx, r(s.cost))
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed != s.allow {
					t.Fatalf("step %d (cost %d): allowed %v (source %v), want %v", i, s.cost, d.Allowed, d.Source, s.allow)
				}
				if u := calState(t, d).Used; u != s.used {
					t.Fatalf("step %d (cost %d, source %v): calendar used %d, want %d", i, s.cost, d.Source, u, s.used)
				}
			}
			// Nor does it seed the fallback, which would store a unit of
			// cost per entry: a month of bytes.
			key := string(e.keyer.appendKey(nil, "s", rules.User, "", "bytes", "alice")) + calSuffix + string(rules.CalendarMonth)
			if _, ok := e.known.get(key); ok {
				t.Errorf("the cache keeps %s", key)
			}
		})
	}
}

// TestCachedDenialCalendarBoundary checks under a test clock that a
// calendar window filled by an admission just before its period ends
// makes no cached denial after the boundary: the window is empty there.
func TestCachedDenialCalendarBoundary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ws   []rules.Window
	}{
		{"calendar only", []rules.Window{calWin(1, rules.CalendarDay)}},
		{"with a sliding window", []rules.Window{win(100, time.Hour), calWin(1, rules.CalendarDay)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rc := startRedis(t)
			clk := newFakeClock()
			e := newEngine(t, rc, WithPrefix(testPrefix(t)), WithClock(clk.Now))
			waitTrusted(t, e)
			r := req(user("u", tc.ws...))
			midnight := t0.Add(24 * time.Hour)
			clk.us.Store(midnight.Add(-400 * ms).UnixMicro())
			mustAllow(t, e, r, true)
			d, err := e.Allow(context.Background(), r)
			if err != nil || d.Allowed || d.RetryAfter != 400*ms {
				t.Fatalf("before midnight: allowed %v retry %v err %v; want a denial for 400ms", d.Allowed, d.RetryAfter, err)
			}
			clk.us.Store(midnight.UnixMicro())
			if d, err := e.Allow(context.Background(), r); err != nil || !d.Allowed {
				t.Errorf("at midnight: allowed %v source %v err %v; want admitted", d.Allowed, d.Source, err)
			}
		})
	}
}
