package engine

import (
	"errors"
	"sync"
)

// Wake-up messages of a queued call.
const (
	wakeDone uint8 = iota + 1 // the call's outcome is ready
	wakeLead                  // the call must run the batch in its lead
)

// batcher groups concurrent calls into batches, each one Redis round trip.
// A caller that finds fewer than maxInflight batches in flight runs its own
// call at once, in its own goroutine: a lone caller pays no extra latency
// and no goroutine hand-off. Otherwise it queues; when a batch completes,
// the first queued caller leads the next batch of up to maxBatch queued
// calls. Under load the queue fills while batches are in flight, so each
// round trip (and each script call's fixed cost in Redis) serves many
// decisions. The batcher starts no goroutine.
type batcher struct {
	run         func(batch []*call)
	maxInflight int
	maxBatch    int

	mu       sync.Mutex
	queue    []*call
	inflight int
}

func (b *batcher) do(c *call) {
	b.mu.Lock()
	if b.inflight < b.maxInflight {
		b.inflight++
		b.mu.Unlock()
		c.lead = append(c.lead[:0], c)
		b.lead(c)
		return
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()
	if <-c.wake == wakeLead {
		b.lead(c)
	}
}

// errPanicked is the outcome of the calls of a batch whose run panicked.
var errPanicked = errors.New("engine: batch panicked")

// lead runs c.lead, hands the queue to the next leader and wakes the
// batch's other calls. If run panics, the batch's calls fail with
// errPanicked, the queue is still handed on and the panic goes on in c's
// goroutine: no caller waits forever and no in-flight slot is lost.
func (b *batcher) lead(c *call) {
	batch := c.lead
	done := false
	defer func() {
		if !done {
			for _, o := range batch {
				o.err = errPanicked
			}
		}
		b.next(c, batch)
	}()
	b.run(batch)
	done = true
}

// next hands the queue to the next leader and wakes the other calls of
// c's batch.
func (b *batcher) next(c *call, batch []*call) {
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
