package throttle

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// TestLaneQuietRoomNews: room a Finish made while no other process was
// known to wait is told to the fleet once another process's head becomes
// known within quietNews, no earlier than quietSettle after the finish;
// not when that head was known already, nor after quietNews, nor once a
// refusal showed the room taken. A Finish that finds a head known since
// it looked tells at once (after quietSettle).
func TestLaneQuietRoomNews(t *testing.T) {
	t.Parallel()
	ln := &lane{othersMin: none}
	if _, tell := ln.roomQuietly(); tell || ln.quiet.IsZero() {
		t.Fatalf("a finish with nobody known to wait: tell %v, quiet %v; want no tell, noted", tell, ln.quiet)
	}
	wait, tell := ln.setOthers(100)
	if !tell || wait > quietSettle || !ln.quiet.IsZero() {
		t.Fatalf("a head newly known after quiet room: tell %v after %v, quiet %v; want told within %v, forgotten",
			tell, wait, ln.quiet, quietSettle)
	}
	if _, tell := ln.setOthers(50); tell {
		t.Fatal("told twice")
	}
	ln.othersMin, ln.quiet = none, time.Now().Add(-quietNews-time.Millisecond)
	if _, tell := ln.setOthers(100); tell {
		t.Fatal("told of room older than quietNews")
	}
	ln.othersMin = none
	ln.roomQuietly()
	ln.setOthers(none)
	w := &waiter{stamp: 1, wake: make(chan struct{}, 1)}
	th := &Throttle{}
	th.fleet = &fleet{t: th}
	ln.t = th
	ln.refused(w, engine.Decision{RetryAfter: time.Second}, nil)
	if _, tell := ln.setOthers(100); tell {
		t.Fatal("told of room a refusal showed taken")
	}
	if wait, tell := ln.roomQuietly(); !tell || wait != quietSettle {
		t.Fatalf("a finish that finds another head known: tell %v after %v, want after %v", tell, wait, quietSettle)
	}
}

// TestLaneKickWhileAsking: a head refused after the fleet ("room now")
// or a Finish of its own process said the windows have room while it
// asked asks again at once (the refusal may predate the room); without
// either it waits what the refusal said.
func TestLaneKickWhileAsking(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"", "fleet", "finish", "quiet finish"} {
		th := &Throttle{}
		th.fleet = &fleet{t: th, member: "a"}
		w := &waiter{stamp: 1, wake: make(chan struct{}, 1)}
		ln := &lane{t: th, othersMin: none, joined: true, onTurn: true, q: []*waiter{w}, asking: true}
		switch by {
		case "fleet":
			th.fleet.message(ln, []string{"k", "L"})
		case "finish":
			ln.kick()
		case "quiet finish":
			ln.roomQuietly()
		}
		ln.refused(w, engine.Decision{RetryAfter: time.Second}, nil)
		if soon := time.Until(ln.wakeAt) <= 0; soon != (by != "") {
			t.Errorf("room made while asking by %q: the head asks again in %v", by, time.Until(ln.wakeAt).Round(time.Millisecond))
		}
	}
}

// TestLaneJoinsBehindKnownTime: a head that would wait longer than
// joinWait for a time its lane learned, without an entry in the fleet's
// queue, takes one first when a Finish elsewhere may make room sooner (its
// calls hold slots or settle costs); not for a shorter wait, nor for calls
// whose room only time makes.
func TestLaneJoinsBehindKnownTime(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		early bool
		wait  time.Duration
		join  bool
	}{
		{true, time.Second, true},
		{true, joinWait / 2, false},
		{false, time.Second, false},
	} {
		th := &Throttle{}
		th.fleet = &fleet{t: th} // no client: the op fails, as when Redis does
		w := &waiter{stamp: 1, wake: make(chan struct{}, 1), early: tc.early}
		ln := &lane{t: th, othersMin: none, q: []*waiter{w}, wakeAt: time.Now().Add(tc.wait)}
		ctx, cancel := context.WithTimeout(context.Background(), joinWait)
		err := ln.await(ctx, w)
		cancel()
		if joined := ln.sent != 0; joined != tc.join {
			t.Errorf("early %v, waiting %v: joined %v, want %v", tc.early, tc.wait, joined, tc.join)
		}
		if ln.sent > 1 {
			t.Errorf("early %v, waiting %v: %d ops; a failed join must not be retried", tc.early, tc.wait, ln.sent)
		}
		if tc.wait > joinWait && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("early %v, waiting %v: await = %v before the time", tc.early, tc.wait, err)
		}
	}
}

// TestThrottleQuietFinishWakesLateHead: a slot released in process a
// before a learned that process b's head waits (b's join was on its way)
// still wakes b's head, once a hears of it: a tells the fleet then.
func TestThrottleQuietFinishWakesLateHead(t *testing.T) {
	t.Parallel()
	ths := twoProcesses(t, "key(k):1 concurrent")
	call := Call{Keys: map[string]string{"k": "x"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := ths[0].Wait(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	admitted := waitAside(t, ctx, ths[1], call)
	var first int64
	for first = ths[0].lanesWaiting(); first == none; first = ths[0].lanesWaiting() {
		if ctx.Err() != nil {
			t.Fatal("process a never learned that process b waits")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Rewind a to before b's join reached it, finish quietly, and let
	// the join's message come again.
	ln := ths[0].onlyLane()
	ln.mu.Lock()
	ln.othersMin = none
	ver := ln.ver
	ln.mu.Unlock()
	start := time.Now()
	p.Finish(nil)
	msg := strings.Join([]string{"q", ln.id, strconv.FormatInt(ver, 10), "b", "1", strconv.FormatInt(first, 10), "-1", "-1"}, "|")
	if o, ok := ths[0].fleet.message(ln, strings.Split(msg, "|")); ok {
		t.Fatalf("unexpected op %+v", o)
	}
	at, ok := <-admitted
	if !ok {
		t.FailNow()
	}
	took := at.Sub(start)
	t.Logf("admitted %v after the other process's quiet Finish", took.Round(time.Millisecond))
	if took > wakeBound {
		t.Fatalf("admitted %v after a slot was released before its process knew, want < %v", took, wakeBound)
	}
}
