package throttle

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/overrides"
	"github.com/slidelimit/slidelimit/internal/rulelimits"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// TestTransitStretch: a sliding window counts each call the transit bound
// longer, rounded up to whole grains; calendar and in-flight windows, and
// a bound of 0, change nothing; no period passes the longest allowed.
func TestTransitStretch(t *testing.T) {
	d := 50 * time.Millisecond
	for _, tc := range []struct {
		w      rules.Window
		bound  time.Duration
		period time.Duration
	}{
		{rules.Window{Limit: 60, Period: time.Minute}, d, time.Minute + d},
		{rules.Window{Limit: 10, Period: time.Second}, d, time.Second + d},
		{rules.Window{Limit: 10, Period: time.Second}, 0, time.Second},
		{rules.Window{Limit: 600, Period: time.Minute, Grain: time.Second}, d, time.Minute + time.Second},
		{rules.Window{Limit: 600, Period: time.Minute, Grain: 20 * time.Millisecond}, d, time.Minute + 60*time.Millisecond},
		{rules.Window{Limit: 5, Concurrent: true}, d, 0},
		{rules.Window{Limit: 5, Calendar: "day"}, d, 0},
		{rules.Window{Limit: 5, Period: rulelimits.MaxPeriod}, d, rulelimits.MaxPeriod},
	} {
		got := stretch([]rules.Window{tc.w}, tc.bound)[0]
		if got.Period != tc.period || got.Limit != tc.w.Limit || got.Grain != tc.w.Grain {
			t.Errorf("stretch(%s, %v) = %s (period %v), want period %v", tc.w, tc.bound, got, got.Period, tc.period)
		}
		if back := declared(got, tc.bound); back != tc.w && tc.w.Period < rulelimits.MaxPeriod {
			t.Errorf("declared(%s, %v) = %s, want %s", got, tc.bound, back, tc.w)
		}
	}
}

// TestTransitRequest: the engine request of a throttle counts its sliding
// windows the transit bound longer, limit functions' windows included,
// and reports the windows as declared.
func TestTransitRequest(t *testing.T) {
	g, err := overrides.Group("api", "global:10/s,5/calendar day; key(k):$quota/min; global:2 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	th := &Throttle{name: "api", cfg: Config{Transit: 50 * time.Millisecond, ConfigError: func(err error) error { return err }},
		limits: map[string]func(context.Context) (int64, error){"quota": func(context.Context) (int64, error) { return 7, nil }}}
	p, err := th.Compile(g)
	if err != nil {
		t.Fatal(err)
	}
	req, _, err := p.request(context.Background(), Call{Keys: map[string]string{"k": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for _, c := range req.Checks {
		for _, w := range c.Windows {
			got = append(got, w.Period)
		}
	}
	want := []time.Duration{time.Second + 50*time.Millisecond, 0, time.Minute + 50*time.Millisecond, 0}
	if len(got) != len(want) {
		t.Fatalf("periods %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("periods %v, want %v", got, want)
			break
		}
	}
	if l := req.Checks[1].Windows[0].Limit; l != 7 {
		t.Errorf("the limit function's window has limit %d, want 7", l)
	}
	if s := p.g.String(); s != g.String() {
		t.Errorf("the plan's rules read %q, want %q as declared", s, g.String())
	}
}

// TestTransitCalendarHold: in the last transit bound of a calendar
// period a call waits to the boundary, in the group's zone; elsewhere,
// and with a bound of 0, it does not wait.
func TestTransitCalendarHold(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	d := 50 * time.Millisecond
	midnight := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	monday := time.Date(2026, 12, 14, 0, 0, 0, 0, paris) // a Monday
	for _, tc := range []struct {
		name string
		p    Plan
		now  time.Time
		want time.Duration
	}{
		{"day, 30ms before midnight", Plan{transit: d, cals: []string{"day"}, zone: time.UTC}, midnight.Add(-30 * time.Millisecond), 30 * time.Millisecond},
		{"day, 50ms before midnight", Plan{transit: d, cals: []string{"day"}, zone: time.UTC}, midnight.Add(-d), 0},
		{"day, at midnight", Plan{transit: d, cals: []string{"day"}, zone: time.UTC}, midnight, 0},
		{"day, bound 0", Plan{cals: []string{"day"}, zone: time.UTC}, midnight.Add(-time.Millisecond), 0},
		{"no calendar", Plan{transit: d, zone: time.UTC}, midnight.Add(-time.Millisecond), 0},
		{"week in Paris", Plan{transit: d, cals: []string{"day", "week"}, zone: paris}, monday.Add(-10 * time.Millisecond), 10 * time.Millisecond},
		{"UTC midnight in Paris", Plan{transit: d, cals: []string{"day"}, zone: paris}, midnight.Add(-10 * time.Millisecond), 0},
	} {
		if got := tc.p.hold(tc.now); got != tc.want {
			t.Errorf("%s: hold = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestTransitCalendarWait: a Wait within the transit bound of a calendar
// period's end waits for it, and when its context ends first returns
// having counted nothing. A bound of a day puts every instant there.
func TestTransitCalendarWait(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	eng, err := engine.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	g, err := overrides.Group("api", "global:5/calendar day")
	if err != nil {
		t.Fatal(err)
	}
	th, err := New(Config{Name: "api", Engine: eng, Client: client, Transit: 25 * time.Hour}, g)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if p, err := th.Wait(ctx, Call{}); !errors.Is(err, context.DeadlineExceeded) {
		if p != nil {
			p.Finish(nil)
		}
		t.Fatalf("Wait = %v, want it held to the day's end until its context ended", err)
	}
	if p, ok, err := th.Allow(context.Background(), Call{}); ok || err != nil {
		if p != nil {
			p.Finish(nil)
		}
		t.Fatalf("Allow = %v, %v, want no admission within the transit bound of the day's end", ok, err)
	}
	d, err := eng.Peek(context.Background(), engine.One("api", rules.Global, "global", rules.Window{Limit: 5, Calendar: "day"}))
	if err != nil {
		t.Fatal(err)
	}
	if used := d.Windows[0].Used; used != 0 {
		t.Errorf("the day counts %d calls, want 0", used)
	}
}

// TestTransitHookWindow: the decision hooks see a throttle's window as
// declared, not as the engine counts it.
func TestTransitHookWindow(t *testing.T) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	eng, err := engine.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	g, err := overrides.Group("api", "global:5/s")
	if err != nil {
		t.Fatal(err)
	}
	var seen []rules.Window
	hook := func(ev middleware.Event) { seen = append(seen, ev.Window) }
	th, err := New(Config{Name: "api", Engine: eng, Client: client, Transit: 50 * time.Millisecond,
		Hooks: []func(middleware.Event){hook}}, g)
	if err != nil {
		t.Fatal(err)
	}
	defer th.Close()
	p, err := th.Wait(context.Background(), Call{})
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	if len(seen) != 1 || seen[0].Period != time.Second || seen[0].Limit != 5 {
		t.Errorf("the hook saw %v, want the window 5/s", seen)
	}
}

// TestTransitNeverFitsWindow: a cost above a stretched window's limit is
// reported with the window as declared.
func TestTransitNeverFitsWindow(t *testing.T) {
	d := 50 * time.Millisecond
	declared := rules.Window{Limit: 1000, Period: time.Minute}
	l := rules.Rule{Kind: rules.Global, Cost: "tokens", Windows: stretch([]rules.Window{declared}, d)}
	req := &engine.Request{Checks: []engine.Check{{Rule: l, Cost: 1001}}}
	err := tooBig(req, d)
	if !errors.Is(err, ErrNeverFits) {
		t.Fatalf("tooBig = %v, want ErrNeverFits", err)
	}
	if want, stretched := declared.String(), l.Windows[0].String(); !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), stretched) {
		t.Errorf("tooBig = %q, want the declared window %s, not %s", err, want, stretched)
	}
	if err := tooBig(&engine.Request{Checks: []engine.Check{{Rule: l, Cost: 1000}}}, d); err != nil {
		t.Errorf("a cost of the whole limit: %v", err)
	}
}
