package throttle

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// twoProcesses returns a throttle of rules in each of two Limiters on one
// real Redis, standing for two processes of a fleet.
func twoProcesses(t *testing.T, rules string) [2]*Throttle {
	t.Helper()
	srv := redistest.Start(t)
	var ths [2]*Throttle
	for i := range ths {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		lim, err := newLimiter(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		if ths[i], err = lim.Throttle("api", rules); err != nil {
			t.Fatal(err)
		}
	}
	return ths
}

// waitAside starts a Wait for c in th: the channel receives when it was
// admitted (the call then finishes at once), or closes when it failed.
func waitAside(t *testing.T, ctx context.Context, th *Throttle, c Call) <-chan time.Time {
	admitted := make(chan time.Time, 1)
	go func() {
		q, err := th.Wait(ctx, c)
		if err != nil {
			t.Error(err)
			close(admitted)
			return
		}
		admitted <- time.Now()
		q.Finish(nil)
	}()
	return admitted
}

// finishWakes makes a's call hold the room b's call needs, starts b's
// call, waits until a knows b waits, and finishes a's call with actual:
// it returns how long b's call took to be admitted after that.
func finishWakes(t *testing.T, ths [2]*Throttle, a, b Call, actual map[string]int64) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := ths[0].Wait(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	admitted := waitAside(t, ctx, ths[1], b)
	for ths[0].lanesWaiting() == none {
		if ctx.Err() != nil {
			t.Fatal("process a never learned that process b waits")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	p.Finish(actual)
	at, ok := <-admitted
	if !ok {
		t.FailNow()
	}
	return at.Sub(start)
}

// wakeBound is the longest a finish in one process may take to wake the
// fleet's head in another: far below the engine's slot retry (1 s) and
// the windows' resets, so that only a wake-up meets it, even on a loaded
// machine.
const wakeBound = 500 * time.Millisecond

// TestThrottleFinishWakesOtherProcessSlot: a slot released in process a
// lets process b's waiter in at once, not at its slot retry.
func TestThrottleFinishWakesOtherProcessSlot(t *testing.T) {
	t.Parallel()
	ths := twoProcesses(t, "key(k):1 concurrent")
	call := Call{Keys: map[string]string{"k": "x"}}
	took := finishWakes(t, ths, call, call, nil)
	t.Logf("admitted %v after the other process's Finish", took.Round(time.Millisecond))
	if took > wakeBound {
		t.Fatalf("admitted %v after the slot was released in another process, want < %v", took, wakeBound)
	}
}

// TestThrottleSettleWakesOtherProcess: a settlement below the estimate in
// process a lets process b's waiter in at once, not at the window's reset.
func TestThrottleSettleWakesOtherProcess(t *testing.T) {
	t.Parallel()
	ths := twoProcesses(t, "key(k)[tokens]:10/20s")
	a := Call{Keys: map[string]string{"k": "x"}, Costs: map[string]int64{"tokens": 10}}
	b := Call{Keys: map[string]string{"k": "x"}, Costs: map[string]int64{"tokens": 5}}
	took := finishWakes(t, ths, a, b, map[string]int64{"tokens": 2})
	t.Logf("admitted %v after the other process's settlement", took.Round(time.Millisecond))
	if took > wakeBound {
		t.Fatalf("admitted %v after a settlement made room in another process, want < %v", took, wakeBound)
	}
}

// TestTurnKickOutranksPassHint: a process told that the windows have room
// ('k') while another had the turn asks at once when the turn comes, not
// after the hint the pass carries, which the passer may have computed
// before the room was made (a head refused for a slot that gave up).
func TestTurnKickOutranksPassHint(t *testing.T) {
	t.Parallel()
	for _, kick := range []bool{false, true} {
		f := &fleet{member: "a"}
		ln := &lane{othersMin: none, joined: true, sent: 3, q: []*waiter{{wake: make(chan struct{}, 1)}}}
		// The pass's hint: 1 s from now on the Redis clock (offset 0).
		at := strconv.FormatInt(f.now()+time.Second.Microseconds(), 10)
		msgs := []string{"q|L|5|b|1|100|200|-1", "q|L|6|a|3|200|-1|" + at}
		if kick {
			msgs = []string{msgs[0], "k|L", msgs[1]}
		}
		for _, m := range msgs {
			if o, ok := f.message(ln, strings.Split(m, "|")); ok {
				t.Fatalf("unexpected op %+v", o)
			}
		}
		if !ln.onTurn {
			t.Fatal("the pass did not give a the turn")
		}
		late := ln.wakeAt.After(time.Now().Add(500 * time.Millisecond))
		if kick && late {
			t.Fatalf("after a room-now message the head waits until %v, want at once", time.Until(ln.wakeAt))
		}
		if !kick && !late {
			t.Fatal("without a room-now message the head ignored the pass's hint of 1s")
		}
	}
}

// TestLaneRefusedGoesBeforeWaitingHead: a caller that asked at once and
// was refused goes before a head that arrived after it and is not asking
// (it waits for its time), and moves the process's entry in the fleet's
// queue to its arrival; before an asking head it stays second.
func TestLaneRefusedGoesBeforeWaitingHead(t *testing.T) {
	t.Parallel()
	th := &Throttle{}
	th.fleet = &fleet{t: th}
	for _, asking := range []bool{false, true} {
		head := &waiter{stamp: 200, wake: make(chan struct{}, 1)}
		ln := &lane{t: th, othersMin: none, joined: true, q: []*waiter{head}, asking: asking}
		early := &waiter{stamp: 100, wake: make(chan struct{}, 1)}
		sent := ln.sent
		ln.refused(early, engine.Decision{RetryAfter: time.Second}, nil)
		switch {
		case !asking && (ln.q[0] != early || ln.sent == sent):
			t.Fatalf("a refused caller that arrived first stays behind a waiting head (head %d, op sent %v)", ln.q[0].stamp, ln.sent != sent)
		case asking && ln.q[0] != head:
			t.Fatal("a refused caller went before the head while it asked")
		}
	}
}

// TestLaneRefusedHeadYields: a head refused after a caller that arrived
// before it was refused behind it (while the head asked) gives that caller
// its place, and the process's entry moves to its arrival.
func TestLaneRefusedHeadYields(t *testing.T) {
	t.Parallel()
	th := &Throttle{}
	th.fleet = &fleet{t: th}
	head := &waiter{stamp: 200, wake: make(chan struct{}, 1)}
	early := &waiter{stamp: 100, wake: make(chan struct{}, 1)}
	ln := &lane{t: th, othersMin: none, joined: true, q: []*waiter{head, early}, asking: true}
	sent := ln.sent
	ln.refused(head, engine.Decision{RetryAfter: time.Second}, nil)
	if ln.q[0] != early || ln.sent == sent || ln.asking {
		t.Fatalf("after the head's refusal: head %d, op sent %v, asking %v; want the earlier caller first, an op moving the entry, not asking",
			ln.q[0].stamp, ln.sent != sent, ln.asking)
	}
	select {
	case <-early.wake:
	default:
		t.Fatal("the new head was not told")
	}
}

// TestLaneRefusedAtOnceOnParts: when the engine splits requests across
// servers, a caller that asked at once and was refused for a second asks
// again within partsRecheck (another process's reservation may have
// refused it and been rolled back); on one server it waits the second.
func TestLaneRefusedAtOnceOnParts(t *testing.T) {
	t.Parallel()
	for _, parts := range []bool{false, true} {
		th := &Throttle{parts: parts}
		th.fleet = &fleet{t: th}
		ln := &lane{t: th, othersMin: none}
		w := &waiter{stamp: 100, wake: make(chan struct{}, 1)}
		ln.refused(w, engine.Decision{RetryAfter: time.Second}, nil)
		soon := time.Until(ln.wakeAt) <= partsRecheck
		if parts != soon || ln.q[0] != w {
			t.Fatalf("parts %v: the refused caller asks again in %v (head %v), want within %v: %v",
				parts, time.Until(ln.wakeAt).Round(time.Millisecond), ln.q[0] == w, partsRecheck, parts)
		}
		// Refused again as the head, it waits what the refusal said.
		ln.asking = true
		ln.refused(w, engine.Decision{RetryAfter: time.Second}, nil)
		if time.Until(ln.wakeAt) <= partsRecheck {
			t.Fatalf("parts %v: a head refused in turn asks again in %v, want the second", parts, time.Until(ln.wakeAt))
		}
	}
}
