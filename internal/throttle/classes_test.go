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

// TestTurnTags: the turn script's tags are start-time fair queuing: a
// flow's tags grow by its increment, a new flow starts at virtual time,
// a class's increment is its fair interval over its share split between
// its tenants, and a flow whose finish tag virtual time passed is
// forgotten.
func TestTurnTags(t *testing.T) {
	srv := redistest.Start(t)
	for _, b := range []struct {
		name   string
		client func() engine.Client
	}{
		{"miniredis", func() engine.Client { _, c := redistest.Mini(t); return c }},
		{"redis", func() engine.Client { return srv.Client() }},
		{"cluster", func() engine.Client { return redistest.StartCluster(t).Client(t) }},
	} {
		t.Run(b.name, func(t *testing.T) { turnTags(t, b.client()) })
	}
}

// turnTags is TestTurnTags on client.
func turnTags(t *testing.T, client engine.Client) {
	lim, err := newLimiter(client, WithEngineOptions(engine.WithKeyPrefix(redistest.Prefix(t))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	th, err := lim.Throttle("api", "global:10/s; share(critical):25%")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ln, err := th.lane(ctx, laneKeyOf(t, th, Call{}))
	if err != nil {
		t.Fatal(err)
	}
	defer th.release(ln)
	const step = 1000 // µs
	batch := func(tenant string) *flow { return &flow{field: "\n" + tenant, split: "\n", weight: 75, step: step} }
	critical := &flow{field: "critical\nx", split: "critical\n", weight: 25, step: step}
	tag := func(fl *flow) int64 { return th.fleet.tag(ln, fl, -1) }
	v := tag(batch("a"))
	if v < 0 {
		t.Fatal("no tag: the script failed")
	}
	// One tenant of batch: increments of step × 100/75.
	incA := int64(step * 100 / 75)
	if got := tag(batch("a")); got != v+incA {
		t.Errorf("batch a's second tag %d, want %d", got-v, incA)
	}
	// A new flow starts at virtual time: no waiter in the fleet's queue,
	// so the V the last tag read.
	if got := tag(critical); got != v {
		t.Errorf("critical's first tag %d after the first, want 0", got-v)
	}
	if got := tag(critical); got != v+step*100/25 {
		t.Errorf("critical's second tag %d after the first, want %d", got-v, step*100/25)
	}
	// A second tenant of batch splits the class's share: increments of
	// twice as much, for it (and for a from its next tag).
	if got := tag(batch("b")); got != v {
		t.Errorf("batch b's first tag %d, want 0", got-v)
	}
	if got := tag(batch("b")); got != v+2*incA {
		t.Errorf("batch b's second tag %d, want %d", got-v, 2*incA)
	}
	// A head in the fleet's queue far ahead moves virtual time there:
	// flows behind it are forgotten and start again at it.
	far := v + 1_000_000
	th.fleet.run(ln, "j", far, 0, th.fleet.seq.Add(1))
	if got := tag(batch("a")); got != far {
		t.Errorf("batch a's tag after virtual time passed it: %d, want %d", got-v, far-v)
	}
	if n := client.(redis.Cmdable).HLen(ctx, th.fleet.keys(ln)[5]).Val(); n != 2 {
		t.Errorf("the flows hash holds %d fields, want 2 (virtual time and batch a)", n)
	}
	// A flow with credit 2 (a class with a share): its calls are tagged
	// two increments earlier, from two before virtual time, its finish
	// tag growing by one increment per call.
	credited := &flow{field: "critical\ny", split: "critical\n", weight: 25, step: step, credit: 2}
	inc := int64(step * 100 / 25)
	for i, want := range []int64{-2 * inc, -inc, 0, inc, 2 * inc} {
		if got := tag(credited); got != far+want {
			t.Errorf("credited call %d tagged %d after virtual time, want %d", i, got-far, want)
		}
	}
}
