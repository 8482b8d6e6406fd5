package slidelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// ThrottleStats counts the calls Allow, Wait and WaitAny admit, and the
// permits in flight until they are finished or held past the maximum hold.
func TestThrottleStatsActive(t *testing.T) {
	lim := faceLimiter(t, slidelimit.WithMaxHold(200*time.Millisecond))
	th, err := lim.Throttle("api", "global:100/min; key(k):2 concurrent")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	call := func(k string) slidelimit.Call { return slidelimit.Call{Keys: map[string]string{"k": k}} }
	want := func(admitted, active int64) {
		t.Helper()
		if s := th.Stats(); s.Admitted != admitted || s.Active != active {
			t.Fatalf("Admitted %d, Active %d; want %d, %d", s.Admitted, s.Active, admitted, active)
		}
	}
	a, ok, err := th.Allow(ctx, call("a"))
	if !ok || err != nil {
		t.Fatalf("Allow: %v, %v", ok, err)
	}
	want(1, 1)
	w, err := th.Wait(ctx, call("a"))
	if err != nil {
		t.Fatal(err)
	}
	want(2, 2)
	// Both keys are free: one call wins, another admitted meanwhile is
	// given back and counted in neither.
	p, _, err := th.WaitAny(ctx, call("b"), call("c"))
	if err != nil {
		t.Fatal(err)
	}
	want(3, 3)
	a.Finish(nil)
	a.Finish(nil)
	want(3, 2)
	w.Finish(nil)
	p.Finish(nil)
	want(3, 0)

	// A permit held past the maximum hold leaves the count then, once.
	h, err := th.Wait(ctx, call("d"))
	if err != nil {
		t.Fatal(err)
	}
	want(4, 1)
	deadline := time.Now().Add(20 * time.Second)
	for th.Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a permit held past the maximum hold is still active after 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.Finish(nil)
	want(4, 0)
}
