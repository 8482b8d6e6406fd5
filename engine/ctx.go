package engine

import (
	"context"
	"sync"
	"time"
)

// batchCtx is a reusable context with a deadline, for the script calls of
// the batches one call leads. context.WithTimeout allocates a context, a
// timer and a channel for every batch; a batchCtx allocates its timer
// once, and a new channel only after a deadline expired. Like the context
// of WithTimeout it is done at its deadline, so that the client's waits
// (for a pooled connection, between dial retries) end then too.
type batchCtx struct {
	mu       sync.Mutex
	deadline time.Time
	done     chan struct{}
	err      error
	timer    *time.Timer
}

// start arms c for a call of at most d and returns it.
func (c *batchCtx) start(d time.Duration) context.Context {
	deadline := time.Now().Add(d)
	c.mu.Lock()
	if c.done == nil || c.err != nil {
		c.done, c.err = make(chan struct{}), nil
	}
	c.deadline = deadline
	c.mu.Unlock()
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.expire)
	} else {
		c.timer.Reset(d)
	}
	return c
}

// stop disarms c once its call is over.
func (c *batchCtx) stop() { c.timer.Stop() }

// expire ends c at its deadline. A run of the timer that Stop came too
// late for may happen during a later call: that call's deadline is still
// ahead, so it is left alone.
func (c *batchCtx) expire() {
	c.mu.Lock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.err = context.DeadlineExceeded
		close(c.done)
	}
	c.mu.Unlock()
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
