package throttle

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

// turnEvent is a reply or a message of the turn script, as it reaches
// process "a".
type turnEvent struct {
	name  string
	reply []int64 // a reply to a's op seq
	seq   int64
	msg   string // a message's payload
}

func (e turnEvent) deliver(f *fleet, ln *lane) {
	if e.msg != "" {
		if o, ok := f.message(ln, strings.Split(e.msg, "|")); ok {
			// Only the repair of a lost entry sends an op: none here.
			panic(fmt.Sprintf("unexpected op %+v", o))
		}
		return
	}
	f.apply(ln, e.reply, e.seq)
}

// permutations calls fn with every order of n items.
func permutations(n int, fn func([]int)) {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	var rec func(int)
	rec = func(k int) {
		if k == n {
			fn(p)
			return
		}
		for i := k; i < n; i++ {
			p[k], p[i] = p[i], p[k]
			rec(k + 1)
			p[k], p[i] = p[i], p[k]
		}
	}
	rec(0)
}

// TestTurnReplayOutOfOrder: whatever order the replies to a process's ops
// and the messages of the turn script reach it in, the process ends with
// the state the last of them describes: whether it has the turn, and the
// earliest arrival of the others. No Redis: the events are written as the
// script's header specifies them.
func TestTurnReplayOutOfOrder(t *testing.T) {
	t.Parallel()
	type state struct {
		joined, onTurn bool
		othersMin      int64
	}
	for _, tc := range []struct {
		name   string
		sent   int64 // a's last op
		joined bool  // a's intent after it
		events []turnEvent
		want   state
	}{{
		// a joins at 100 (op 1); b joins at 150, then at 50 (older), then
		// passes to 200: the turn comes back to a.
		name: "joins and a pass", sent: 1, joined: true,
		events: []turnEvent{
			{name: "reply a.1", seq: 1, reply: []int64{1, -1, 1, -2, 1, 0, 1}},
			{name: "a joined", msg: "q|L|1|a|1|100|-1|-1"},
			{name: "b joined behind", msg: "q|L|2|a|1|100|150|-1"},
			{name: "b moved ahead", msg: "q|L|3|b|7|50|100|-1"},
			{name: "b passed", msg: "q|L|4|a|1|100|200|30000"},
		},
		want: state{joined: true, onTurn: true, othersMin: 200},
	}, {
		// The join reply loses against a later message that says a is
		// first: a still learns it has the turn.
		name: "reply after a message", sent: 1, joined: true,
		events: []turnEvent{
			{name: "reply a.1", seq: 1, reply: []int64{1, -1, 1, -2, 1, 0, 1}},
			{name: "b joined behind", msg: "q|L|2|a|1|100|150|-1"},
		},
		want: state{joined: true, onTurn: true, othersMin: 150},
	}, {
		// a, first, passes (op 2, to 300) then leaves (op 3); Redis runs
		// the leave first and refuses the pass. a must end out of the
		// queue and not on turn, b first at 50.
		name: "pass and leave reordered", sent: 3, joined: false,
		events: []turnEvent{
			{name: "reply a.3 (leave)", seq: 3, reply: []int64{0, 50, 1, -2, 5, 0, 1}},
			{name: "a left", msg: "q|L|5|b|7|50|-1|-1"},
			{name: "reply a.2 (refused pass)", seq: 2, reply: []int64{0, 50, 1, -2, 6, 0, 0}},
		},
		want: state{othersMin: 50},
	}, {
		// a passes (op 2) while a message made before it still names a
		// first with op 1: a keeps waiting for its pass's reply, which
		// says b has the turn.
		name: "a message older than the op", sent: 2, joined: true,
		events: []turnEvent{
			{name: "b joined behind a's old entry", msg: "q|L|4|a|1|100|80|-1"},
			{name: "reply a.2 (pass to 300)", seq: 2, reply: []int64{0, 80, 2, -2, 5, 0, 1}},
			{name: "a passed", msg: "q|L|5|b|3|80|300|20000"},
		},
		want: state{joined: true, othersMin: 80},
	}, {
		// The queue empties: nobody else waits.
		name: "empty", sent: 2, joined: false,
		events: []turnEvent{
			{name: "b joined", msg: "q|L|3|b|4|70|-1|-1"},
			{name: "b left", msg: "q|L|4||0|-1|-1|-1"},
			{name: "reply a.2 (leave)", seq: 2, reply: []int64{0, -1, 0, -2, 2, 0, 1}},
		},
		want: state{othersMin: none},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			permutations(len(tc.events), func(order []int) {
				f := &fleet{member: "a"}
				ln := &lane{othersMin: none, sent: tc.sent, joined: tc.joined}
				var names []string
				for _, i := range order {
					tc.events[i].deliver(f, ln)
					names = append(names, tc.events[i].name)
				}
				got := state{ln.joined, ln.onTurn, ln.othersMin}
				if got != tc.want {
					t.Errorf("after %s: %+v, want %+v", strings.Join(names, ", "), got, tc.want)
				}
			})
		})
	}
}

// TestTurnMessageRepairsLostEntry: a process whose op's reply was lost
// (it acts alone, not joined) learns from a message that its entry is
// first; with no caller waiting it sends a leave instead of holding the
// fleet until the lease ends.
func TestTurnMessageRepairsLostEntry(t *testing.T) {
	t.Parallel()
	f := &fleet{member: "a"}
	f.seq.Store(4)
	ln := &lane{othersMin: none, sent: 4}
	o, ok := f.message(ln, strings.Split("q|L|9|a|4|100|120|-1", "|"))
	if !ok || o.kind != "p" || o.stamp >= 0 || o.seq <= 4 || ln.sent != o.seq {
		t.Fatalf("message of a lost entry: op %+v, %v; want a leave numbered after 4", o, ok)
	}
	// A message that names an older op of a is about a state its later
	// op replaced: nothing to repair.
	f.seq.Store(5)
	ln = &lane{othersMin: none, sent: 5}
	if o, ok := f.message(ln, strings.Split("q|L|9|a|4|100|120|-1", "|")); ok {
		t.Fatalf("message of an older op: op %+v, want none", o)
	}
}

// TestTurnScriptRefusesStaleOp: a pass that reaches Redis after a later
// leave of the same process (sent over another connection) changes
// nothing: the entry stays out of the queue.
func TestTurnScriptRefusesStaleOp(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	f := &fleet{client: c, member: "a", channel: "ch", t: &Throttle{name: "api"}}
	ln := &lane{id: "L", othersMin: none}
	keys := f.keys(ln)
	run := func(op string, score, seq int64) []int64 {
		t.Helper()
		res, err := turnScript.Run(context.Background(), c, keys, op, f.member, score,
			fleetLease.Microseconds(), f.channel, ln.id, 0, seq).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := run("j", 100, 1); len(res) != 8 {
		t.Fatalf("join: reply %v, want 8 fields", res)
	}
	if res := run("p", -1, 3); res[6] != 1 || res[2] != 0 {
		t.Fatalf("leave: reply %v, want applied and an empty queue", res)
	}
	if res := run("p", 300, 2); res[6] != 0 || res[2] != 0 {
		t.Fatalf("stale pass after the leave: reply %v, want refused and an empty queue", res)
	}
	if n, _ := c.ZCard(context.Background(), keys[0]).Result(); n != 0 {
		t.Fatalf("the queue holds %d entries after a stale pass, want 0", n)
	}
	// A later op applies again.
	if res := run("j", 400, 4); res[6] != 1 || res[0] != 1 {
		t.Fatalf("join after: reply %v, want applied and first", res)
	}
}

// TestTurnGiveBackKicksFleet: a Wait whose context ends as it is admitted
// gives its call back, which makes room before the time the fleet was
// told: the head waiting in another process asks at once, not when the
// window would have freed (20 s here).
func TestTurnGiveBackKicksFleet(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ths [2]*Throttle
	callCtx, endCall := context.WithCancel(ctx)
	defer endCall()
	admitted := make(chan error, 1)
	var armed atomic.Bool
	var start time.Time
	// The hook runs as the engine admits a's second call, before Wait
	// looks at its context: b's caller queues behind the full window
	// first, then the call's context ends.
	hook := WithHook(func(ev middleware.Event) {
		if !ev.Allowed || !armed.CompareAndSwap(true, false) {
			return
		}
		go func() {
			p, err := ths[1].Wait(ctx, Call{})
			if err == nil {
				p.Finish(nil)
			}
			admitted <- err
		}()
		for ths[0].lanesWaiting() == none && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		start = time.Now()
		endCall()
	})
	for i := range ths {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { c.Close() })
		var opts []Option
		if i == 0 {
			opts = append(opts, hook)
		}
		lim, err := newLimiter(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		if ths[i], err = lim.Throttle("api", "global:2/20s"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ths[0].Wait(ctx, Call{}); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if _, err := ths[0].Wait(callCtx, Call{}); err != context.Canceled {
		t.Fatalf("the call whose context ended as it was admitted: %v, want context.Canceled", err)
	}
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("admitted %v after the give back", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter in the other process was not admitted within 5s of the give back")
	}
}

// onlyLane returns the throttle's one lane.
func (t *Throttle) onlyLane() *lane {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ln := range t.lanes {
		return ln
	}
	return nil
}

// lanesWaiting returns the earliest arrival of another process's head
// that the throttle's one lane knows of.
func (t *Throttle) lanesWaiting() int64 {
	ln := t.onlyLane()
	if ln == nil {
		return none
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.othersMin
}

// TestTurnHintForNextCost: after an admission, the next head waits for
// room for its own cost, not the admitted call's: a call of 2 tokens asks
// at once when 2 remain, though the 8-token call before it could not.
func TestTurnHintForNextCost(t *testing.T) {
	t.Parallel()
	d := engine.Decision{Allowed: true, Windows: []engine.WindowState{
		{Check: 0, Window: rules.Window{Limit: 3, Period: 600 * time.Millisecond}, Used: 1, Remaining: 2, Reset: 100 * time.Millisecond},
		{Check: 1, Window: rules.Window{Limit: 19, Period: 1500 * time.Millisecond}, Used: 17, Remaining: 2, Reset: 600 * time.Millisecond},
	}}
	for _, tc := range []struct {
		w    *waiter
		want time.Duration
	}{
		{&waiter{costs: []int64{1, 2}}, 0},
		{&waiter{costs: []int64{1, 8}}, 600 * time.Millisecond},
		{&waiter{costs: []int64{3, 1}}, 100 * time.Millisecond},
		{nil, 0},
	} {
		if got := nextHint(&d, tc.w); got != tc.want {
			t.Errorf("nextHint for %+v = %v, want %v", tc.w, got, tc.want)
		}
	}
	// Through handOver: the admitted head leaves, the next head (2
	// tokens) may ask at once.
	next := &waiter{costs: []int64{1, 2}, wake: make(chan struct{}, 1)}
	ln := &lane{othersMin: none, q: []*waiter{next}}
	ln.mu.Lock()
	ln.handOver(true, func(n *waiter) time.Duration { return nextHint(&d, n) })
	if wait := time.Until(ln.wakeAt); wait > 50*time.Millisecond {
		t.Errorf("the next head (2 tokens, 2 remaining) waits %v", wait.Round(time.Millisecond))
	}
}
