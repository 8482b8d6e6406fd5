package engine

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBatchCtx checks that a reused batch context is done at each call's
// deadline and only then, like context.WithTimeout's.
func TestBatchCtx(t *testing.T) {
	var c batchCtx
	ctx := c.start(20 * ms)
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > 20*ms || time.Until(d) < 10*ms {
		t.Fatalf("deadline %v %v", d, ok)
	}
	select {
	case <-ctx.Done():
		t.Fatal("done before the deadline")
	default:
	}
	if ctx.Err() != nil {
		t.Fatalf("err %v before the deadline", ctx.Err())
	}
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("not done after the deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", ctx.Err())
	}
	c.stop()

	// The next call gets a fresh channel and a new deadline.
	ctx = c.start(time.Hour)
	if ctx.Err() != nil {
		t.Fatalf("err %v at a new call", ctx.Err())
	}
	// A run of the timer that came too late for the previous call's stop
	// leaves this call alone.
	c.expire()
	select {
	case <-ctx.Done():
		t.Fatal("a stale expiry ended the call")
	default:
	}
	c.stop()
	// Calls that end in time reuse the channel.
	done := ctx.Done()
	ctx = c.start(time.Hour)
	if ctx.Done() != done {
		t.Fatal("a new channel without an expiry")
	}
	c.stop()
}
