package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/denials"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
	"github.com/slidelimit/slidelimit/rules"
)

// TestCachedDenialCalendarCost checks that a calendar window of a rule
// with a cost makes no cached denial of a request that fits: a denial of a
// large request says nothing of a smaller one.
func TestCachedDenialCalendarCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ws   []rules.Window
	}{
		{"calendar only", []rules.Window{calWin(1000, ruletime.Month)}},
		{"with a sliding window", []rules.Window{win(1_000_000, time.Hour), calWin(1000, ruletime.Month)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rc := redistest.StartClient(t)
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)))
			waitTrusted(t, e)
			lim := rules.Rule{Kind: rules.User, Cost: "bytes", Windows: tc.ws}
			r := func(cost int64) Request {
				return Request{Scope: "s", Checks: []Check{{Rule: lim, Subject: "alice", Cost: cost}}, Fail: rules.FailClosed}
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
			// The cache keeps the month's bytes for the fallback, which
			// seeds them as one entry (TestFallbackSeedCost).
			key := string(e.keyer.AppendKey(nil, "s", rules.User, "", "bytes", "alice")) + plan.CalSuffix + string(ruletime.Month)
			kn, ok := e.known.Get(key)
			if kw := kn.Find(plan.Window{Period: plan.CalNominal(ruletime.Month), Limit: 1000}); !ok || kw == nil || kw.Used != 1000 {
				t.Errorf("the cache knows %s as %+v, %v; want its month at 1000 bytes", key, kn.Wins, ok)
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
		{"calendar only", []rules.Window{calWin(1, ruletime.Day)}},
		{"with a sliding window", []rules.Window{win(100, time.Hour), calWin(1, ruletime.Day)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, rc := redistest.StartClient(t)
			clk := redistest.NewClock()
			e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now))
			waitTrusted(t, e)
			r := req(user("u", tc.ws...))
			midnight := redistest.Epoch.Add(24 * time.Hour)
			clk.SetTime(midnight.Add(-400 * ms))
			mustAllow(t, e, r, true)
			d, err := e.Allow(context.Background(), r)
			if err != nil || d.Allowed || d.RetryAfter != 400*ms {
				t.Fatalf("before midnight: allowed %v retry %v err %v; want a denial for 400ms", d.Allowed, d.RetryAfter, err)
			}
			clk.SetTime(midnight)
			if d, err := e.Allow(context.Background(), r); err != nil || !d.Allowed {
				t.Errorf("at midnight: allowed %v source %v err %v; want admitted", d.Allowed, d.Source, err)
			}
		})
	}
}

// TestCachedCalendarColocated checks that a calendar key known in its
// rate key's cache entry reads as a key of its own (what the fallback
// seeds from), that the rate key reads without it, and that an
// invalidation of the calendar key forgets both.
func TestCachedCalendarColocated(t *testing.T) {
	t.Parallel()
	e := &Engine{keyer: newKeyer(&config{prefix: "p:"}), known: denials.New(100)}
	r := req(user("u", win(100, time.Hour), calWin(5, ruletime.Month)))
	c := getCall()
	defer putCall(c)
	if err := buildPlan(&c.plan, e.keyer, &r); err != nil {
		t.Fatal(err)
	}
	c.prepare()
	if len(c.plan.Keys) != 2 || !c.plan.Colocated(1) || c.plan.Colocated(0) {
		t.Fatalf("keys %q: want a rate key and its colocated calendar key", c.plan.Keys)
	}
	rate, cal := strings.Clone(c.plan.Keys[0]), strings.Clone(c.plan.Keys[1])
	c.status, c.mode = codec.StatusDenied, opPeek
	c.res = []int64{7, 3_000_000_000, 0, 5, 86_400_000_000, 86_400_000_000}
	storeKnown(e.known, c, 10, 20, 30)
	if got, ok := e.known.Get(rate); !ok || len(got.Wins) != 1 || got.Wins[0].Period != 3_600_000_000 || got.Wins[0].Used != 7 {
		t.Errorf("rate key: %+v %v, want its hour window only", got.Wins, ok)
	}
	got, ok := e.known.Get(cal)
	if want := (denials.Win{Period: plan.CalNominal(ruletime.Month), Limit: 5, Used: 5, Reset: 86_400_000_000, Wait: 86_400_000_000}); !ok || len(got.Wins) != 1 || got.Wins[0] != want || got.Sent != 10 || got.Recv != 20 || got.Wall != 30 {
		t.Errorf("calendar key: %+v %v, want %+v from the same answer", got, ok, want)
	}
	e.known.Invalidate(cal, 40)
	if _, ok := e.known.Get(rate); ok {
		t.Error("the rate key's entry outlived an invalidation of its calendar key")
	}
	if _, ok := e.known.Get(cal); ok {
		t.Error("the calendar key outlived its invalidation")
	}
}

// TestCalArgsKinds checks the form of a calendar key's fields in one
// script call: 'P' first, 'q' for the same key with the same fields right
// after, 'Q' when the limit differs or another calendar key came between,
// and 'P' again in the next call.
func TestCalArgsKinds(t *testing.T) {
	t.Parallel()
	mk := func(subject string, limit int64) *call {
		return plannedCall(t, req(user(subject, win(10, time.Minute), calWin(limit, ruletime.Month))))
	}
	var f codec.Args
	now := redistest.Epoch.UnixMicro()
	kind := func(c *call) string {
		f.Op(nil, &c.plan, []int32{1}, false) // key 1: the calendar key
		for i := len(f.Ends) - 1; i > 0; i-- {
			if v := string(f.Buf[f.Ends[i-1]:f.Ends[i]]); v == "P" || v == "Q" || v == "q" {
				return v
			}
		}
		return ""
	}
	f.Reset(now)
	var got []string
	for _, c := range []*call{mk("u", 5), mk("u", 5), mk("u", 6), mk("u", 6), mk("v", 6), mk("u", 6)} {
		got = append(got, kind(c))
	}
	f.Begin(now)
	got = append(got, kind(mk("u", 6)))
	if want := "P q Q q Q Q P"; strings.Join(got, " ") != want {
		t.Errorf("kinds %q, want %q", strings.Join(got, " "), want)
	}
}
