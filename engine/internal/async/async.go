// Package async holds the finishes of FinishAsync from their call until
// Redis answered them: pending until a batch or the timer takes them,
// then sent in a flight until its answer is read.
package async

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A Call is a queued finish, or a call of a batch it rides with.
type Call interface {
	// Keys returns the keys the call uses.
	Keys() []string
	// Finishing reports whether the call is a finish: finishes of
	// different requests commute.
	Finishing() bool
}

// Config is what a Queue needs from its engine.
type Config[C Call] struct {
	// Bound is how long a finish waits for a batch to ride before the
	// timer sends it on its own.
	Bound time.Duration
	// Since returns the time of a finish queued now, at the latest (µs of
	// Elapsed): the engine's last answer, whose reading costs nothing.
	Since func() int64
	// Elapsed returns the engine's clock in µs.
	Elapsed func() int64
	// Full reports whether every batch slot of the engine is in flight.
	Full func() bool
	// Send sends fl's calls in a script call of their own, then Complete.
	Send func(fl *Flight[C])
}

// A Queue holds finishes until Redis answered them. It is safe for
// concurrent use once Init has run.
type Queue[C Call] struct {
	cfg     Config[C]
	n       atomic.Int32 // calls pending or sent: 0 lets batches skip the lock
	failed  atomic.Uint64
	mu      sync.Mutex
	pending []C
	// since is when the first pending call was queued, at the latest (µs
	// of Elapsed). An earlier since only sends sooner.
	since  int64
	sent   []*Flight[C]
	timer  *time.Timer // sends pending calls Bound after the first
	armed  bool        // the timer will run
	closed bool
	pool   sync.Pool // of *Flight[C], with their buffers
}

// A Flight is the finishes one script call (or pipeline) carries.
type Flight[C Call] struct {
	Calls []C
	nkeys int                 // keys of the calls, counted with repeats
	keys  map[string]struct{} // the calls' keys, once indexed (see uses)
	index bool                // keys holds them
	done  chan struct{}       // made for the first waiter; closed once they were answered
}

// IndexAt is how many keys a flight holds before uses indexes them:
// below, a scan costs less than building the index.
const IndexAt = 8

// uses reports whether a call of fl uses key k. Called with the queue's
// lock held.
func (fl *Flight[C]) uses(k string) bool {
	if fl.nkeys <= IndexAt {
		for _, c := range fl.Calls {
			if slices.Contains(c.Keys(), k) {
				return true
			}
		}
		return false
	}
	if !fl.index {
		if fl.keys == nil {
			fl.keys = make(map[string]struct{}, fl.nkeys)
		}
		for _, c := range fl.Calls {
			for _, key := range c.Keys() {
				fl.keys[key] = struct{}{}
			}
		}
		fl.index = true
	}
	_, ok := fl.keys[k]
	return ok
}

// wait returns a channel closed once fl was answered. Called with the
// queue's lock held, while fl is sent.
func (fl *Flight[C]) wait() <-chan struct{} {
	if fl.done == nil {
		// Made only when a batch must wait: most flights complete unwatched.
		fl.done = make(chan struct{})
	}
	return fl.done
}

// Init sets what q needs from its engine.
func (q *Queue[C]) Init(cfg Config[C]) { q.cfg = cfg }

// SetBound changes Config.Bound, for tests that must see the queue.
func (q *Queue[C]) SetBound(d time.Duration) { q.cfg.Bound = d }

// Len returns how many calls are pending or sent.
func (q *Queue[C]) Len() int { return int(q.n.Load()) }

// Failed returns the count of failures that AddFailed made.
func (q *Queue[C]) Failed() uint64 { return q.failed.Load() }

// AddFailed counts a failed finish.
func (q *Queue[C]) AddFailed() { q.failed.Add(1) }

// Push queues c and, when c is the first pending call, makes sure the
// timer runs within the bound. It reports false after Drain(true).
func (q *Queue[C]) Push(c C) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	q.pending = append(q.pending, c)
	q.n.Add(1)
	if len(q.pending) == 1 {
		q.since = q.cfg.Since()
		if !q.armed {
			// An armed timer runs before the bound of this call, and is
			// armed again then for the rest (see Flush): moving it for
			// every first call would cost a timer reset per finish, where
			// batches take nearly all of them.
			q.arm(q.cfg.Bound)
		}
	}
	return true
}

// arm makes the timer run Flush after d. Called with q.mu held.
func (q *Queue[C]) arm(d time.Duration) {
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.Flush)
	} else {
		q.timer.Reset(d)
	}
	q.armed = true
}

// detach makes the pending calls a flight that is sent and returns it, or
// nil when none is pending. Called with q.mu held.
func (q *Queue[C]) detach() *Flight[C] {
	if len(q.pending) == 0 {
		return nil
	}
	fl, _ := q.pool.Get().(*Flight[C])
	if fl == nil {
		fl = new(Flight[C])
	}
	// The flight's emptied buffer holds the next pending calls.
	fl.Calls, q.pending = q.pending, fl.Calls[:0]
	fl.nkeys = 0
	for _, c := range fl.Calls {
		fl.nkeys += len(c.Keys())
	}
	q.sent = append(q.sent, fl)
	return fl
}

// conflicts appends to wait the sent flights that carry a key of a call
// of batch that is no finish, and returns it. Called with q.mu held.
func (q *Queue[C]) conflicts(batch []C, wait []<-chan struct{}) []<-chan struct{} {
	for _, fl := range q.sent {
	calls:
		for _, c := range batch {
			if c.Finishing() {
				continue // finishes commute with finishes of other requests
			}
			for _, k := range c.Keys() {
				if fl.uses(k) {
					wait = append(wait, fl.wait())
					break calls
				}
			}
		}
	}
	return wait
}

// Touches reports whether a finish not yet answered uses a key of c: a
// cached denial of c could then miss what it frees. It is asked only
// before a cached denial, so the pending calls are scanned rather than
// indexed.
func (q *Queue[C]) Touches(c C) bool {
	if q.n.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, k := range c.Keys() {
		for _, fl := range q.sent {
			if fl.uses(k) {
				return true
			}
		}
		for _, p := range q.pending {
			if slices.Contains(p.Keys(), k) {
				return true
			}
		}
	}
	return false
}

// Collect returns the calls a batch's script call carries: the pending
// finishes first, then batch, in buf; and the flight of those finishes
// (nil for none), which the caller completes once the batch ran. Before it
// returns, the batch waits for the answers of the flights already sent
// that carry finishes of its keys: they may have been sent on another
// connection, which Redis may read later.
func (q *Queue[C]) Collect(batch, buf []C) ([]C, *Flight[C]) {
	var room [4]<-chan struct{}
	wait := room[:0]
	q.mu.Lock()
	if len(q.sent) > 0 {
		wait = q.conflicts(batch, wait)
	}
	fl := q.detach()
	q.mu.Unlock()
	for _, w := range wait {
		<-w
	}
	if fl == nil {
		return batch, nil
	}
	return append(append(buf[:0], fl.Calls...), batch...), fl
}

// Complete takes fl's finishes, whose outcome was read, out of the queue,
// wakes the batches that waited for them and hands each call to put.
func (q *Queue[C]) Complete(fl *Flight[C], put func(C)) {
	q.mu.Lock()
	for i, f := range q.sent {
		if f == fl {
			q.sent = slices.Delete(q.sent, i, i+1)
			break
		}
	}
	q.n.Add(-int32(len(fl.Calls)))
	done := fl.done
	q.mu.Unlock()
	if done != nil {
		close(done)
	}
	// Completed, fl is no one else's: batches that waited for it hold its
	// channel only.
	for _, c := range fl.Calls {
		put(c)
	}
	clear(fl.Calls)
	fl.Calls, fl.done = fl.Calls[:0], nil
	if fl.index {
		clear(fl.keys)
		fl.index = false
	}
	q.pool.Put(fl)
}

// Flush sends the pending finishes on their own: the timer's work, Bound
// after the first was queued, when no batch took them. The timer may run
// earlier, armed for calls that a batch took since: it is then armed
// again for the rest of the first pending call's bound.
func (q *Queue[C]) Flush() {
	full := q.cfg.Full()
	q.mu.Lock()
	q.armed = false
	if len(q.pending) == 0 || q.closed {
		q.mu.Unlock()
		return
	}
	if left := q.cfg.Bound - time.Duration(q.cfg.Elapsed()-q.since)*time.Microsecond; left > 0 {
		// Armed for calls a batch took since: the first pending one was
		// queued later.
		q.arm(left)
		q.mu.Unlock()
		return
	}
	if full {
		// Every batch slot is in flight: the batch led when one returns,
		// by a call queued or made meanwhile (under load, its callers'
		// next ones), takes the pending finishes without a script call of
		// their own. The timer runs again in case none comes.
		q.arm(q.cfg.Bound)
		q.mu.Unlock()
		return
	}
	fl := q.detach()
	q.mu.Unlock()
	q.cfg.Send(fl)
}

// Drain sends the pending finishes and waits until every finish sent was
// answered. With closing set, later Push calls are refused.
func (q *Queue[C]) Drain(closing bool) {
	q.mu.Lock()
	if closing {
		q.closed = true
		if q.timer != nil {
			q.timer.Stop()
			q.armed = false
		}
	}
	fl := q.detach()
	var sent []<-chan struct{}
	for _, f := range q.sent {
		if f != fl {
			sent = append(sent, f.wait())
		}
	}
	q.mu.Unlock()
	if fl != nil {
		q.cfg.Send(fl)
	}
	for _, w := range sent {
		<-w
	}
}

// State returns how many calls are pending and whether the timer is armed.
func (q *Queue[C]) State() (pending int, armed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending), q.armed
}

// SetSince sets when the first pending call was queued (µs of Elapsed).
func (q *Queue[C]) SetSince(since int64) {
	q.mu.Lock()
	q.since = since
	q.mu.Unlock()
}
