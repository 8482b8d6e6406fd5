package engine

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine/internal/codec"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestKnownBlockConcurrentAnswer checks that an admission's answer that
// arrives after a denial's that started a block, from a call sent before
// that answer came (so Redis may have decided it first), does not make the
// process forget the block: its fallback kept admitting the blocked
// subject (found by TestFaults, miniredis seed 2220674519971793730).
func TestKnownBlockConcurrentAnswer(t *testing.T) {
	t.Parallel()
	addr := redistest.RefusedAddr // nothing listens: every call goes to the fallback
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rc.Close() })
	clk := redistest.NewClock()
	e := newEngine(t, rc, WithClock(clk.Now))
	c0 := user("u", win(2, time.Second))
	c0.Block = 20 * time.Second
	r := req(c0)
	now := clk.Now().UnixMicro()
	answer := func(allowed bool, sent, recv int64) {
		c := getCall()
		defer putCall(c)
		if err := buildPlan(&c.plan, e.keyer, &r); err != nil {
			t.Fatal(err)
		}
		c.prepare()
		c.mode = opAllow
		if allowed {
			// The 2nd of 2: 1 used before it.
			c.status, c.res = codec.StatusAdmitted, []int64{1, 1_000_000, 0}
		} else {
			// Full: the denial started a block of 20 s.
			c.status, c.res = codec.StatusDenied, []int64{2, 1_000_000, 20_000_000}
			c.bleft[0] = 20_000_000
		}
		storeKnown(e.known, c, sent, recv, now)
	}
	answer(false, now-10, now-5) // the denial, received first
	answer(true, now-8, now-2)   // sent before it was received
	clk.Set(1500 * ms)           // the window has room again; the block runs
	d, _ := e.Allow(context.Background(), r)
	if d.Allowed || d.Source != "local" {
		t.Fatalf("allowed %v source %v during the block, want denied by local", d.Allowed, d.Source)
	}
}
