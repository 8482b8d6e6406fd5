package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// finishSteps runs sequences of Finish on a request of a byte quota and an
// in-flight window: what each leaves counted, and that its slot is always
// freed exactly once.
func finishSteps(t *testing.T, e *Engine, clk *redistest.Clock) {
	t.Helper()
	finishStepsBy(t, e, clk, func(d Decision, o Outcome) { localOK(t, e, e.Finish(context.Background(), d, o)) })
}

// finishStepsBy is finishSteps finishing with finish; the Peek right
// after it must see its work done.
func finishStepsBy(t *testing.T, e *Engine, clk *redistest.Clock, finish func(Decision, Outcome)) {
	t.Helper()
	ctx := context.Background()
	settle10 := []int64{10, -1}
	steps := []struct {
		name  string
		outs  []Outcome
		bytes int64 // bytes counted afterwards
	}{
		{"settle", []Outcome{{Actual: settle10}}, 10},
		{"give back and settle", []Outcome{{GiveBack: true, Actual: settle10}}, 0},
		{"release then settle", []Outcome{{}, {Actual: settle10}}, 10},
		{"settled once", []Outcome{{Actual: settle10}, {Actual: []int64{50, -1}}}, 10},
		{"given back twice", []Outcome{{GiveBack: true}, {GiveBack: true}}, 0},
		{"settle then give back", []Outcome{{Actual: settle10}, {GiveBack: true}}, 10}, // a settled entry is not given back
		{"actual as charged", []Outcome{{Actual: []int64{100, 1}}}, 100},
	}
	for i, s := range steps {
		subject := string(rune('a' + i))
		r := req(bytesOf(subject, 100, win(1000, time.Minute)), user(subject, conc(1)))
		clk.Set(time.Duration(i) * time.Hour)
		d, err := e.Allow(ctx, r)
		localOK(t, e, err)
		if !d.Allowed {
			t.Fatalf("%s: admission %+v", s.name, d)
		}
		for _, o := range s.outs {
			finish(d, o)
		}
		p, err := e.peek(ctx, r)
		localOK(t, e, err)
		if !p.Allowed || p.Windows[0].Used != s.bytes || slotState(t, p).Used != 0 {
			t.Fatalf("%s: afterwards %+v; want %d bytes and no slot used", s.name, p, s.bytes)
		}
		// One slot is free, not two.
		n, err := e.Allow(ctx, r)
		localOK(t, e, err)
		if den, err := e.Allow(ctx, r); !n.Allowed || den.Allowed {
			t.Fatalf("%s: next requests %+v, %+v (%v)", s.name, n, den, err)
		}
		finish(n, Outcome{})
	}
}

// TestFinish runs finishSteps on every backend, the fallback limiter
// included.
func TestFinish(t *testing.T) {
	t.Parallel()
	onEveryBackend(t, finishSteps)
}

// onEveryBackend runs scenario on every backend of testBackends, each
// with a random prefix and a fake clock.
func onEveryBackend(t *testing.T, scenario func(*testing.T, *Engine, *redistest.Clock)) {
	for _, b := range testBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			if b.ttl != nil {
				b.ttl(t, prefix)
			}
			clk := redistest.NewClock()
			opts := append([]Option{WithKeyPrefix(prefix), WithClock(clk.Now)}, b.opts...)
			scenario(t, newEngine(t, b.c, opts...), clk)
		})
	}
}

// TestFinishNothing: Finish of a Decision that counted nothing, and a
// second Finish, make no Redis call; an Outcome that does not fit the
// request changes nothing.
func TestFinishNothing(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	var h redistest.RoundTripCounter
	e := newEngine(t, hooked(t, s.Addr, &h), WithKeyPrefix(redistest.Prefix(t)), WithCachedDenials(false))
	ctx := context.Background()
	r := req(bytesOf("u", 100, win(150, time.Minute)), user("u", win(5, time.Minute), conc(2)))
	d := mustAllow(t, e, r, true)
	den := mustAllow(t, e, r, false) // the byte quota is full
	p, err := e.peek(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Outcome{
		{Actual: []int64{1}},     // one per check
		{Actual: []int64{-1, 3}}, // the user rule counts requests
	} {
		if err := e.Finish(ctx, d, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Finish(%+v): %v, want ErrInvalid", bad, err)
		}
	}
	before := h.Count()
	for _, x := range []Decision{den, p, {Allowed: true, Source: "fail-open"}, {}} {
		if err := e.Finish(ctx, x, Outcome{GiveBack: true}); err != nil {
			t.Errorf("Finish of a decision that counted nothing (%v): %v", x.Source, err)
		}
	}
	if n := h.Count() - before; n != 0 {
		t.Errorf("%d round trips for decisions that counted nothing, want 0", n)
	}
	if err := e.Finish(ctx, d, Outcome{Actual: []int64{40, -1}}); err != nil {
		t.Fatal(err)
	}
	before = h.Count()
	if err := e.Finish(ctx, d, Outcome{Actual: []int64{40, -1}}); err != nil {
		t.Fatal(err)
	}
	if n := h.Count() - before; n != 0 {
		t.Errorf("a second Finish made %d round trips, want 0", n)
	}
	if q := mustAllow(t, e, r, true); q.Windows[0].Used != 140 || slotState(t, q).Used != 1 {
		t.Errorf("after Finish: %+v, want 40+100 bytes and this request's slot", q)
	}
}

// TestSlotEpochs: a slot key's bookkeeping runs once per lease, yet a
// slot whose lease ran out is never counted, and a renewal does not
// revive it (an admission after its expiry may have counted without it).
func TestSlotEpochs(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	clk := redistest.NewClock()
	prefix := redistest.Prefix(t)
	lost := make(chan SlotLost, 4)
	e := newEngine(t, rc, WithKeyPrefix(prefix), WithClock(clk.Now), WithLease(time.Minute),
		WithSlotLost(func(l SlotLost) { lost <- l }))
	ctx := context.Background()
	r := req(user("u", conc(2)))
	a := mustAllow(t, e, r, true) // at 0: the epoch's first admission
	clk.Set(30 * time.Second)
	mustAllow(t, e, r, true) // both live
	mustAllow(t, e, r, false)
	clk.Set(61 * time.Second) // a's lease ran out: one slot free
	c := mustAllow(t, e, r, true)
	if slotState(t, c).Used != 2 {
		t.Fatalf("after a's lease: %+v", c)
	}
	e.slots.Renew() // a's slot expired: reported lost, not renewed
	select {
	case l := <-lost:
		if l.Member != a.admitted.Member() {
			t.Errorf("lost %+v, want a's member %s", l, a.admitted.Member())
		}
	default:
		t.Fatal("the renewal did not report a's expired slot")
	}
	if d := mustAllow(t, e, r, false); slotState(t, d).Used != 2 {
		t.Errorf("after the renewal: %+v, want the 2 live slots", d)
	}
	key := prefix + "{s|user|u}:slots"
	if ttl := rc.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*time.Minute+time.Second {
		t.Errorf("slot key TTL %v, want at most two leases", ttl)
	}
}
