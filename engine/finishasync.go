package engine

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// asyncBound is how long a FinishAsync's work waits in this process for a
// script call to ride (the next batch of any Allow, Peek or Finish) before
// it is sent on its own. When it runs out while every batch slot of the
// engine is in flight, the batch led when one returns takes the work
// instead, and the wait starts again in case none is led: so the work
// leaves at the latest asyncBound after FinishAsync or, on a busy engine,
// one batch round trip later. Under load a batch comes much sooner, and
// the work usually leaves within microseconds.
const asyncBound = time.Millisecond

// FinishAsync is Finish without waiting. It queues the finish of the
// request that d admitted and returns at once, so that no response waits
// for a Redis round trip. It is safe for concurrent use.
//
// This engine sees the finish at once: an Allow it makes after FinishAsync
// returns sees the finish applied. Other processes see it within 1 ms plus
// one or two round trips, plus a retry's delay when Redis fails. A decision
// of the local fallback (Source "local") is finished before FinishAsync
// returns. Close sends what is queued. A process that crashes first loses
// it: the slots free when their lease ends, and the request stays charged
// its estimate until it leaves its windows.
//
// Errors are logged, at most one line per 10 s, and counted, never
// returned. They are an outcome Finish would refuse (nothing is changed), a
// call after Close, and a Redis failure (the work is then queued and
// retried, as by Finish).
func (e *Engine) FinishAsync(d Decision, o Outcome) {
	t := d.taken
	if t == nil || !d.Allowed {
		return
	}
	c := getCall()
	op := c.finishName(&o)
	deltas, err := c.deltas(t, o.Actual)
	if err != nil {
		putCall(c)
		e.asyncFailed(op, t.member(), err)
		return
	}
	if t.src == fromLocal {
		c.finishing(t, &o, deltas, false)
		e.local.Finish(t.id, c.fin)
		putCall(c)
		return
	}
	if e.closed.Load() {
		putCall(c)
		e.asyncFailed(op, t.member(), ErrClosed)
		return
	}
	c.finishing(t, &o, deltas, false)
	if len(c.fin) == 0 {
		putCall(c)
		return
	}
	e.unhold(t, c.fin)
	c.pub, c.op = e.chanName, op
	e.route(c)
	if needsDown(c) {
		// As in Finish: the batch that finds the server back runs it.
		e.undos.Push(c.fin...)
		e.async.failed.Add(1)
		e.warnFailed(op, c.fin[0].Member, errNotAsked)
		putCall(c)
		return
	}
	// Answers sent before now may count what the finish removes: this
	// process's cached denials must not rely on them (see forgetAsync).
	e.forgetAsync(c)
	if !e.async.push(e, c) { // from here on, c is the queue's
		putCall(c)
		e.asyncFailed(op, t.member(), ErrClosed)
	}
}

// finishAsyncFailures returns how many FinishAsync calls failed so far
// (see FinishAsync): refused, made after Close, or met a Redis failure
// and were queued to be retried.
func (e *Engine) finishAsyncFailures() uint64 { return e.async.failed.Load() }

// asyncQueue holds the finishes of FinishAsync from their call until
// Redis answered them: queued (pending) until a batch or the timer takes
// them, then in the air in a flight until its answer is read.
type asyncQueue struct {
	n       atomic.Int32 // calls pending or in the air: 0 lets batches skip the lock
	failed  atomic.Uint64
	mu      sync.Mutex
	pending []*call
	// since is when the first pending call was queued, at the latest (µs
	// of e.elapsed): the engine's last answer before it, whose clock
	// reading costs nothing more. An earlier since only sends sooner.
	since  int64
	air    []*flight
	timer  *time.Timer   // sends pending calls bound after the first
	armed  bool          // the timer will run
	bound  time.Duration // asyncBound; tests that must see the queue lengthen it
	closed bool
}

// A flight is the queued finishes one script call (or pipeline) carries.
// Flights are pooled, with their buffers: taking the pending calls off
// then allocates nothing.
type flight struct {
	calls []*call
	nkeys int                 // keys of the calls, counted with repeats
	keys  map[string]struct{} // the calls' keys, once indexed (see uses)
	index bool                // keys holds them
	done  chan struct{}       // made for the first waiter; closed once they were answered
}

var flightPool = sync.Pool{New: func() any { return new(flight) }}

// flightIndex is how many keys a flight holds before uses indexes them:
// below, a scan costs less than building the index.
const flightIndex = 8

// uses reports whether a call of fl uses key k. Called with the queue's
// lock held.
func (fl *flight) uses(k string) bool {
	if fl.nkeys <= flightIndex {
		for _, c := range fl.calls {
			if slices.Contains(c.plan.Keys, k) {
				return true
			}
		}
		return false
	}
	if !fl.index {
		if fl.keys == nil {
			fl.keys = make(map[string]struct{}, fl.nkeys)
		}
		for _, c := range fl.calls {
			for _, key := range c.plan.Keys {
				fl.keys[key] = struct{}{}
			}
		}
		fl.index = true
	}
	_, ok := fl.keys[k]
	return ok
}

// wait returns a channel closed once fl was answered. Called with the
// queue's lock held, while fl is in the air.
func (fl *flight) wait() <-chan struct{} {
	if fl.done == nil {
		// Made only when a batch must wait: most flights land unwatched.
		fl.done = make(chan struct{})
	}
	return fl.done
}

// push queues c and, when c is the first pending call, makes sure the
// timer runs within the bound. It reports false after Close.
func (a *asyncQueue) push(e *Engine, c *call) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return false
	}
	a.pending = append(a.pending, c)
	a.n.Add(1)
	if len(a.pending) == 1 {
		a.since = e.lastAnswer.Load()
		if a.since == 0 {
			a.since = e.elapsed() // no answer yet, or a test clock
		}
		if !a.armed {
			// An armed timer runs before the bound of this call, and is
			// armed again then for the rest (see flushAsync): moving it
			// for every first call would cost a timer reset per finish,
			// where batches take nearly all of them.
			a.arm(e, a.bound)
		}
	}
	return true
}

// arm makes the timer run flushAsync after d. Called with a.mu held.
func (a *asyncQueue) arm(e *Engine, d time.Duration) {
	if a.timer == nil {
		a.timer = time.AfterFunc(d, e.flushAsync)
	} else {
		a.timer.Reset(d)
	}
	a.armed = true
}

// takeOff makes the pending calls a flight in the air and returns it, or
// nil when none is pending. Called with a.mu held.
func (a *asyncQueue) takeOff() *flight {
	if len(a.pending) == 0 {
		return nil
	}
	fl := flightPool.Get().(*flight)
	// The flight's emptied buffer holds the next pending calls.
	fl.calls, a.pending = a.pending, fl.calls[:0]
	fl.nkeys = 0
	for _, c := range fl.calls {
		fl.nkeys += len(c.plan.Keys)
	}
	a.air = append(a.air, fl)
	return fl
}

// conflicts appends to wait the flights in the air that carry a key of
// an Allow or Peek of batch, and returns it. Called with a.mu held.
func (a *asyncQueue) conflicts(batch []*call, wait []<-chan struct{}) []<-chan struct{} {
	for _, fl := range a.air {
	calls:
		for _, c := range batch {
			if c.mode == opFinish {
				continue // finishes commute with finishes of other requests
			}
			for _, k := range c.plan.Keys {
				if fl.uses(k) {
					wait = append(wait, fl.wait())
					break calls
				}
			}
		}
	}
	return wait
}

// touches reports whether a queued finish not yet answered uses a key of
// c: a cached denial of c could then miss what it frees. It is asked only
// before a cached denial, so the pending calls are scanned rather than
// indexed.
func (a *asyncQueue) touches(c *call) bool {
	if a.n.Load() == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range c.plan.Keys {
		for _, fl := range a.air {
			if fl.uses(k) {
				return true
			}
		}
		for _, q := range a.pending {
			if slices.Contains(q.plan.Keys, k) {
				return true
			}
		}
	}
	return false
}

// board returns the calls a batch's script call carries: the pending
// finishes first, then batch, in buf; and the flight of those finishes
// (nil for none). Before it returns, the batch waits for the answers of
// the flights already in the air that carry finishes of its keys: they
// may have been sent on another connection, which Redis may read later.
func (e *Engine) board(batch, buf []*call) ([]*call, *flight) {
	a := &e.async
	var room [4]<-chan struct{}
	wait := room[:0]
	a.mu.Lock()
	if len(a.air) > 0 {
		wait = a.conflicts(batch, wait)
	}
	fl := a.takeOff()
	a.mu.Unlock()
	for _, w := range wait {
		<-w
	}
	if fl == nil {
		return batch, nil
	}
	return append(append(buf[:0], fl.calls...), batch...), fl
}

// land reads the outcome of fl's finishes, which their batch has run,
// and takes them out of the queue.
func (e *Engine) land(fl *flight) {
	for _, c := range fl.calls {
		if err := e.finished(c, c.op); err != nil {
			if c.err != nil {
				e.async.failed.Add(1) // queued, and logged by finished
			} else {
				e.asyncFailed(c.op, c.fin[0].Member, err)
			}
		}
	}
	a := &e.async
	a.mu.Lock()
	for i, f := range a.air {
		if f == fl {
			a.air = slices.Delete(a.air, i, i+1)
			break
		}
	}
	a.n.Add(-int32(len(fl.calls)))
	done := fl.done
	a.mu.Unlock()
	if done != nil {
		close(done)
	}
	// Out of the air, fl is no one else's: batches that waited for it
	// hold its channel only.
	for _, c := range fl.calls {
		putCall(c)
	}
	clear(fl.calls)
	fl.calls, fl.done = fl.calls[:0], nil
	if fl.index {
		clear(fl.keys)
		fl.index = false
	}
	flightPool.Put(fl)
}

// flushAsync sends the pending finishes on their own: the timer's work,
// asyncBound after the first was queued, when no batch took them. The
// timer may run earlier, armed for calls that a batch took since: it is
// then armed again for the rest of the first pending call's bound.
func (e *Engine) flushAsync() {
	a := &e.async
	full := e.batch.full()
	a.mu.Lock()
	a.armed = false
	if len(a.pending) == 0 || a.closed {
		a.mu.Unlock()
		return
	}
	if left := a.bound - time.Duration(e.elapsed()-a.since)*time.Microsecond; left > 0 {
		// Armed for calls a batch took since: the first pending one was
		// queued later.
		a.arm(e, left)
		a.mu.Unlock()
		return
	}
	if full {
		// Every batch slot is in flight: the batch led when one returns,
		// by a call queued or made meanwhile (under load, its callers'
		// next ones), takes the pending finishes without a script call of
		// their own. The timer runs again in case none comes.
		a.arm(e, a.bound)
		a.mu.Unlock()
		return
	}
	fl := a.takeOff()
	a.mu.Unlock()
	e.fly(fl)
}

// fly runs fl's finishes in a script call of their own and lands them. A
// panic (a panicking client or hook) fails them, so they are queued as
// undos, and is logged: it must not crash the process from the timer's
// goroutine.
func (e *Engine) fly(fl *flight) {
	done := false
	defer func() {
		if !done {
			p := recover()
			for _, c := range fl.calls {
				c.err = errPanicked
			}
			e.log.Error("engine: sending queued finishes panicked; retried before the next script call", "panic", fmt.Sprint(p))
		}
		e.land(fl)
	}()
	e.run(fl.calls[0], fl.calls)
	done = true
}

// drainAsync sends the pending finishes and waits until every finish in
// the air was answered. With closing set, later FinishAsync calls are
// refused (Close).
func (e *Engine) drainAsync(closing bool) {
	a := &e.async
	a.mu.Lock()
	if closing {
		a.closed = true
		if a.timer != nil {
			a.timer.Stop()
			a.armed = false
		}
	}
	fl := a.takeOff()
	var air []<-chan struct{}
	for _, f := range a.air {
		if f != fl {
			air = append(air, f.wait())
		}
	}
	a.mu.Unlock()
	if fl != nil {
		e.fly(fl)
	}
	for _, w := range air {
		<-w
	}
}

// forgetAsync forgets, in this process's cache of denials, the keys that
// c's finish removes entries from: an answer sent before now may still
// count them. (The script publishes the removals for every process, and
// land forgets them again once they are done.)
func (e *Engine) forgetAsync(c *call) {
	var now int64
	read := false // the clock, only for a finish that publishes
	for i := range c.fin {
		if c.fin[i].Publishes() {
			if !read {
				now, read = e.mono(), true
			}
			e.known.Invalidate(c.fin[i].Key, now)
		}
	}
}

// asyncFailed counts a failed FinishAsync and logs it, throttled with the
// other failed finishes.
func (e *Engine) asyncFailed(op, member string, err error) {
	e.async.failed.Add(1)
	e.undos.LogFailed("engine: FinishAsync's "+op+" failed; not retried", member, err)
}
