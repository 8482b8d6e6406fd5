package engine

import (
	"fmt"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/async"
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
	t := d.admitted
	if t == nil || !d.Allowed {
		return
	}
	c := getCall()
	op := c.finishName(&o)
	deltas, err := c.deltas(t, o.Actual)
	if err != nil {
		putCall(c)
		e.asyncFailed(op, t.Member(), err)
		return
	}
	if t.Local {
		c.finishing(t, &o, deltas, false)
		e.local.Finish(t.ID, c.fin)
		putCall(c)
		return
	}
	if e.closed.Load() {
		putCall(c)
		e.asyncFailed(op, t.Member(), ErrClosed)
		return
	}
	c.finishing(t, &o, deltas, false)
	if len(c.fin) == 0 {
		putCall(c)
		return
	}
	e.unhold(t, c.fin)
	if o.GiveBack && e.rep != nil {
		// Queued for the peers now: a removal that arrives before the
		// local one makes a peer count less a moment early, never more.
		e.replicateGiveBack(c.fin)
	}
	c.pub, c.op = e.chanName, op
	e.route(c)
	if needsDown(c) {
		// As in Finish: the batch that finds the server back runs it.
		e.undos.Push(c.fin...)
		e.async.AddFailed()
		e.warnFailed(op, c.fin[0].Member, errNotAsked)
		putCall(c)
		return
	}
	// Answers sent before now may count what the finish removes: this
	// process's cached denials must not rely on them (see forgetAsync).
	e.forgetAsync(c)
	if !e.async.Push(c) { // from here on, c is the queue's
		putCall(c)
		e.asyncFailed(op, t.Member(), ErrClosed)
	}
}

// finishAsyncFailures returns how many FinishAsync calls failed so far
// (see FinishAsync): refused, made after Close, or met a Redis failure
// and were queued to be retried.
func (e *Engine) finishAsyncFailures() uint64 { return e.async.Failed() }

// flight is the finishes of FinishAsync that one script call carries.
type flight = async.Flight[*call]

// Keys returns the keys c uses (async.Call).
func (c *call) Keys() []string { return c.plan.Keys }

// Finishing reports whether c is a finish (async.Call).
func (c *call) Finishing() bool { return c.mode == opFinish }

// initAsync sets up the queue of FinishAsync.
func (e *Engine) initAsync() {
	e.async.Init(async.Config[*call]{
		Bound: asyncBound,
		Since: func() int64 {
			if t := e.lastAnswer.Load(); t != 0 {
				return t
			}
			return e.elapsed() // no answer yet, or a test clock
		},
		Elapsed: e.elapsed, Full: e.batch.full, Send: e.send,
	})
}

// complete reads the outcome of fl's finishes, which their batch has run,
// and takes them out of the queue.
func (e *Engine) complete(fl *flight) {
	for _, c := range fl.Calls {
		if err := e.finished(c, c.op); err != nil {
			if c.err != nil {
				e.async.AddFailed() // queued, and logged by finished
			} else {
				e.asyncFailed(c.op, c.fin[0].Member, err)
			}
		}
	}
	e.async.Complete(fl, putCall)
}

// send runs fl's finishes in a script call of their own and completes them.
// A panic (a panicking client or hook) fails them, so they are queued as
// undos, and is logged: it must not crash the process from the timer's
// goroutine.
func (e *Engine) send(fl *flight) {
	done := false
	defer func() {
		if !done {
			p := recover()
			for _, c := range fl.Calls {
				c.err = errPanicked
			}
			e.log.Error("engine: sending queued finishes panicked; retried before the next script call", "panic", fmt.Sprint(p))
		}
		e.complete(fl)
	}()
	e.run(fl.Calls[0], fl.Calls)
	done = true
}

// forgetAsync forgets, in this process's cache of denials, the keys that
// c's finish removes entries from: an answer sent before now may still
// count them. (The script publishes the removals for every process, and
// complete forgets them again once they are done.)
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
	e.async.AddFailed()
	e.undos.LogFailed("engine: FinishAsync's "+op+" failed; not retried", member, err)
}
