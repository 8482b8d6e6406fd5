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
