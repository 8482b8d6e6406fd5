package throttle

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// none is othersMin when no other participant is known to wait.
const none = math.MaxInt64

// A lane holds this process's callers waiting for the same subjects, in
// arrival order. Only its head asks Redis, and only when the fleet-wide
// order (fleet.go) gives this process the turn: the callers behind it, and
// the other processes' heads, sleep until they are told.
type lane struct {
	t        *Throttle
	id       string        // names the lane in Redis keys and messages
	key      string        // t.lanes's key: the subjects, length-prefixed (laneKey)
	subjects []string      // the subjects of its calls, long ones hashed (laneSubject); views of key
	ref      laneRef       // its users and place in the idle lists; t.mu guards it (lanes.go)
	ready    chan struct{} // closed once the new lane learned the fleet's state (fleet.learn)

	mu        sync.Mutex
	q         []*waiter
	wakeAt    time.Time        // when the head may ask next (local clock)
	blocked   time.Time        // an upstream's Retry-After holds the lane until then
	joined    bool             // this process has an entry in the fleet's queue
	onTurn    bool             // that entry is the fleet's first
	othersMin int64            // the earliest arrival of another process's head; none if none
	renewed   time.Time        // the last call of the fleet script (lease renewal)
	ver       int64            // the version of the fleet's queue last applied
	verAt     time.Time        // when
	sent      int64            // the sequence number of the last op sent (fleet.op)
	kicked    bool             // a Finish or the fleet said the windows have room since the head last asked
	quiet     time.Time        // a Finish here made room then, telling no other process (roomQuietly)
	asking    bool             // the head is asking Redis (it left await and is not refused yet)
	direct    int              // callers with a flow asking at once, not queued: at most one
	tagging   int              // callers with a flow being tagged on their way into the queue (enter)
	flows     bool             // calls of the lane are tagged in the fleet: the last reply saw its flows hash
	paceAt    time.Time        // a paced lane's next slot (pace.go), from its last admission or a pass's hint
	paceN     int              // the admissions of its current group of slots (pace.go, paceGroup)
	served    map[string]int64 // by class (flow.split), the highest tag of a call admitted here, its credit undone (fleet.tag)

	// grids: the grids of the classes whose tenants split their share, by
	// class (classes.go).
	grids map[string]grid
	// shifts: the moves of flows' waiting calls heard of in the last
	// shiftKeep, for waiters tagged before them and queued after (classes.go).
	shifts []shift

	// afterKick: the head's ask followed a kick; recheck: the last wait of
	// a kicked head that the engine's cached denials refused (refused).
	afterKick bool
	recheck   time.Duration

	liftLines atomic.Pointer[[]string] // its calls' subjects as a Reset names them (note)
}

// A waiter is one caller of Wait.
type waiter struct {
	stamp   int64         // arrival, µs on the Redis clock (fleet.now), or its tag once tagged
	costs   []int64       // its cost in each check of its request, at least 1
	wake    chan struct{} // signalled when something it waits for changed
	fl      *flow         // its class and tenant; nil when it keeps its arrival stamp
	tagged  bool          // stamp is the tag the turn script gave it (classes.go)
	inc     int64         // its flow's inner increment when tagged (0: unknown), which a hand-back returns
	x       int64         // its inner tag when tagged (classes.go, grid): its stamp is its class's grid at x
	seen    int64         // the turn script's time of its tag, or of the latest shift of its flow applied since
	arrived int64         // its arrival, µs on the Redis clock, which its stamp was until tagged
	direct  bool          // it has a flow and asks at once (lane.direct counts it)
	early   bool          // a Finish may make room for it early: its calls hold slots or settle costs
	told    bool          // it joined the fleet's queue to hear of such room (await)
	paced   bool          // its lane is paced (pace.go): it asks only in the fleet's order
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// busy reports whether a caller of Allow must wait behind others: callers
// wait here or in another process, or an upstream block holds the lane.
func (ln *lane) busy() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.q) > 0 || ln.othersMin != none || time.Now().Before(ln.blocked)
}

// learn notes what a refusal of Allow said: the time the windows free up.
func (ln *lane) learn(d engine.Decision) {
	ln.mu.Lock()
	if at := time.Now().Add(d.RetryAfter); len(ln.q) == 0 && at.After(ln.wakeAt) {
		ln.wakeAt = at
	}
	ln.mu.Unlock()
}

// kick lets the head ask at once: a settlement or a released slot may
// have made room before the time it was told (a head asking now asks
// again if refused: refused).
func (ln *lane) kick() {
	ln.mu.Lock()
	ln.wakeAt, ln.kicked = time.Time{}, true
	if len(ln.q) > 0 {
		ln.q[0].signal()
	}
	ln.mu.Unlock()
}

// quietNews is how long room that a Finish made without telling the
// fleet (no other process was known to wait) is news to a head another
// process then queues: as long as the engine's slot retry, the time a
// head refused by an in-flight window waits; a head refused before the
// room was made may have joined the fleet's queue only after it.
const quietNews = time.Second

// quietSettle is how long after a FinishAsync the fleet is told of the
// room it made, at the earliest: the finish reaches Redis within 1 ms and
// a round trip or two (Engine.FinishAsync), and a head told before it
// would be refused and wait its time again.
const quietSettle = 20 * time.Millisecond

// roomQuietly lets the head ask at once after a Finish that made room
// and told no other process (FinishAsync), and notes when. It returns
// whether another process's head became known to wait since the Finish
// looked: that one must be told, after wait.
func (ln *lane) roomQuietly() (wait time.Duration, tell bool) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	ln.wakeAt, ln.kicked = time.Time{}, true
	ln.signalHead()
	if ln.othersMin != none {
		return quietSettle, true
	}
	ln.quiet = time.Now()
	return 0, false
}

// setOthers notes the earliest arrival of another process's head, v
// (none for none); ln.mu is held. It reports whether the fleet must hear
// "room now", after wait: another process's head is newly known to wait,
// and a Finish here made room without telling anyone less than quietNews
// ago, which that head, refused before it, may have missed.
func (ln *lane) setOthers(v int64) (wait time.Duration, tell bool) {
	was := ln.othersMin
	ln.othersMin = v
	if was != none || v == none || ln.quiet.IsZero() {
		return 0, false
	}
	since := time.Since(ln.quiet)
	ln.quiet = time.Time{}
	return max(quietSettle-since, 0), since < quietNews
}

// othersWait reports whether another process's head is known to wait in
// ln.
func (ln *lane) othersWait() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.othersMin != none
}

// paceOnly reports whether the time the lane waits for is its pacing
// slot alone (pace.go), not a time its windows said: within paceSkew of
// the slot. Pacing spaces the asks of waiters; a caller that finds the
// lane idle asks at once. ln.mu is held.
func (ln *lane) paceOnly() bool {
	return !ln.paceAt.IsZero() && !ln.wakeAt.After(ln.paceAt.Add(paceSkew))
}

// paceSkew is how far after the pacing slot a lane's wake time may lie and
// still be the slot: the two are read on the clock a few calls apart.
const paceSkew = time.Millisecond

// enter reports whether w may ask Redis at once: nobody waits, here or
// elsewhere, no block holds the lane and the windows were not found full
// (the lane's pacing slot, which spaces waiters, holds no caller that
// finds the lane idle).
// Such callers ask concurrently; a refusal queues them (refused). Else
// enter queues w, having tagged it first when it has a flow.
func (ln *lane) enter(w *waiter) bool {
	ln.mu.Lock()
	now := time.Now()
	if len(ln.q) == 0 && ln.othersMin == none && !now.Before(ln.blocked) && (!now.Before(ln.wakeAt) || ln.paceOnly()) &&
		(w.fl == nil || ln.direct == 0) {
		// Callers with a flow ask at once one at a time: callers that
		// arrive together queue in their tags' order behind the first.
		if w.fl != nil {
			ln.direct++
			w.direct = true
		}
		ln.mu.Unlock()
		return true
	}
	if w.fl == nil {
		ln.queue(w)
		ln.mu.Unlock()
		return false
	}
	ln.tagging++
	ln.mu.Unlock()
	ln.t.fleet.tagWaiter(ln, w)
	ln.mu.Lock()
	ln.tagging--
	ln.queue(w)
	// A tag may go before the head's: this process's entry in the
	// fleet's queue moves to it at once.
	join := ln.joined && ln.q[0] == w
	var o op
	if join {
		o = ln.t.fleet.op(ln, "j", w.stamp, 0)
	}
	ln.mu.Unlock()
	if join {
		ln.t.fleet.send(ln, o)
	}
	return false
}

// contended reports whether a call admitted at once must be charged to
// its flow (fleet.charge): calls of the lane are tagged in the fleet, or
// callers queue here or are being tagged to.
func (ln *lane) contended() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.flows || len(ln.q) > 0 || ln.tagging > 0
}

// tagged reports whether calls of the lane are tagged in the fleet, so
// that a call without a flow is tagged too (as tenant "").
func (ln *lane) tagged() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.flows
}

// asked ends w's asking at once, if it did: its answer came, or it
// left before asking.
func (ln *lane) asked(w *waiter) {
	if !w.direct {
		return
	}
	w.direct = false
	ln.mu.Lock()
	ln.direct--
	ln.mu.Unlock()
}

// queue puts w in arrival order; ln.mu is held. Callers that asked at
// once and were refused may have arrived before some that queued, the
// head included: they go before it unless it is asking.
func (ln *lane) queue(w *waiter) {
	if w.tagged && w.inc > 0 && w.fl != nil {
		ln.catchUp(w) // a shift heard of since its tag
		if g, ok := ln.grids[w.fl.split]; ok {
			// A grid that came between its tag and now remapped the
			// others: its tag follows.
			w.stamp = g.outer(w.x, w.inc, w.fl.credit)
		}
	}
	i := len(ln.q)
	for i > 0 && ln.q[i-1].stamp > w.stamp {
		i--
	}
	if i == 0 && len(ln.q) > 0 && ln.asking {
		i = 1 // the head is asking; it keeps its place
	}
	ln.q = append(ln.q, nil)
	copy(ln.q[i+1:], ln.q[i:])
	ln.q[i] = w
	if i == 0 {
		w.signal()
	}
}

// admitted takes w, just admitted, out of the queue when it is the head
// (else it asked at once, unqueued), and notes its tag, its credit undone,
// as its class's served tag: a flow new to the class starts no earlier
// (fleet.tag). It reports whether w was the head; ln.mu is held.
func (ln *lane) admitted(w *waiter) bool {
	if w.tagged && w.inc > 0 && w.fl != nil {
		if ln.served == nil {
			ln.served = make(map[string]int64)
		}
		tag := w.stamp + int64(w.fl.credit)*w.inc
		ln.served[w.fl.split] = max(ln.served[w.fl.split], tag)
	}
	head := len(ln.q) > 0 && ln.q[0] == w
	if head {
		ln.q = ln.q[1:]
	}
	return head
}

// giveUp takes w out, as remove does, for a caller whose context ended
// before it was admitted: a tagged waiter's tag is taken out of its flow
// in the fleet (untag), whose message moves its flow's later waiters
// here too.
func (ln *lane) giveUp(w *waiter) {
	ln.mu.Lock()
	tagged := w.tagged && w.inc > 0 && w.fl != nil
	hole, inc, seen := w.x, w.inc, w.seen
	ln.mu.Unlock()
	ln.remove(w)
	if tagged {
		ln.t.fleet.untag(ln, w.fl, hole, inc, seen)
	}
}

// remove takes w out, handing the head's place, and the fleet's turn if
// this process had it, to the next caller.
func (ln *lane) remove(w *waiter) {
	ln.mu.Lock()
	head := len(ln.q) > 0 && ln.q[0] == w
	for i, x := range ln.q {
		if x == w {
			ln.q = append(ln.q[:i], ln.q[i+1:]...)
			break
		}
	}
	// The windows free up when they did: the next head asks then.
	at := ln.wakeAt
	ln.handOver(head, func(*waiter) time.Duration { return max(time.Until(at), 0) })
}

// handOver ends the turn of a head that left (admitted, or its context
// ended) and unlocks ln: the next caller, if any, becomes head and may ask
// after hint(next); the fleet's turn passes on when another process's head
// arrived before it, or when none is left here, telling it to ask after
// hint(nil) (its costs are not known here).
func (ln *lane) handOver(wasHead bool, hint func(next *waiter) time.Duration) {
	if !wasHead {
		ln.mu.Unlock()
		return
	}
	ln.asking = false
	var next *waiter
	if len(ln.q) > 0 {
		next = ln.q[0]
	}
	ln.wakeAt = time.Now().Add(hint(next))
	pass := ln.joined && (next == nil || next.stamp > ln.othersMin)
	stamp := int64(-1)
	if next != nil {
		stamp = next.stamp
	}
	var o op
	if pass {
		ln.onTurn = false
		if next == nil {
			ln.joined = false
		}
		o = ln.t.fleet.op(ln, "p", stamp, hint(nil))
	}
	ln.mu.Unlock()
	if pass {
		ln.t.fleet.send(ln, o)
	}
	if next != nil {
		next.signal()
	}
}

// await returns when w is the head, the fleet's turn is this process's
// (or it has no entry in the fleet's queue) and the time to ask has come;
// or with ctx.Err() when ctx ends first.
func (ln *lane) await(ctx context.Context, w *waiter) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ln.mu.Lock()
		now := time.Now()
		var until time.Time // zero: wait for a signal only
		renew := false
		join := false
		switch {
		case ln.q[0] != w:
		case !ln.joined && ln.othersMin != none:
			// Other processes wait: take a place in the fleet's order
			// before asking, or this head would race theirs.
			ln.joined, join, w.told = true, true, true
		case !ln.joined && w.early && !w.told && ln.wakeAt.Sub(now) > joinWait:
			// The lane waits for a time it learned (a refusal, an
			// admission that filled a window) without an entry: a
			// Finish in another process that makes room sooner tells
			// only the processes it knows wait. Once per caller, so
			// that a Redis failure (apply) does not make it a loop.
			ln.joined, join, w.told = true, true, true
		case !ln.joined && w.paced && !w.told:
			// A paced lane's next slot travels with the fleet's turn:
			// processes that asked out of turn would each keep a
			// schedule of their own, and fill a window in bursts.
			ln.joined, join, w.told = true, true, true
		case ln.joined && !ln.onTurn:
			// Another process has the turn; renew this entry's lease in
			// case it died, which also finds out.
			until, renew = ln.renewed.Add(fleetLease/2), true
		default:
			until = ln.wakeAt
			if ln.blocked.After(until) {
				until = ln.blocked
			}
			if ln.joined && ln.renewed.Add(fleetLease/3).Before(until) {
				until, renew = ln.renewed.Add(fleetLease/3), true
			}
			if !now.Before(until) && !renew {
				ln.afterKick, ln.kicked, ln.asking = ln.kicked, false, true
				if !ln.afterKick {
					ln.recheck = 0
				}
				ln.mu.Unlock()
				return nil
			}
		}
		if join || renew && !now.Before(until) {
			o := ln.t.fleet.op(ln, "j", w.stamp, 0)
			ln.mu.Unlock()
			ln.t.fleet.send(ln, o)
			continue
		}
		ln.mu.Unlock()
		var tc <-chan time.Time
		if !until.IsZero() {
			if timer == nil {
				timer = time.NewTimer(until.Sub(now))
			} else {
				timer.Reset(until.Sub(now))
			}
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.wake:
		case <-tc:
		}
	}
}

// joinWait is the longest a head waits for a time its lane learned
// without an entry in the fleet's queue, when a Finish elsewhere may make
// room sooner: the fleet's hand-off bound, so that short waits cost no
// script calls.
const joinWait = 50 * time.Millisecond

// partsRecheck is how soon a caller that asked at once asks again after a
// refusal, when the engine splits a request across servers: another
// request's reservation, rolled back since, may have refused it.
const partsRecheck = 50 * time.Millisecond

// kickRecheck is the first wait of a kicked head refused by the engine's
// cached denials, doubling on each such refusal until kickPatience.
const (
	kickRecheck  = 10 * time.Millisecond
	kickPatience = time.Second
)

// refused notes a refusal of the head's call: it asks again when the
// windows free up, and joins the fleet's order if not in it yet.
func (ln *lane) refused(w *waiter, d engine.Decision, err error) {
	wait := d.RetryAfter
	if wait <= 0 {
		// No window said when (Redis failed and the fail mode is closed):
		// ask again a little later.
		wait = 100 * time.Millisecond
	}
	ln.mu.Lock()
	var prev *waiter // the head before w's refusal
	if len(ln.q) > 0 {
		prev = ln.q[0]
	}
	if prev != w && !slices.Contains(ln.q, w) && ln.t.parts {
		// Asked at once, as callers of other processes may have: their
		// reservations on other servers, rolled back since, may have
		// refused it. Ask again soon, in turn.
		wait = min(wait, partsRecheck)
	}
	if prev == w && ln.kicked {
		// A Finish here or the fleet said the windows have room while it
		// asked: the refusal may predate that room. Ask again at once.
		wait = 0
	}
	// A refusal shows the room a Finish here made quietly taken.
	ln.quiet = time.Time{}
	if ln.afterKick && d.Source == "cache" && ln.recheck < kickPatience {
		// Refused in process after a kick: the give back that made room
		// clears this process's cached denials by a message of its own,
		// which may come after the kick. Ask again soon, backing off.
		ln.recheck = max(2*ln.recheck, kickRecheck)
		wait, ln.kicked = min(wait, ln.recheck), true
	}
	switch {
	case prev == w:
		// Callers refused while it asked may have arrived before it:
		// it goes back in arrival order.
		ln.asking = false
		ln.q = ln.q[1:]
		ln.queue(w)
	case !slices.Contains(ln.q, w):
		ln.queue(w)
	}
	head := ln.q[0]
	if prev != w && head != w {
		// Refused while asking at once, behind callers that queued: the
		// head learns the time as well from its own refusal.
		ln.mu.Unlock()
		return
	}
	ln.wakeAt = time.Now().Add(wait)
	// A new head moves this process's entry to its arrival.
	join := !ln.joined || head != prev
	// Joined from now: a message giving this process the turn may come
	// before the reply.
	ln.joined = true
	var o op
	if join {
		o = ln.t.fleet.op(ln, "j", head.stamp, 0)
	}
	ln.mu.Unlock()
	if join {
		ln.t.fleet.send(ln, o)
	}
	if head != w {
		head.signal()
	}
	_ = err
}

// nextHint is how long after d admitted a call the next caller w of the
// lane should wait: until every window without room for w's cost has room
// again, as far as d tells (the oldest entry's leaving; a call that needs
// more learns the exact time from its refusal). A nil w, whose costs are
// not known, counts 1 in each window.
func nextHint(d *engine.Decision, w *waiter) time.Duration {
	var hint time.Duration
	for _, ws := range d.Windows {
		if ws.Window.Concurrent {
			continue // a slot frees when a call finishes, which kicks the lane
		}
		cost := int64(1)
		if w != nil && ws.Check < len(w.costs) {
			cost = w.costs[ws.Check]
		}
		if ws.Remaining < cost && ws.Reset > hint {
			hint = ws.Reset
		}
	}
	return hint
}

// signalHead wakes the head; ln.mu is held.
func (ln *lane) signalHead() {
	if len(ln.q) > 0 {
		ln.q[0].signal()
	}
}

// holdUntil makes the lane wait for an upstream block until at; ln.mu is
// held.
func (ln *lane) holdUntil(at time.Time) {
	if at.After(ln.blocked) {
		ln.blocked = at
	}
}

// fresh reports whether what the fleet's queue said at version v is newer
// than what ln applied, and notes v; ln.mu is held. A version is ignored
// only against one applied within a lease, since the counter restarts
// when the queue's keys expire.
func (ln *lane) fresh(v int64) bool {
	now := time.Now()
	if v < ln.ver && now.Sub(ln.verAt) < fleetLease {
		return false
	}
	ln.ver, ln.verAt = v, now
	return true
}
