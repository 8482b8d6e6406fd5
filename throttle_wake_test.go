package slidelimit_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit"
)

// fleetWakeBound is the longest a caller in one process may wait after
// another process made room for it in a lane where that process has no
// caller of its own: far below the engine's slot retry (1 s) and the
// windows' resets, so that only a wake-up meets it, with room for a
// loaded machine.
const fleetWakeBound = 300 * time.Millisecond

// wakeHold is the maximum hold of the wake tests' Permits: longer than
// the rounds that do not wait for it.
const wakeHold = 1500 * time.Millisecond

// TestThrottleFinishWakesFleet: two processes share a throttle; process
// a holds the room and has no caller waiting in the lane, process b's
// caller waits for the room. Room that a makes — a slot released by
// Finish, with or without a rate window beside it, a cost settled lower,
// a Permit dropped or held past the maximum hold — admits b's caller
// within fleetWakeBound, in three rounds (one for the maximum hold): b's
// caller is the lane's first, follows a refusal of Allow, or follows a
// caller that gave up (both leave b's lane a time to wait for without an
// entry in the fleet's queue). On miniredis, Redis and Cluster.
func TestThrottleFinishWakesFleet(t *testing.T) {
	for _, b := range classBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			client := b.client(t)
			for _, sc := range wakeScenarios {
				t.Run(sc.name, func(t *testing.T) {
					prefix := randomPrefix(t)
					var ths [2]*slidelimit.Throttle
					for i := range ths {
						lim := throttleLimiter(t, client, prefix, slidelimit.WithMaxHold(wakeHold))
						var err error
						if ths[i], err = lim.Throttle("api", sc.rules); err != nil {
							t.Fatal(err)
						}
					}
					for round, before := range []wakeBefore{wakeFirst, wakeAfterAllow, wakeAfterGaveUp} {
						if sc.end == wakeOverHeld && round > 0 {
							break // each round waits for the hold; the first tells
						}
						k := "x" // the lane stays known between rounds
						if sc.a > 0 {
							k = fmt.Sprint("x", round) // a window keeps what a round settled
						}
						took := wakeAfter(t, ths, wakeCall(k, sc.a), wakeCall(k, sc.b), sc.n, sc.end, before, sc.actual)
						t.Logf("round %d: admitted %v after the room was made", round, took.Round(time.Millisecond))
						if took > fleetWakeBound {
							t.Errorf("round %d: the other process's caller was admitted %v after the room was made, want < %v",
								round, took.Round(time.Millisecond), fleetWakeBound)
						}
					}
				})
			}
		})
	}
}

// How the room is made in a wake test: the first Permit is finished (with
// the actual costs given), dropped unfinished, or kept past the maximum
// hold.
type wakeEnd int

const (
	wakeFinish wakeEnd = iota
	wakeDrop
	wakeOverHeld
)

// What process b did in the lane before its caller waits.
type wakeBefore int

const (
	wakeFirst       wakeBefore = iota // nothing
	wakeAfterAllow                    // an Allow was refused
	wakeAfterGaveUp                   // a caller gave up waiting
)

var wakeScenarios = []struct {
	name   string
	rules  string
	a, b   int64            // the calls' costs in tokens; 0 for none
	n      int              // how many calls of a fill the room
	end    wakeEnd          // how a makes room
	actual map[string]int64 // wakeFinish's actual costs
}{
	{name: "slot", rules: "key(k):2 concurrent", n: 2},
	{name: "slot and rate", rules: "key(k):2 concurrent; key(k):1000/min", n: 2},
	{name: "settle", rules: "key(k)[tokens]:10/20s", a: 10, b: 5, n: 1, actual: map[string]int64{"tokens": 2}},
	{name: "dropped", rules: "key(k):1 concurrent", n: 1, end: wakeDrop},
	{name: "max hold", rules: "key(k):1 concurrent", n: 1, end: wakeOverHeld},
}

// wakeCall is a call for key k, of cost tokens when tokens > 0.
func wakeCall(k string, tokens int64) slidelimit.Call {
	c := slidelimit.Call{Keys: map[string]string{"k": k}}
	if tokens > 0 {
		c.Costs = map[string]int64{"tokens": tokens}
	}
	return c
}

// wakeAfter has process a admit n calls a, which fill the lane's room,
// has process b do before, then wait for a call b, and makes room by
// ending a's first call as end says. It returns how long b's call took to
// be admitted after the room was made, once every call is finished.
func wakeAfter(t *testing.T, ths [2]*slidelimit.Throttle, a, b slidelimit.Call, n int, end wakeEnd, before wakeBefore, actual map[string]int64) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var held []*slidelimit.Permit
	var start time.Time
	for range n {
		p, err := ths[0].Wait(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if len(held) == 0 {
			start = time.Now()
		}
		held = append(held, p)
	}
	var dropped *slidelimit.Permit // reachable until dropped
	if end == wakeDrop {
		dropped, held[0] = held[0], nil
		held = held[1:]
	}
	defer func() {
		for _, p := range held {
			p.Finish(nil)
		}
	}()
	switch before {
	case wakeAfterAllow:
		if _, ok, err := ths[1].Allow(ctx, b); ok || err != nil {
			t.Fatalf("Allow = %v, %v; want a refusal", ok, err)
		}
	case wakeAfterGaveUp:
		short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := ths[1].Wait(short, b)
		stop()
		if err == nil {
			t.Fatal("a caller was admitted in a full lane")
		}
	}
	admitted := make(chan *slidelimit.Permit, 1)
	var at time.Time
	go func() {
		q, err := ths[1].Wait(ctx, b)
		at = time.Now()
		if err != nil {
			t.Error(err)
		}
		admitted <- q
	}()
	for ths[1].Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	// b's caller asks, is refused and waits: a user's caller waits so
	// long before a finish.
	time.Sleep(200 * time.Millisecond)
	switch end {
	case wakeDrop:
		runtime.KeepAlive(dropped)
		start = time.Now()
		runtime.GC() // the cleanup finishes the dropped Permit
	case wakeOverHeld:
		start = start.Add(wakeHold) // the maximum hold releases the slot
	default:
		start = time.Now()
		held[0].Finish(actual)
		held = held[1:]
	}
	q := <-admitted
	if q == nil {
		t.FailNow()
	}
	q.Finish(nil)
	return at.Sub(start)
}
