package slidelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// TestThrottlePacing: with batch saturating three processes and a
// critical caller calling now and then, a throttle with shares spaces
// its admissions over each window (docs/throttle.md, Pacing), so a
// critical call waits about one interval for a slot, not for the next
// window's burst: its median wait is under a fifth of the window, and
// at most one of its waits over a third. Without
// pacing, admissions come in a burst a window apart and the caller's
// waits spread over the whole window. One critical caller, in one
// process, is a demand well under critical's share: callers arriving
// within a fair interval of each other (here 175 ms) are spread by the
// shares.
func TestThrottlePacing(t *testing.T) {
	const warm, run, window = time.Second, 4 * time.Second, time.Second
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			ths := fleetOf(t, b.client(t), 3, "api", "global:20/s; share(critical):30%")
			var ws []worker
			for i, th := range ths {
				for range 8 {
					ws = append(ws, worker{th: th, call: slidelimit.Call{Class: "batch"}, label: "batch"})
				}
				if i == 1 {
					ws = append(ws, worker{th: th, call: slidelimit.Call{Class: "critical"}, label: "critical", pause: 300 * time.Millisecond})
				}
			}
			as := runLoad(t, ws, warm, run)
			var waits []time.Duration
			for _, a := range as {
				if a.label == "critical" {
					waits = append(waits, a.wait)
				}
			}
			slices.Sort(waits)
			if len(waits) < 6 {
				t.Fatalf("%d critical admissions in %v, want at least 6", len(waits), run-warm)
			}
			p50, p90 := waits[len(waits)/2], waits[len(waits)*9/10]
			t.Logf("%d admissions, %d critical: waits p50 %v, p90 %v, max %v", len(as), len(waits), p50, p90, waits[len(waits)-1])
			// Unpaced, the waits spread over the window: p50 about half
			// of it. One wait in the run may meet a stall of the machine.
			long := 0
			for _, w := range waits {
				if w > window/3 {
					long++
				}
			}
			if p50 >= window/5 || long > 1 {
				t.Errorf("critical's waits p50 %v, %d over a third of the window: want p50 under a fifth (%v) and at most one over a third: %v",
					p50, long, window/5, waits)
			}
			// Paced, the windows stay used: 20 per 1.05 s (the transit
			// bound) is 57 in 3 s.
			if float64(len(as)) < 0.85*20*float64(run-warm)/float64(window+50*time.Millisecond) {
				t.Errorf("%d admissions in %v at 20 per 1.05 s, want at least 85%%", len(as), run-warm)
			}
		})
	}
}

// TestThrottlePacingIdleLane: pacing spaces a lane's waiters, not a
// caller that finds the lane idle: four calls one after another on
// global:4/min with a share are admitted at once, where the slot alone
// (0.95 × 15 s) would hold each after the first.
func TestThrottlePacingIdleLane(t *testing.T) {
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			th := fleetOf(t, b.client(t), 1, "api", "global:4/min; share(critical):30%")[0]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for i := range 4 {
				p, err := th.Wait(ctx, slidelimit.Call{Class: []string{"critical", "batch"}[i%2]})
				if err != nil {
					t.Fatalf("call %d on an idle lane: %v, want it admitted at once", i, err)
				}
				p.Finish(nil)
			}
			// The fifth has no room: it waits for the window, not admitted.
			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if _, err := th.Wait(short, slidelimit.Call{Class: "critical"}); err == nil {
				t.Fatal("a fifth call within the minute was admitted")
			}
		})
	}
}
