package throttle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestFlowStateEnds: a waiter with a tenant whose context ends leaves its
// flow's finish tag in the lane's flows hash only until the hash expires,
// within a few leases; calls without a tenant in a throttle without
// shares make no flow state at all.
func TestFlowStateEnds(t *testing.T) {
	mr := miniredis.RunT(t)
	srv := redistest.Start(t)
	for _, b := range []struct {
		name string
		addr string
		ff   func(time.Duration)
	}{{"miniredis", mr.Addr(), mr.FastForward}, {"redis", srv.Addr, nil}} {
		t.Run(b.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: b.addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			lim, err := newLimiter(c, WithEngineOptions(engine.WithKeyPrefix(redistest.Prefix(t))))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lim.Close() })
			th, err := lim.Throttle("api", "global:1/min")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			p, err := th.Wait(ctx, Call{}) // fills the window
			if err != nil {
				t.Fatal(err)
			}
			p.Finish(nil)
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := th.Wait(short, Call{}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait = %v, want the context's deadline", err)
			}
			flows := th.fleet.keys(th.onlyLane())[5]
			if n := c.Exists(ctx, flows).Val(); n != 0 {
				t.Fatalf("a call without a tenant made flow state %s", flows)
			}
			short, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			if _, err := th.Wait(short, Call{Tenant: "gone"}); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait = %v, want the context's deadline", err)
			}
			if c.HExists(ctx, flows, "\ngone").Val() != true {
				t.Fatalf("no finish tag of the tenant in %s", flows)
			}
			ttl := c.PTTL(ctx, flows).Val()
			if ttl <= 0 || ttl > 4*fleetLease {
				t.Fatalf("the flows hash expires in %v, want within %v", ttl, 4*fleetLease)
			}
			if b.ff != nil {
				b.ff(4*fleetLease + time.Millisecond)
				if n := c.Exists(ctx, flows).Val(); n != 0 {
					t.Errorf("the flows hash outlived its expiry")
				}
			}
		})
	}
}
