package throttle

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/slidelimit/slidelimit/engine"
)

// Classes and tenants (docs/throttle.md, Classes and tenants) order the
// waiters of a lane by start-time fair queuing in two levels: a waiting
// call of flow f, its class and tenant, is given a tag in Redis by the
// turn script (op 't'). Within its class, f's calls get inner tags one
// increment apart, the call's fair interval over its class's share,
// whatever the number of tenants: the tenants take turns. The class's grid
// maps inner tags to tags, spacing the class's calls by the number n of
// its tenants with calls ahead, so that the class's part is its share;
// when n changes the script continues the grid from virtual time V (the
// lowest tag of a head in the fleet's queue) and every process remaps its
// waiting calls of the class (regrid). The tag takes the place of the
// arrival stamp: in the local queue, and as this process's score in the
// fleet's queue, where the lowest score has the turn. Calls with no
// tenant, in a throttle without shares, are not tagged and keep their
// arrival stamps, unless calls of their lane are tagged in the fleet (the
// lane's flows hash exists, as the turn script's replies say): they are
// then tagged as tenant "".

// maxTagStep caps a tag's increment (µs), so that tags stay exact in the
// doubles that Redis and Lua hold them in.
const maxTagStep = int64(1e12)

// defaultInterval is the fair interval of a call whose windows are all
// in-flight or calendar windows, which tell no rate.
const defaultInterval = 100 * time.Millisecond

// flow is what the turn script needs to tag a waiting call.
type flow struct {
	field  string // the hash field of its flow: class, "\n", tenant
	split  string // its class and "\n" when the throttle has shares: the class's tenants split its share
	weight int    // its class's share, percent; the others': what the shares leave, at least 1
	step   int64  // its fair interval, µs
	credit int    // increments its tags may start before its finish tag: shareCredit for a class with a share
}

// shareCredit is how many increments earlier than its finish tag a call
// of a flow of a class with a share is tagged: a flow with no call
// waiting starts that many increments before virtual time, so a call of
// a class of low demand goes before the waiters of the shareless class
// (whose tags start at virtual time), and calls of it that arrive
// together, up to shareCredit+1, are served before them, not spread by
// the share over its fair intervals. The shift is the same for every
// call of the flow, so a saturating class gains at most shareCredit
// calls over its share.
const shareCredit = 2

// sharesOf returns the shares of p's rules by class, and the part the calls
// without one share: what the shares leave, at least 1.
func sharesOf(p *Plan) (map[string]int, int) {
	if len(p.g.Shares) == 0 {
		return nil, 100
	}
	m := make(map[string]int, len(p.g.Shares))
	rest := 100
	for _, s := range p.g.Shares {
		m[s.Class] = s.Percent
		rest -= s.Percent
	}
	return m, max(rest, 1)
}

// flowOf returns the flow of c, whose request is req, or nil when c is
// not tagged: the throttle has no shares and c no tenant.
func (p *Plan) flowOf(c Call, req *engine.Request) *flow {
	if len(p.shares) == 0 && c.Tenant == "" {
		return nil
	}
	return p.flow(c, req)
}

// flow returns the flow of c, whose request is req.
func (p *Plan) flow(c Call, req *engine.Request) *flow {
	f := &flow{weight: p.rest}
	class := ""
	if w, ok := p.shares[c.Class]; ok {
		class, f.weight, f.credit = c.Class, w, shareCredit
	}
	f.field = class + "\n" + laneSubject(c.Tenant)
	if len(p.shares) > 0 {
		f.split = class + "\n"
	}
	f.step = min(interval(req).Microseconds(), maxTagStep/100)
	return f
}

// interval is the fair interval of req: the longest time one of its
// windows takes to admit its cost again when full, its cost times its
// period over its limit.
func interval(req *engine.Request) time.Duration {
	var d time.Duration
	for _, c := range req.Checks {
		cost := max(c.Cost, 1)
		for _, w := range c.Rule.Windows {
			if w.Concurrent || w.Calendar != "" || w.Limit <= 0 || w.Period <= 0 {
				continue
			}
			if iv := float64(w.Period) * float64(cost) / float64(w.Limit); iv > float64(d) {
				d = time.Duration(min(iv, math.MaxInt64/2))
			}
		}
	}
	if d <= 0 {
		return defaultInterval
	}
	return max(d, time.Microsecond)
}

// A grid maps the inner tags of a class whose tenants split its share to
// the fleet's order (turn.lua, op 't'): tag = a + (x - x0) × n, less the
// credit (credit × inc, whatever n), where n is the number of the class's
// tenants with calls ahead.
// The turn script continues a class's grid from virtual time when n
// changes, in a new epoch, and every process remaps its waiting calls of
// the class: tenants take turns on the inner clock, and the class's part
// stays its share however many tenants split it.
type grid struct{ a, x0, n, epoch int64 }

// outer returns the tag of a call of inner tag x, of a flow with
// increment inc and credit credit, on g.
func (g grid) outer(x, inc int64, credit int) int64 {
	return g.a + (x-g.x0)*g.n - int64(credit)*inc
}

// A tagging is the turn script's reply to op 't'.
type tagging struct {
	tag, inc, x int64
	at          int64 // the script's time, µs on the server's clock
	g           grid  // epoch 0: none (the class's share is not split)
}

// tag asks the turn script for the tag of a waiting call of flow fl in
// ln, or returns the arrival stamp and an increment of 0 when Redis
// fails.
func (f *fleet) tag(ln *lane, fl *flow, arrival int64) tagging {
	if f.client == nil {
		return tagging{tag: arrival}
	}
	ln.mu.Lock()
	served := ln.served[fl.split]
	ln.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f.t.stats.calls.Add(1)
	start := time.Now()
	res, err := turnScript.Run(ctx, f.client, f.keys(ln), "t", f.member, fl.field,
		fleetLease.Microseconds(), f.channel, ln.id, fl.step*100, fl.weight, fl.split, fl.credit, served).Int64Slice()
	if err != nil || len(res) < 12 {
		return tagging{tag: arrival}
	}
	f.clock(time.UnixMicro(res[5]), start)
	return tagging{tag: res[0], inc: max(res[1], 0), x: res[8], at: res[5], g: grid{a: res[9], x0: res[10], n: max(res[2], 1), epoch: res[11]}}
}

// tagWaiter tags w, a waiter of flow w.fl not in ln's queue, unless it
// is tagged already. A new grid of its class remaps the lane's waiters,
// and this process's entry in the fleet's queue follows its head.
func (f *fleet) tagWaiter(ln *lane, w *waiter) {
	if w.fl == nil || w.tagged {
		return
	}
	tg := f.tag(ln, w.fl, w.stamp)
	ln.mu.Lock()
	w.stamp, w.inc, w.x, w.seen, w.tagged = tg.tag, tg.inc, tg.x, tg.at, true
	ln.catchUp(w) // a shift heard of while its tag's reply came back
	var o op
	if tg.inc > 0 && tg.g.epoch > 0 {
		o = ln.regrid(w.fl.split, tg.g) // w, not queued yet, takes the lane's grid in queue
	}
	if tg.inc > 0 && ln.inOrder(w) && ln.joined {
		o = ln.t.fleet.op(ln, "j", ln.q[0].stamp, 0) // after regrid's, and instead of it
	}
	if o.kind != "" && len(ln.q) > 0 && !ln.asking && w.stamp < ln.q[0].stamp {
		// w goes before the head when its caller queues it, which moves
		// this process's entry to w's tag: an entry moved to the head's
		// tag first could be read meanwhile as the fleet's lowest, and
		// move virtual time past w's tag for good.
		o = op{}
	}
	ln.mu.Unlock()
	if o.kind != "" {
		f.send(ln, o)
	}
}

// inOrder keeps this process's waiters of w's flow in arrival order, w
// just tagged and not queued yet: a tag's script call that waited for a
// connection may come back after that of a later caller of the flow. The
// waiters trade tags (each with its increment) so that the earliest
// arrival holds the lowest; the queue stays in tag order (the head keeps
// its place while it asks). It reports whether the head's tag changed;
// ln.mu is held.
func (ln *lane) inOrder(w *waiter) bool {
	ws := []*waiter{w}
	for _, o := range ln.q {
		if o.tagged && o.inc > 0 && o.fl != nil && o.fl.field == w.fl.field {
			ws = append(ws, o)
		}
	}
	if !slices.ContainsFunc(ws[1:], func(o *waiter) bool { return o.arrived > w.arrived && o.x < w.x }) {
		return false
	}
	head, was := ln.q[0], ln.q[0].stamp // ws holds a queued waiter
	type tag struct{ x, inc int64 }
	tags := make([]tag, len(ws))
	var seen int64 // the latest shift any of them holds: each holds every one (catchUp)
	for i, o := range ws {
		tags[i] = tag{o.x, o.inc}
		seen = max(seen, o.seen)
	}
	slices.SortFunc(tags, func(a, b tag) int { return cmp.Compare(a.x, b.x) })
	slices.SortStableFunc(ws, func(a, b *waiter) int { return cmp.Compare(a.arrived, b.arrived) })
	for i, o := range ws {
		o.x, o.inc, o.seen = tags[i].x, tags[i].inc, seen
		o.stamp = o.x - int64(o.fl.credit)*o.inc // a class not split; else its grid, below
		if g, ok := ln.grids[o.fl.split]; ok {
			o.stamp = g.outer(o.x, o.inc, o.fl.credit)
		}
	}
	from := 0
	if ln.asking {
		from = 1
	}
	slices.SortStableFunc(ln.q[from:], func(a, b *waiter) int { return cmp.Compare(a.stamp, b.stamp) })
	if ln.q[0] != head {
		ln.q[0].signal()
	}
	return ln.q[0] != head || head.stamp != was
}

// regrid notes g, a grid of class, when newer than the lane's, remaps
// the queued waiters of class on it and keeps the queue in tag order (the
// head keeps its place while it asks). It returns the op that moves this
// process's entry in the fleet's queue to its head's new tag, if any (a
// zero op for none); ln.mu is held.
func (ln *lane) regrid(class string, g grid) op {
	if old, ok := ln.grids[class]; ok && old.epoch >= g.epoch {
		return op{}
	}
	if ln.grids == nil {
		ln.grids = make(map[string]grid)
	}
	ln.grids[class] = g
	var head *waiter
	var was int64
	if len(ln.q) > 0 {
		head, was = ln.q[0], ln.q[0].stamp
	}
	for _, w := range ln.q {
		if w.tagged && w.inc > 0 && w.fl != nil && w.fl.split == class {
			w.stamp = g.outer(w.x, w.inc, w.fl.credit)
		}
	}
	from := 0
	if ln.asking {
		from = 1
	}
	if len(ln.q) > from {
		slices.SortStableFunc(ln.q[from:], func(a, b *waiter) int { return cmp.Compare(a.stamp, b.stamp) })
	}
	if !ln.joined || head == nil || (ln.q[0] == head && head.stamp == was) {
		return op{}
	}
	if ln.q[0] != head {
		ln.q[0].signal()
	}
	return ln.t.fleet.op(ln, "j", ln.q[0].stamp, 0)
}

// untag tells the turn script (op 'r') that a call of flow fl, inner tag
// x with increment inc, gave up, seen the time of the last move of its
// flow applied to it (or of its tag): the flow's finish tag goes back by
// inc, and every process, this one too, moves the flow's later calls
// back (message h), as if the call had never been tagged. The script
// first moves x by the flow's moves made after seen, which reached this
// process too late to move the call. Without it a tenant
// whose waiters give up is served later than round robin says: each gave
// up turn was spent. It runs in a goroutine of its own, which ends
// within the call's timeout, so that a Wait whose context ended returns
// at once.
func (f *fleet) untag(ln *lane, fl *flow, x, inc, seen int64) {
	if f.client == nil || inc <= 0 {
		return
	}
	// A failure keeps the flow's finish tag: its later calls wait one
	// increment longer.
	f.runAside(ln, "r", fl.field, x, 0, inc, seen)
}

// runAside runs op of the turn script on flow field, with the arguments
// that follow the lane id, in a goroutine of its own that ends within
// the call's timeout (a second), so that no caller waits for it. Its
// reply is not needed: what it changes reaches every process as a
// message.
func (f *fleet) runAside(ln *lane, op, field string, args ...any) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		f.t.stats.calls.Add(1)
		_ = turnScript.Run(ctx, f.client, f.keys(ln),
			append([]any{op, f.member, field, fleetLease.Microseconds(), f.channel, ln.id}, args...)...).Err()
	}()
}

// charge tells the turn script (op 'a') that a call of flow fl was
// admitted at once, untagged, while calls of its lane wait or are tagged:
// it took its flow's next turn. The flow's finish tag moves on by an
// increment, as a tag would have moved it, and every process moves its
// waiting calls of the flow later by that increment (message a), as if
// the call had been tagged before them. Without it a tenant whose caller
// finds the lane idle, as each process's first caller does when a fleet
// starts, gets that call over its turns. It runs in a goroutine of its
// own, which ends within the call's timeout; a failure leaves the flow a
// turn ahead.
func (f *fleet) charge(ln *lane, fl *flow) {
	if f.client == nil {
		return
	}
	f.runAside(ln, "a", fl.field, fl.step*100, fl.weight, fl.split, fl.credit)
}

// A shift is a move of a flow's waiting calls that the turn script told
// (message h or a): those tagged after inner tag x move back by inc (later
// for a negative inc), at the script's time at (µs, the server's TIME).
type shift struct {
	field  string
	x, inc int64
	at     int64
	heard  time.Time // when this process heard of it (local clock)
}

// shiftKeep is how long a lane keeps a shift it heard of, for waiters
// tagged before it and queued after: a tag's script call times out
// within a second (fleet.tag). shiftCap bounds the shifts kept.
const (
	shiftKeep = 2 * time.Second
	shiftCap  = 1024
)

// shifted applies s to the lane's queued waiters (shift) and keeps it for
// those tagged before it and queued after (catchUp), so that a waiter
// whose tag and queueing a message falls between is moved as well. It
// reports whether the head or its tag changed; ln.mu is held.
func (ln *lane) shifted(s shift) bool {
	keep := ln.shifts[:0]
	for _, o := range ln.shifts {
		if s.heard.Sub(o.heard) < shiftKeep {
			keep = append(keep, o)
		}
	}
	if len(keep) >= shiftCap {
		keep = keep[:copy(keep, keep[len(keep)-shiftCap+1:])]
	}
	clear(ln.shifts[len(keep):])
	ln.shifts = append(keep, s)
	return ln.shift(s)
}

// catchUp applies to w, tagged and about to be queued or traded, the
// shifts of its flow the lane heard of that the turn script made after
// w's tag; ln.mu is held.
func (ln *lane) catchUp(w *waiter) {
	for _, s := range ln.shifts {
		ln.move(w, s)
	}
}

// move applies s to w when w is of s's flow and s came after what w
// holds (w.seen): its inner tag and stamp move back by s.inc when after
// s.x. It reports whether w moved; ln.mu is held.
func (ln *lane) move(w *waiter, s shift) bool {
	if !w.tagged || w.inc <= 0 || w.fl == nil || w.fl.field != s.field || s.at <= w.seen {
		return false
	}
	w.seen = s.at
	if w.x <= s.x {
		return false
	}
	n := int64(1) // the slope of the flow's grid: 1 for a class not split
	if g, ok := ln.grids[w.fl.split]; ok {
		n = g.n
	}
	w.x -= s.inc
	w.stamp -= s.inc * n
	return true
}

// shift moves the queued waiters of s's flow tagged after s.x, and before
// s was made, back by s.inc (later for a negative inc: charge), keeping
// the queue in tag order (the head keeps its place while it asks). It
// reports whether the head or its tag changed; ln.mu is held.
func (ln *lane) shift(s shift) bool {
	var head *waiter
	var was int64
	if len(ln.q) > 0 {
		head, was = ln.q[0], ln.q[0].stamp
	}
	for _, o := range ln.q {
		ln.move(o, s)
	}
	from := 0
	if ln.asking {
		from = 1 // the head is asking; it keeps its place
	}
	if len(ln.q) > from {
		slices.SortStableFunc(ln.q[from:], func(a, b *waiter) int { return cmp.Compare(a.stamp, b.stamp) })
	}
	if len(ln.q) == 0 {
		return false
	}
	if ln.q[0] != head {
		ln.q[0].signal()
		return true
	}
	return head.stamp != was
}
