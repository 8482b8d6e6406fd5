package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// settleScenario runs settlements of user[bytes]:1000/min on e at the
// times of clk.
func settleScenario(t *testing.T, e *Engine, clk *redistest.Clock) {
	t.Helper()
	ctx := context.Background()
	sec := time.Second
	ok := func(err error) {
		t.Helper()
		var be *backendError
		if err != nil && !(errors.As(err, &be) && e.fail == "local") {
			t.Fatal(err)
		}
	}
	allow := func(at time.Duration, subject string, cost int64) Decision {
		t.Helper()
		clk.Set(at)
		d, err := e.Allow(ctx, req(bytesOf(subject, cost, win(1000, time.Minute))))
		ok(err)
		return d
	}
	used := func(at time.Duration, subject string) int64 {
		t.Helper()
		clk.Set(at)
		d, err := e.peek(ctx, req(bytesOf(subject, 1, win(1000, time.Minute))))
		ok(err)
		return d.Windows[0].Used
	}
	settle := func(subject string, estimate int64, d Decision, actual int64) {
		t.Helper()
		ok(e.settle(ctx, req(bytesOf(subject, estimate, win(1000, time.Minute))), d, []int64{actual}))
	}

	// A refund leaves exactly the actual cost, and a second settlement of
	// the same request changes nothing.
	d1 := allow(0, "a", 700)
	d2 := allow(sec, "a", 200)
	settle("a", 700, d1, 100)
	if u := used(2*sec, "a"); u != 300 {
		t.Fatalf("after settling 700 to 100: used %d, want 300", u)
	}
	settle("a", 700, d1, 0)
	if u := used(2*sec, "a"); u != 300 {
		t.Fatalf("after settling again: used %d, want 300 (a request settles once)", u)
	}
	// A refund to zero never goes below zero nor touches another request.
	settle("a", 200, d2, 0)
	if u := used(3*sec, "a"); u != 100 {
		t.Fatalf("after settling 200 to 0: used %d, want 100", u)
	}
	// The entries kept their times: d1's 100 leaves at 1 min.
	if u := used(time.Minute+sec, "a"); u != 0 {
		t.Fatalf("after a minute: used %d, want 0", u)
	}

	// A request between two others settles in its own entry only: each
	// leaves the window at its own time with its own weight.
	c0 := 4 * time.Minute
	allow(c0, "c", 100)
	dc := allow(c0+sec, "c", 200)
	allow(c0+2*sec, "c", 300)
	settle("c", 200, dc, 50)
	for _, w := range []struct {
		at   time.Duration
		used int64
	}{{c0 + 3*sec, 450}, {c0 + time.Minute + sec/2, 350}, {c0 + time.Minute + 3*sec/2, 300}, {c0 + time.Minute + 5*sec/2, 0}} {
		if u := used(w.at, "c"); u != w.used {
			t.Fatalf("after settling the middle of three: used %d at %v, want %d", u, w.at-c0, w.used)
		}
	}

	// A debt is charged at the request's own admission time: the window
	// exceeds its limit by the excess, and the next request waits until
	// the request leaves.
	d := allow(2*time.Minute, "b", 100)
	settle("b", 100, d, 1500)
	if u := used(2*time.Minute+10*sec, "b"); u != 1500 {
		t.Fatalf("after settling 100 to 1500: used %d, want 1500", u)
	}
	next := allow(2*time.Minute+10*sec, "b", 10)
	if next.Allowed || next.RetryAfter != 50*sec {
		t.Fatalf("request after a debt: allowed %v retry %v, want denied for 50s (until the debtor leaves)", next.Allowed, next.RetryAfter)
	}
	if d := allow(3*time.Minute, "b", 10); !d.Allowed {
		t.Fatalf("request once the debtor left: denied, want admitted")
	}

	// A denied request leaves nothing to settle; a given-back one is not
	// settled.
	den := allow(3*time.Minute, "b", 995)
	if den.Allowed {
		t.Fatal("995 with 10 used: admitted, want denied")
	}
	settle("b", 995, den, 5)
	g := allow(3*time.Minute+sec, "b", 20)
	ok(e.giveBack(ctx, req(bytesOf("b", 20, win(1000, time.Minute))), g))
	settle("b", 20, g, 900)
	if u := used(3*time.Minute+2*sec, "b"); u != 10 {
		t.Fatalf("after a denied and a given-back request were settled: used %d, want 10", u)
	}
}

// TestSettle runs settleScenario on real Redis, miniredis, a 3-master
// cluster and the fallback limiter.
func TestSettle(t *testing.T) {
	t.Parallel()
	onEveryBackend(t, settleScenario)
}

// TestSettleGrains settles in a key with a grained window: the newest
// entry settles exactly, and a request merged into the next entry (same
// grain) settles there, a debt as a refund.
func TestSettleGrains(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now))
	ctx := context.Background()
	w := gwin(1000, time.Minute, time.Second)
	r := func(cost int64) Request { return req(bytesOf("g", cost, w)) }
	clk.Set(0)
	d1 := mustAllow(t, e, r(100), true)
	clk.Set(10 * ms)
	d2 := mustAllow(t, e, r(100), true) // same grain: d1 may be merged into d2 once both are older than the grain
	if err := e.settle(ctx, r(100), d2, []int64{50}); err != nil {
		t.Fatal(err)
	}
	clk.Set(20 * ms)
	if d, _ := e.peek(ctx, r(1)); d.Windows[0].Used != 150 {
		t.Fatalf("after settling the newest 100 to 50: used %d, want 150", d.Windows[0].Used)
	}
	if err := e.settle(ctx, r(100), d1, []int64{300}); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.peek(ctx, r(1)); d.Windows[0].Used != 350 {
		t.Fatalf("after a debt of 200: used %d, want 350", d.Windows[0].Used)
	}
	// A refund of a request merged into the next one is made there.
	clk.Set(2 * time.Second)
	d3 := mustAllow(t, e, r(100), true)
	clk.Set(2010 * ms)
	mustAllow(t, e, r(100), true)
	if err := e.settle(ctx, r(100), d3, []int64{30}); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.peek(ctx, r(1)); d.Windows[0].Used != 350+130 {
		t.Fatalf("after refunding 70 of a merged request: used %d, want %d", d.Windows[0].Used, 350+130)
	}
	// The merged entries leave with their grain's last request.
	clk.Set(time.Minute + 15*ms)
	if d, _ := e.peek(ctx, r(1)); d.Windows[0].Used != 130 {
		t.Fatalf("a minute later: used %d, want 130", d.Windows[0].Used)
	}
}

// TestSettleErrors checks the requests Settle refuses.
func TestSettleErrors(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)))
	ctx := context.Background()
	r := req(user("u", win(5, time.Minute)), bytesOf("u", 10, win(100, time.Minute)))
	d := mustAllow(t, e, r, true)
	var re *requestError
	if err := e.settle(ctx, r, d, []int64{1}); !errors.As(err, &re) {
		t.Errorf("one actual for two checks: %v, want a *requestError", err)
	}
	if err := e.settle(ctx, r, d, []int64{3, 5}); !errors.As(err, &re) || re.Check != 0 {
		t.Errorf("settling a request limiter: %v, want a *requestError for check 0", err)
	}
	if err := e.settle(ctx, r, d, []int64{-1, 5}); err != nil {
		t.Errorf("settling the cost limiter: %v", err)
	}
	if got, _ := e.peek(ctx, r); got.Windows[0].Used != 1 || got.Windows[1].Used != 5 {
		t.Errorf("after settling: used %d and %d, want 1 and 5", got.Windows[0].Used, got.Windows[1].Used)
	}
}

// TestSettleManyLater settles and gives back requests of one subject's
// byte quota with 0 to 149 later entries: a change rewrites at most 64
// later entries (see Weighted changes in lua/multi_window.lua), and it
// reads the key from the request's decision time on, so the entries read
// may be cut (132 at most) before the key's newest. Beyond 64 later
// entries a refund is not made, a removal leaves the request's weight to
// the next entry, and a debt is charged to the newest entry.
func TestSettleManyLater(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		if b.name == "local" || b.name == "ring" {
			continue // the fallback limiter settles exactly; a ring is a single server's case
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			clk := redistest.NewClock()
			e := newEngine(t, b.c, WithKeyPrefix(redistest.Prefix(t)), WithClock(clk.Now))
			ctx := context.Background()
			r := req(bytesOf("m", 10, win(1_000_000, time.Hour)))
			ds := make([]Decision, 150)
			for i := range ds {
				clk.Set(time.Duration(i) * 10 * time.Millisecond)
				ds[i] = mustAllow(t, e, r, true)
			}
			steps := []struct {
				k      int   // the request, of 150; 149-k entries are later
				actual int64 // -2: give back
				change int64 // of the window's sum
			}{
				{149, 3, -7},   // no later entry
				{100, 3, -7},   // 49 later
				{85, 3, -7},    // 64 later: rewritten
				{84, 3, 0},     // 65 later: no refund
				{120, -2, -10}, // 29 later: removed
				{10, -2, 0},    // 138 later (read cut at 132): left to the next entry
				{5, 25, 15},    // 144 later: a debt, charged to the newest
			}
			want := int64(1500)
			for _, s := range steps {
				var err error
				if s.actual == -2 {
					err = e.giveBack(ctx, r, ds[s.k])
				} else {
					err = e.settle(ctx, r, ds[s.k], []int64{s.actual})
				}
				if err != nil {
					t.Fatal(err)
				}
				want += s.change
				clk.Set(2 * time.Second)
				p, err := e.peek(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Windows[0].Used; got != want {
					t.Fatalf("after request %d's change to %d: used %d, want %d", s.k, s.actual, got, want)
				}
			}
		})
	}
}
