package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
)

// Wake-up messages of a queued call.
const (
	wakeDone uint8 = iota + 1 // the call's outcome is ready
	wakeLead                  // the call must run the batch in its lead
)

// batcher is the state of the engine's batching: concurrent calls are
// grouped into batches, each one Redis round trip. A caller that finds
// fewer than maxInflight batches in flight runs its own call at once, in
// its own goroutine: a lone caller pays no extra latency and no goroutine
// hand-off. Otherwise it queues; when a batch completes, the first queued
// caller leads the next batch of up to maxBatch queued calls. Under load
// the queue fills while batches are in flight, so each round trip (and
// each script call's fixed cost in Redis) serves many decisions. Batching
// starts no goroutine.
type batcher struct {
	maxInflight int
	maxBatch    int

	mu       sync.Mutex
	queue    []*call
	inflight int
}

// join decides c in a batch: at once when fewer than maxInflight batches
// are in flight, else in the next batch after the queue's earlier calls.
func (e *Engine) join(c *call) {
	b := &e.batch
	b.mu.Lock()
	if b.inflight < b.maxInflight {
		b.inflight++
		b.mu.Unlock()
		c.lead = append(c.lead[:0], c)
		e.lead(c)
		return
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	if <-c.wake == wakeLead {
		e.lead(c)
	}
}

// full reports whether every batch slot is in flight: a batch is then
// led as soon as one returns, by a call queued or made meanwhile.
func (b *batcher) full() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight >= b.maxInflight
}

// errPanicked is the outcome of the calls of a batch whose run panicked.
var errPanicked = errors.New("engine: batch panicked")

// lead decides the batch c.lead, hands the queue to the next leader and
// wakes the batch's other calls. If deciding panics (a panicking client,
// hook or wrapper), the batch's calls fail with errPanicked, the queue is
// still handed on and the panic goes on in c's goroutine: no caller waits
// forever and no in-flight slot is lost.
func (e *Engine) lead(c *call) {
	batch := c.lead
	run := batch
	var fl *flight
	done := false
	defer func() {
		if !done {
			for _, o := range run {
				o.err = errPanicked
			}
		}
		if fl != nil {
			clear(run) // c.ride: drop the pointers to other calls
			e.complete(fl)
		}
		e.batch.handOn(c, batch)
	}()
	if e.async.Len() > 0 {
		// Queued finishes (FinishAsync) ride this batch, ahead of its
		// admissions.
		run, fl = e.async.Collect(batch, c.ride)
		if fl != nil {
			c.ride = run[:0]
		}
	}
	e.run(c, run)
	done = true
}

// handOn hands the queue to the next leader and wakes the other calls of
// c's batch.
func (b *batcher) handOn(c *call, batch []*call) {
	var next *call
	b.mu.Lock()
	if n := len(b.queue); n > 0 {
		k := min(n, b.maxBatch)
		next = b.queue[0]
		next.lead = append(next.lead[:0], b.queue[:k]...)
		m := copy(b.queue, b.queue[k:])
		clear(b.queue[m:])
		b.queue = b.queue[:m]
	} else {
		b.inflight--
	}
	b.mu.Unlock()
	if next != nil {
		next.wake <- wakeLead
	}
	for _, o := range batch {
		if o != c {
			o.wake <- wakeDone
		}
	}
	clear(batch)
	c.lead = batch[:0]
}

// call is one Allow or Peek on its way through a batch. Calls are pooled:
// they carry the buffers a request needs, so the steady state allocates
// little beyond the Decision.
type call struct {
	mode   uint8 // opAllow or opPeek
	plan   plan.Plan
	id     int64  // snowflake id of an allow; 0 for peek
	member []byte // id in decimal; empty for peek
	all    []int32

	// Outcome, written by the batch leader before it wakes the call.
	sent, recv int64 // e.mono when the batch was sent and answered
	wall       int64 // local wall clock (µs) when it was answered
	sec, usec  int64
	status     int64
	suffix     int64
	res        []int64 // per merged window: used, reset, wait
	bleft      []int64 // per key when the plan has blocks: µs until its block ends, 0 when none
	err        error   // Redis did not decide: the fail mode must
	warn       error   // Redis decided, but something went wrong after (a rollback)

	// Batching.
	wake   chan uint8
	lead   []*call          // the batch this call leads
	seen   map[string]int32 // sharing's scratch: key -> last call in the batch
	shared []bool           // sharing's result, per call of the batch
	args   []any            // command arguments built by a leader
	ctx    batchCtx         // the context of the script calls it leads (single server)
	flat   codec.Args

	// Failure domains: the servers the call needs.
	doms []*domain

	// Finish (opFinish): the work per key, the invalidation channel, and
	// for FinishAsync the op's name in logs.
	fin []codec.Undo
	pub string
	op  string

	// ride holds a batch's calls after the queued finishes it carries
	// (see async.Queue.Collect).
	ride []*call

	// Slot mode: the call's keys grouped by script call.
	pkeys []int32 // key indices, part by part
	parts []part
}

// part is one script call of a call in slot mode: its keys, the server
// that runs it, and its outcome.
type part struct {
	start, end int32 // its key indices: call.pkeys[start:end]
	dom        *domain
	stat       int64 // status, or -1 when the part failed
	suf        int64 // suffix
}

var callPool = sync.Pool{New: func() any { return &call{wake: make(chan uint8, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

func putCall(c *call) {
	c.err, c.warn = nil, nil
	clear(c.fin)
	c.fin = c.fin[:0]
	clear(c.plan.Keys) // drop the key string
	c.plan.Keys = c.plan.Keys[:0]
	callPool.Put(c)
}

// sharing reports, per call of batch, whether it shares a key with
// another call of the batch, or nil for a batch of one admission or peek.
// Many calls on one key (a hot key under load) are then decided with one
// read of it.
func (c *call) sharing(batch []*call) []bool {
	if len(batch) < 2 {
		return nil
	}
	ops, nkeys := 0, 0 // admissions and peeks: a finish reads no window
	for _, o := range batch {
		if o.mode != opFinish {
			ops++
			nkeys += len(o.plan.Keys)
		}
	}
	if ops < 2 {
		return nil // a lone admission with the finishes riding with it
	}
	c.shared = append(c.shared[:0], make([]bool, len(batch))...)
	if nkeys <= maxScanKeys {
		c.sharingScan(batch)
	} else {
		c.sharingMap(batch)
	}
	return c.shared
}

// maxScanKeys is the number of keys in a batch up to which sharing
// compares them pair by pair: a few comparisons cost less than hashing
// each key into a map and clearing it.
const maxScanKeys = 16

// sharingScan marks in c.shared the calls of batch that share a key, by
// comparing each key with the keys before it.
func (c *call) sharingScan(batch []*call) {
	for i, o := range batch {
		if o.mode == opFinish {
			continue // its op reads no window (see Finish)
		}
		for ki, k := range o.plan.Keys {
			for j, p := range batch[:i+1] {
				before := p.plan.Keys
				if j == i {
					before = before[:ki]
				}
				if p.mode != opFinish && slices.Contains(before, k) {
					c.shared[j], c.shared[i] = true, true
				}
			}
		}
	}
}

// sharingMap is sharingScan for a large batch, with a map of the keys
// seen.
func (c *call) sharingMap(batch []*call) {
	if c.seen == nil {
		c.seen = make(map[string]int32)
	}
	for i, o := range batch {
		if o.mode == opFinish {
			continue // its op reads no window (see Finish)
		}
		for _, k := range o.plan.Keys {
			if j, ok := c.seen[k]; ok {
				c.shared[j], c.shared[i] = true, true
			}
			c.seen[k] = int32(i)
		}
	}
	clear(c.seen) // its keys are views of the calls' buffers
}

// prepare sizes the outcome fields for c.plan.
func (c *call) prepare() {
	n := 3 * len(c.plan.Wins)
	if cap(c.res) < n {
		c.res = make([]int64, n)
	}
	c.res = c.res[:n]
	c.bleft = c.bleft[:0]
	if c.plan.Blocked > 0 {
		c.bleft = slices.Grow(c.bleft, len(c.plan.Keys))[:len(c.plan.Keys)]
		clear(c.bleft)
	}
	c.all = c.all[:0]
	for i := range c.plan.Keys {
		c.all = append(c.all, int32(i))
	}
	c.status, c.suffix, c.err, c.warn = 0, 0, nil, nil
}

// batchCtx is a reusable context with a deadline, for the script calls of
// the batches one call leads. context.WithTimeout allocates a context, a
// timer and a channel for every batch; a batchCtx allocates its timer
// once, and a new channel only after a deadline expired. Like the context
// of WithTimeout it is done at its deadline, so that the client's waits
// (for a pooled connection, between dial retries) end then too.
//
// Its timer is armed lazily: a call that ends leaves it running, and the
// next call, whose deadline is later, reuses it; when it fires before the
// running call's deadline it is armed again for the rest: one timer run
// per timeout instead of a reset and a stop per batch (see
// docs/performance.md, The client's work per admission).
type batchCtx struct {
	mu       sync.Mutex
	deadline time.Time
	done     chan struct{}
	err      error
	timer    *time.Timer
	active   bool      // a call runs under c (between start and stop)
	fires    time.Time // when the armed timer runs expire; zero when not armed
}

// start arms c for a call of at most d and returns it.
func (c *batchCtx) start(d time.Duration) context.Context {
	deadline := time.Now().Add(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil || c.err != nil {
		c.done, c.err = make(chan struct{}), nil
	}
	c.deadline, c.active = deadline, true
	switch {
	case c.timer == nil:
		c.timer = time.AfterFunc(d, c.expire)
	case c.fires.IsZero() || deadline.Before(c.fires):
		c.timer.Reset(d)
	default:
		return c // armed to fire before this deadline: it re-arms then
	}
	c.fires = deadline
	return c
}

// stop ends c's current call; its timer stays armed (see batchCtx).
func (c *batchCtx) stop() {
	c.mu.Lock()
	c.active = false
	c.mu.Unlock()
}

// expire ends c's running call at its deadline. A run that comes before
// the deadline (armed for an earlier call) arms the timer again for the
// rest; one that comes between calls leaves it unarmed.
func (c *batchCtx) expire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fires = time.Time{}
	if !c.active || c.err != nil {
		return
	}
	if left := time.Until(c.deadline); left > 0 {
		c.timer.Reset(left)
		c.fires = c.deadline
		return
	}
	c.err = context.DeadlineExceeded
	close(c.done)
}

// Deadline returns the deadline of the current call.
func (c *batchCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

// Done returns a channel closed at the deadline of the current call.
func (c *batchCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Err returns context.DeadlineExceeded once the deadline has passed, nil
// before.
func (c *batchCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Value returns nil: a batch carries no values.
func (c *batchCtx) Value(any) any { return nil }
