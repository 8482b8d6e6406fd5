package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/admission"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestFinishAsyncSteps runs finishSteps with FinishAsync on every backend:
// the Peek and Allows that follow each FinishAsync, by the same engine,
// must see its work done, with no wait. The timer is lengthened, so only
// the order of script calls can make them see it.
func TestFinishAsyncSteps(t *testing.T) {
	t.Parallel()
	onEveryBackend(t, func(t *testing.T, e *Engine, clk *redistest.Clock) {
		e.async.SetBound(time.Hour)
		finishStepsBy(t, e, clk, e.FinishAsync)
		if n := e.finishAsyncFailures(); n != 0 {
			t.Errorf("FinishAsyncFailures %d, want 0", n)
		}
	})
}

// asyncClients returns a real Redis and a miniredis client.
func asyncClients(t *testing.T) map[string]*redis.Client {
	_, rc := redistest.StartClient(t)
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { mc.Close() })
	return map[string]*redis.Client{"redis": rc, "miniredis": mc}
}

// TestFinishAsyncOrder: goroutines, each on its own subject of 1
// concurrent, admit, finish with FinishAsync and admit again at once, many
// times: the next admission is never denied, also while the batches of the
// others carry queued finishes to Redis (a batch then waits for those of
// its keys still in the air, which another connection carries).
func TestFinishAsyncOrder(t *testing.T) {
	t.Parallel()
	for name, c := range asyncClients(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)))
			e.async.SetBound(time.Hour) // only riding script calls carry them
			ctx := context.Background()
			const workers, rounds = 8, 100
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					r := req(user(fmt.Sprint("w", w), conc(1)), bytesOf(fmt.Sprint("w", w), 10, win(1<<40, time.Hour)))
					for i := range rounds {
						d, err := e.Allow(ctx, r)
						if err != nil || !d.Allowed {
							errs <- fmt.Errorf("worker %d, round %d: admission after FinishAsync: allowed %v, %v", w, i, d.Allowed, err)
							return
						}
						e.FinishAsync(d, Outcome{Actual: []int64{-1, 5}})
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			// Every request was settled to 5 bytes before the next one.
			for w := range workers {
				p, err := e.peek(ctx, req(user(fmt.Sprint("w", w), conc(1)), bytesOf(fmt.Sprint("w", w), 10, win(1<<40, time.Hour))))
				if err != nil || slotState(t, p).Used != 0 || p.Windows[1].Used != 5*rounds {
					t.Errorf("worker %d afterwards: %+v, %v; want no slot and %d bytes", w, p.Windows, err, 5*rounds)
				}
			}
			if n := e.finishAsyncFailures(); n != 0 {
				t.Errorf("FinishAsyncFailures %d, want 0", n)
			}
		})
	}
}

// TestFinishAsyncOtherEngine: a slot released by FinishAsync, with no
// other traffic in its engine, is usable by another engine on the same
// Redis within asyncBound and a round trip, long before its lease (30 s)
// would free it. The measured time is logged; the test allows a second,
// for a loaded machine.
func TestFinishAsyncOtherEngine(t *testing.T) {
	t.Parallel()
	for name, c := range asyncClients(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			a := newEngine(t, c, WithKeyPrefix(prefix))
			b := newEngine(t, c, WithKeyPrefix(prefix), WithCachedDenials(false))
			ctx := context.Background()
			r := req(user("u", conc(1)))
			var worst time.Duration
			for i := range 5 {
				d, err := a.Allow(ctx, r)
				if err != nil || !d.Allowed {
					t.Fatalf("round %d: first admission %+v, %v", i, d, err)
				}
				if d, _ := b.Allow(ctx, r); d.Allowed {
					t.Fatalf("round %d: the other engine got a second slot of 1", i)
				}
				start := time.Now()
				a.FinishAsync(d, Outcome{})
				for {
					d, err := b.Allow(ctx, r)
					if err != nil {
						t.Fatal(err)
					}
					if d.Allowed {
						worst = max(worst, time.Since(start))
						b.FinishAsync(d, Outcome{})
						b.async.Drain(false)
						break
					}
					if time.Since(start) > time.Second {
						t.Fatalf("round %d: the slot released by FinishAsync is still held after %v", i, time.Since(start))
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			t.Logf("slot usable by another engine at most %v after FinishAsync (bound %v + a round trip)", worst, asyncBound)
		})
	}
}

// TestFinishAsyncClose: Close sends what FinishAsync queued and returns
// once it is applied. The timer is lengthened so that only Close sends.
func TestFinishAsyncClose(t *testing.T) {
	t.Parallel()
	for name, c := range asyncClients(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			a, err := New(c, WithKeyPrefix(prefix), WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			a.async.SetBound(time.Hour)
			check := newEngine(t, c, WithKeyPrefix(prefix), WithCachedDenials(false))
			ctx := context.Background()
			const n = 20
			r := func(i int) Request {
				s := fmt.Sprint("u", i)
				return req(user(s, conc(1)), bytesOf(s, 10, win(100, time.Hour)))
			}
			for i := range n {
				d, err := a.Allow(ctx, r(i))
				if err != nil || !d.Allowed {
					t.Fatalf("admission %d: %+v, %v", i, d, err)
				}
				a.FinishAsync(d, Outcome{Actual: []int64{-1, 3}})
			}
			// Each admission carried the finish queued before it: the
			// last finish alone waits.
			p, err := check.peek(ctx, r(n-1))
			if err != nil || slotState(t, p).Used != 1 {
				t.Fatalf("before Close: %+v, %v; want the last slot still held (queued)", p.Windows, err)
			}
			a.Close()
			for i := range n {
				p, err := check.peek(ctx, r(i))
				if err != nil || slotState(t, p).Used != 0 || p.Windows[1].Used != 3 {
					t.Fatalf("subject %d after Close: %+v, %v; want the slot free and 3 bytes", i, p.Windows, err)
				}
			}
			// After Close a FinishAsync is refused and counted.
			a.FinishAsync(Decision{Allowed: true, admitted: &admission.Record{}}, Outcome{})
			if got := a.finishAsyncFailures(); got != 1 {
				t.Errorf("FinishAsyncFailures after Close %d, want 1", got)
			}
		})
	}
}

// TestFinishAsyncErrors: errors are counted, never returned nor panicking:
// an Outcome Finish refuses, and Redis that stopped answering (queued like
// an undo, which the next batch to reach Redis runs).
func TestFinishAsyncErrors(t *testing.T) {
	t.Parallel()
	s, c := redistest.StartClient(t)
	e := newEngine(t, c, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(time.Second))
	ctx := context.Background()
	r := req(user("u", conc(1)), bytesOf("u", 10, win(100, time.Hour)))
	d, err := e.Allow(ctx, r)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	e.FinishAsync(d, Outcome{Actual: []int64{1}}) // one cost for two checks
	if got := e.finishAsyncFailures(); got != 1 {
		t.Fatalf("after a refused Outcome: FinishAsyncFailures %d, want 1", got)
	}
	e.async.Drain(false)
	if p, err := e.peek(ctx, r); err != nil || slotState(t, p).Used != 1 {
		t.Fatalf("a refused Outcome changed something: %+v, %v", p.Windows, err)
	}
	s.Stop()
	e.FinishAsync(d, Outcome{})
	e.async.Drain(false) // the timer's work, now
	if got := e.finishAsyncFailures(); got != 2 {
		t.Fatalf("after Redis stopped: FinishAsyncFailures %d, want 2", got)
	}
	if e.undos.Len() == 0 {
		t.Fatal("the failed release was not queued for retry")
	}
}

// TestFinishAsyncTimerRearms: the timer, armed for a finish a batch took
// since, does not send a later finish before that one's bound, and
// sends it once its bound ran out. The bound is an hour, and the timer's
// runs are made by hand: nothing depends on the machine's speed.
func TestFinishAsyncTimerRearms(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { mc.Close() })
	e := newEngine(t, mc, WithKeyPrefix(redistest.Prefix(t)), WithCachedDenials(false))
	e.async.SetBound(time.Hour)
	ctx := context.Background()
	r := req(user("u", conc(1)))
	state := e.async.State
	d, err := e.Allow(ctx, r)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	e.FinishAsync(d, Outcome{}) // arms the timer
	if d, err := e.Allow(ctx, r); err != nil || !d.Allowed {
		// This batch took the finish: the slot is free.
		t.Fatalf("admission after FinishAsync: %+v, %v", d, err)
	} else {
		e.FinishAsync(d, Outcome{}) // the timer stays armed for the first
	}
	if n, armed := state(); n != 1 || !armed {
		t.Fatalf("pending %d, armed %v; want 1 and the timer armed", n, armed)
	}
	e.async.Flush() // the run armed for the first finish
	if n, armed := state(); n != 1 || !armed {
		t.Fatalf("after a run before its bound: pending %d, armed %v; want the finish kept and the timer armed again", n, armed)
	}
	e.async.SetSince(e.elapsed() - (2 * time.Hour).Microseconds())
	e.async.Flush() // the run at its bound
	if n, armed := state(); n != 0 || armed {
		t.Fatalf("after a run at its bound: pending %d, armed %v; want it sent and the timer idle", n, armed)
	}
	if p, err := e.peek(ctx, r); err != nil || slotState(t, p).Used != 0 {
		t.Fatalf("after the timer's run: %+v, %v; want the slot released", p.Windows, err)
	}
	if n := e.finishAsyncFailures(); n != 0 {
		t.Errorf("FinishAsyncFailures %d, want 0", n)
	}
}
