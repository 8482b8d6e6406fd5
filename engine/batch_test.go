package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
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
	waitExpired(t, ctx)
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

// TestBatchCtxLazyTimer checks the timer a call leaves armed: a later call
// with an earlier deadline still ends at its own, and one with a later
// deadline is not ended when the timer fires for the earlier call's.
func TestBatchCtxLazyTimer(t *testing.T) {
	var c batchCtx
	c.start(time.Hour)
	c.stop()
	ctx := c.start(20 * ms)
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("an armed timer of a later deadline kept the call from ending")
	}
	c.stop()

	c.start(10 * ms)
	c.stop()
	ctx = c.start(300 * ms) // the timer armed for 10 ms fires during this call
	time.Sleep(50 * ms)
	if ctx.Err() != nil {
		t.Fatal("ended at the previous call's deadline")
	}
	waitExpired(t, ctx)
	c.stop()
}

// waitExpired fails t unless ctx is done, with DeadlineExceeded, within
// two seconds.
func waitExpired(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("not done after the deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", ctx.Err())
	}
}

// TestSharingScanMatchesMap checks that the pairwise comparison of a small
// batch's keys marks the same calls as the map a large batch uses, on
// random batches with finishes, keys repeated within a call and none
// shared.
func TestSharingScanMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(52, 8))
	names := []string{"a", "b", "c", "d", "e", "f"}
	var some, none int
	for it := range 2000 {
		batch := make([]*call, 1+rng.IntN(8))
		for i := range batch {
			c := &call{mode: opAllow}
			switch rng.IntN(5) {
			case 0:
				c.mode = opFinish
			case 1:
				c.mode = opPeek
			}
			for range 1 + rng.IntN(3) {
				c.plan.Keys = append(c.plan.Keys, names[rng.IntN(len(names))])
			}
			batch[i] = c
		}
		var scan, byMap call
		got, want := scan.sharing(batch), []bool(nil)
		if got != nil {
			byMap.shared = make([]bool, len(batch))
			byMap.sharingMap(batch)
			want = byMap.shared
		}
		if !slices.Equal(got, want) {
			t.Fatalf("batch %d: pairwise %v, map %v", it, got, want)
		}
		if slices.Contains(got, true) {
			some++
		} else if got != nil {
			none++
		}
	}
	if some == 0 || none == 0 {
		t.Fatalf("batches with a shared key: %d, without: %d", some, none)
	}
}
