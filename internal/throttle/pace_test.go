package throttle

import (
	"slices"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/faults"
	"github.com/slidelimit/slidelimit/rules"
)

// TestModelConstants: the fault harness's model (internal/faults) bounds
// the throttle by the pacing factor and the share credit it runs with.
func TestModelConstants(t *testing.T) {
	if paceFactor != faults.PaceFactor || shareCredit != faults.ShareCredit {
		t.Errorf("pacing factor %v and share credit %d, the model's %v and %d", paceFactor, shareCredit,
			faults.PaceFactor, faults.ShareCredit)
	}
}

// TestPaceNext: the schedule of a paced lane. Admissions on time move
// the next slot g on; late ones (a slow hand-off) catch up, at most
// paceLag behind.
func TestPaceNext(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	t.Run("on time", func(t *testing.T) {
		ln := &lane{}
		const g = 50 * time.Millisecond
		// After an idle spell: the schedule starts again, with no burst.
		if got := ln.paceNext(t0, g, 0, false); got != g {
			t.Fatalf("first admission: next ask in %v, want %v", got, g)
		}
		// On time: g apart.
		now := t0.Add(g)
		for i := range 5 {
			if got := ln.paceNext(now, g, 0, true); got != g {
				t.Fatalf("on-time admission %d: next ask in %v, want %v", i, got, g)
			}
			now = now.Add(g)
		}
		// 30 ms late: the next ask comes 20 ms after it, keeping the rate.
		now = now.Add(30 * ms)
		if got := ln.paceNext(now, g, 0, true); got != 20*ms {
			t.Fatalf("late admission: next ask in %v, want 20ms", got)
		}
		if ln.wakeAt != now.Add(20*ms) {
			t.Fatalf("wakeAt %v after the admission, want %v", ln.wakeAt.Sub(now), 20*ms)
		}
		// A call that did not wait, after an idle spell: a new schedule.
		now = now.Add(10 * time.Second)
		if got := ln.paceNext(now, g, 0, false); got != g {
			t.Fatalf("admission after an idle spell: next ask in %v, want %v", got, g)
		}
		// A queued call far behind (a hand-off slower than g): the next
		// asks come at once until paceLag is caught up.
		now = now.Add(time.Second)
		for i, want := range []time.Duration{0, 0, 0, 0, 0, g} {
			if got := ln.paceNext(now, g, 0, true); got != want {
				t.Fatalf("busy admission %d far behind: next ask in %v, want %v", i, got, want)
			}
		}
	})
	t.Run("groups", func(t *testing.T) {
		// 100/s: slots 10 ms apart are asked in groups of 3 (paceGroup
		// 30 ms), each group 30 ms after the last.
		ln := &lane{}
		const g = 10 * time.Millisecond
		now := t0
		var waits []time.Duration
		for i := range 9 {
			d := ln.paceNext(now, g, 0, i > 0) // the first did not wait: a new schedule
			waits = append(waits, d)
			now = now.Add(d)
		}
		want := []time.Duration{0, 0, 30 * ms, 0, 0, 30 * ms, 0, 0, 30 * ms}
		if !slices.Equal(waits, want) {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	})
	t.Run("spread from now", func(t *testing.T) {
		// A burst ran the schedule 500 ms ahead of now; the admission that
		// fills the window spreads the room left (none) over the 1 s until
		// its oldest entry leaves: the next slot is 1 s from now, when the
		// window has room, not 1 s after the schedule's last slot.
		ln := &lane{paceAt: t0.Add(500 * ms)}
		const g = 160 * time.Millisecond
		if got := ln.paceNext(t0, g, time.Second, true); got != time.Second {
			t.Fatalf("after a filling admission: next ask in %v, want 1s", got)
		}
		// A spread shorter than the schedule's next slot leaves it.
		ln = &lane{paceAt: t0.Add(500 * ms)}
		if got := ln.paceNext(t0, g, 100*ms, true); got != 660*ms {
			t.Fatalf("with a short spread: next ask in %v, want 660ms", got)
		}
	})
	t.Run("slow hand-off", func(t *testing.T) {
		// 100/s, admissions 2 or 15 ms after the ask they were told
		// (8.5 ms on average): the late ones are caught up, so 40
		// admissions take about 400 ms, the rate of g, not 40 × 12.5.
		ln := &lane{paceAt: t0}
		const g = 10 * time.Millisecond
		now := t0
		for i := range 40 {
			handOff := 2 * ms
			if i%2 == 1 {
				handOff = 15 * ms
			}
			now = now.Add(ln.paceNext(now, g, 0, true) + handOff)
		}
		if span := now.Sub(t0); span > 420*ms {
			t.Fatalf("40 admissions spanned %v with a hand-off of 8.5 ms on average, want about 400 ms (the rate of g)", span)
		}
	})
}

// TestPaceOf: only throttles with shares pace, by their sliding windows
// of calls, not by grained windows or estimates.
func TestPaceOf(t *testing.T) {
	check := func(cost int64, ws ...rules.Window) engine.Check {
		return engine.Check{Cost: cost, Rule: rules.Rule{Windows: ws}}
	}
	second := rules.Window{Limit: 20, Period: time.Second}
	minute := rules.Window{Limit: 600, Period: time.Minute} // 100 ms
	grained := rules.Window{Limit: 4, Period: time.Minute, Grain: time.Second}
	tokens := rules.Window{Limit: 1000, Period: time.Minute}
	shares := &Plan{shares: map[string]int{"critical": 30}}
	req := &engine.Request{Checks: []engine.Check{check(1, second, minute, grained), check(100, tokens)}}
	if got, want := shares.paceOf(req, []string{"", "tokens"}), time.Duration(paceFactor*float64(100*time.Millisecond)); got != want {
		t.Errorf("paced %v, want %v (the minute's interval; the grained window and the estimate not paced)", got, want)
	}
	if got := (&Plan{}).paceOf(req, []string{"", "tokens"}); got != 0 {
		t.Errorf("a throttle without shares paced %v, want 0", got)
	}
	if got := shares.paceOf(&engine.Request{Checks: []engine.Check{check(1, grained)}}, []string{""}); got != 0 {
		t.Errorf("a grained window alone paced %v, want 0", got)
	}
}

// TestSpreadOf: the room left in a paced window is spread over the time
// until its oldest entry leaves; in-flight windows and estimates are not.
func TestSpreadOf(t *testing.T) {
	second := rules.Window{Limit: 20, Period: time.Second}
	req := &engine.Request{Checks: []engine.Check{{Cost: 1}, {Cost: 100}}}
	d := &engine.Decision{Windows: []engine.WindowState{
		{Check: 0, Window: second, Remaining: 9, Reset: time.Second},                           // 10 calls over 1 s
		{Check: 0, Window: rules.Window{Limit: 2, Concurrent: true}, Reset: time.Hour},         // not paced
		{Check: 1, Window: rules.Window{Limit: 1000, Period: time.Minute}, Reset: time.Minute}, // an estimate
	}}
	if got := spreadOf(d, req, []string{"", "tokens"}); got != 100*time.Millisecond {
		t.Errorf("spread %v, want 100ms (1 s over the 10 calls the window has room for)", got)
	}
	d.Windows[0].Remaining = 0
	if got := spreadOf(d, req, []string{"", "tokens"}); got != time.Second {
		t.Errorf("spread of a full window %v, want its reset, 1s", got)
	}
}
