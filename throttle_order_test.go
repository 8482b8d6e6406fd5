package slidelimit_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// TestThrottleFleetOrder: callers arriving 60 ms apart in turn at three
// processes (Limiters on one Redis) of a saturated throttle are admitted
// in the order they arrived, across the processes.
func TestThrottleFleetOrder(t *testing.T) {
	client := miniClient(t)
	prefix := randomPrefix(t)
	var ths []*slidelimit.Throttle
	for range 3 {
		th, err := throttleLimiter(t, client, prefix).Throttle("api", "global:1/150ms")
		if err != nil {
			t.Fatal(err)
		}
		ths = append(ths, th)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Fill the window, so that every caller below waits.
	p, err := ths[0].Wait(ctx, slidelimit.Call{})
	if err != nil {
		t.Fatal(err)
	}
	p.Finish(nil)
	const callers = 9
	type result struct {
		arrived  time.Time
		admitted time.Time
	}
	results := make([]result, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			results[i].arrived = time.Now()
			p, err := ths[i%3].Wait(ctx, slidelimit.Call{})
			if err != nil {
				t.Error(err)
				return
			}
			results[i].admitted = p.Decision().Time
			p.Finish(nil)
		})
		time.Sleep(60 * time.Millisecond)
	}
	wg.Wait()
	byAdmission := slices.Clone(results)
	slices.SortFunc(byAdmission, func(a, b result) int { return a.admitted.Compare(b.admitted) })
	// A caller may pass one that arrived less than a scheduling delay
	// before it (the arrival is read before Wait stamps it), never one
	// that arrived well before.
	const slack = 30 * time.Millisecond
	for i, r := range byAdmission {
		for _, later := range byAdmission[i+1:] {
			if r.arrived.Sub(later.arrived) > slack {
				t.Errorf("a call that arrived at +%v was admitted before one that arrived at +%v",
					r.arrived.Sub(results[0].arrived).Round(time.Millisecond), later.arrived.Sub(results[0].arrived).Round(time.Millisecond))
			}
		}
	}
}
