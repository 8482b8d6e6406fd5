package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/engine/internal/plan"
	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/internal/ruletime"
)

// finishUndos returns the finish ops that Finish(d, o) sends, claiming
// them in d as Finish does: what a retry of that Finish sends again.
func finishUndos(t *testing.T, d Decision, o Outcome) []codec.Undo {
	t.Helper()
	c := getCall()
	defer putCall(c)
	deltas, err := c.deltas(d.admitted, o.Actual)
	if err != nil {
		t.Fatal(err)
	}
	c.finishing(d.admitted, &o, deltas, false)
	return slices.Clone(c.fin)
}

// removeOK runs us as finish ops, as the retry of a queued finish does.
func removeOK(t *testing.T, e *Engine, us []codec.Undo) {
	t.Helper()
	if failed, err := e.remove(context.Background(), us); len(failed) > 0 {
		t.Fatalf("remove: %v failed: %v", failed, err)
	}
}

// calUsed returns what the first calendar window of r holds, by a Peek.
func calUsed(t *testing.T, e *Engine, r Request) int64 {
	t.Helper()
	d, err := e.peek(context.Background(), r)
	if err != nil || d.Source != "redis" {
		t.Fatalf("Peek: %v (source %v)", err, d.Source)
	}
	return calState(t, d).Used
}

// TestCalendarFinishTwice checks, on real Redis and miniredis, that a
// calendar key's finish op run twice changes the counter once: the retry
// of a give-back or settlement whose answer was lost (a client-side
// timeout) though Redis ran it. A counter keeps no member to remove, so
// without a record of the op a retry frees a place never taken.
func TestCalendarFinishTwice(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	_, mc := redistest.Mini(t)
	for _, b := range []struct {
		name string
		c    *redis.Client
	}{{"redis", rc}, {"miniredis", mc}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			clk := redistest.NewClock()
			e := newEngine(t, b.c, WithKeyPrefix(prefix), WithClock(clk.Now))
			ctx := context.Background()

			// A give-back applied twice: 3 admitted, one given back.
			r := req(user("u", win(100, time.Minute), calWin(10, ruletime.Day)))
			d := mustAllow(t, e, r, true)
			mustAllow(t, e, r, true)
			mustAllow(t, e, r, true)
			us := finishUndos(t, d, Outcome{GiveBack: true})
			removeOK(t, e, us)
			removeOK(t, e, us)
			if u := calUsed(t, e, r); u != 2 {
				t.Fatalf("after a give-back run twice: calendar day used %d, want 2", u)
			}

			// A settlement applied twice: 5 and 5 charged, the first
			// settled to 2.
			rb := req(bytesOf("b", 5, calWin(100, ruletime.Day)))
			db := mustAllow(t, e, rb, true)
			mustAllow(t, e, rb, true)
			us = finishUndos(t, db, Outcome{Actual: []int64{2}})
			removeOK(t, e, us)
			removeOK(t, e, us)
			if u := calUsed(t, e, rb); u != 7 {
				t.Fatalf("after a settlement run twice: calendar day used %d, want 7", u)
			}

			// The record outlives the counter falling to 0 and the
			// admission that raises it again (the period's first again).
			rz := req(user("z", calWin(10, ruletime.Day)))
			dz := mustAllow(t, e, rz, true)
			us = finishUndos(t, dz, Outcome{GiveBack: true})
			removeOK(t, e, us)
			mustAllow(t, e, rz, true)
			removeOK(t, e, us)
			if u := calUsed(t, e, rz); u != 1 {
				t.Fatalf("a give-back run again after the counter fell to 0 and rose: used %d, want 1", u)
			}

			// The next period's first admission drops the records of the
			// periods before: the key holds its count alone.
			cal := prefix + "{s|user|z}" + plan.CalSuffix + string(ruletime.Day)
			if v, err := b.c.HGetAll(ctx, cal).Result(); err != nil || len(v) < 2 {
				t.Fatalf("calendar key %q after a give-back: %v, %v; want its record too", cal, v, err)
			}
			clk.Set(36 * time.Hour)
			mustAllow(t, e, rz, true)
			if v, err := b.c.HGetAll(ctx, cal).Result(); err != nil || len(v) != 1 {
				t.Fatalf("calendar key %q on the next day: %v, %v; want its count alone", cal, v, err)
			}
		})
	}
}

// TestCalendarGiveBackRetried: a give-back of a calendar window sent
// while Redis sleeps (DEBUG SLEEP) times out and is queued, though Redis
// runs it when it wakes; the queue's retry must not lower the counter
// again (the hole the fault harness found, plan
// testdata/faults/redis-3859122395231807178.json).
func TestCalendarGiveBackRetried(t *testing.T) {
	t.Parallel()
	s := redistest.StartWith(t, "--enable-debug-command", "local")
	// A client that keeps WithTimeout, as docs/engine.md asks.
	rc := redisClient(s.Addr)
	t.Cleanup(func() { rc.Close() })
	e := newEngine(t, rc, WithKeyPrefix(redistest.Prefix(t)), WithTimeout(100*ms), WithLogger(discardLog))
	ctx := context.Background()
	r := req(user("u", calWin(10, ruletime.Day)))
	mustAllow(t, e, r, true)
	mustAllow(t, e, r, true)
	admitted := 2
	admin := s.Client()
	probe := redisClient(s.Addr)
	defer probe.Close()
	// On a loaded machine a ping may time out before the server sleeps,
	// and the give-back then be answered: that try is counted, and
	// another is made.
	for try := 0; ; try++ {
		d := mustAllow(t, e, r, true)
		admitted++
		slept := make(chan error, 1)
		go func() { slept <- admin.Do(context.Background(), "debug", "sleep", "1").Err() }()
		// Wait until the server sleeps: a ping gets no answer.
		for deadline := time.Now().Add(5 * time.Second); ; {
			pctx, cancel := context.WithTimeout(ctx, 50*ms)
			err := probe.Ping(pctx).Err()
			cancel()
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("DEBUG SLEEP never took the server")
			}
			time.Sleep(ms)
		}
		err := e.Finish(ctx, d, Outcome{GiveBack: true})
		admitted--
		if serr := <-slept; serr != nil {
			t.Fatalf("DEBUG SLEEP: %v", serr)
		}
		if errors.Is(err, ErrBackend) {
			break // timed out and queued
		}
		if err != nil || try == 4 {
			t.Fatalf("Finish while Redis sleeps: %v, want ErrBackend (timed out, queued)", err)
		}
	}
	// Redis ran the give-back when it woke. The batches that find it back
	// run the queued retry; then the counter must hold the others.
	var used int64
	for try := 0; ; try++ {
		dp, err := e.peek(ctx, r)
		if err == nil && dp.Source == "redis" && e.undos.Len() == 0 {
			used = calUsed(t, e, r)
			break
		}
		if try == 100 {
			t.Fatalf("Redis never answered again: %v (source %v, %d undos queued)", err, dp.Source, e.undos.Len())
		}
		time.Sleep(50 * ms)
	}
	if used != int64(admitted) {
		t.Fatalf("calendar day used %d after a give-back retried, want %d", used, admitted)
	}
}
