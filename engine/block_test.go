package engine

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/internal/redistest"
	"github.com/slidelimit/slidelimit/rules"
)

// blocked returns check c with a block of d.
func blocked(c Check, d time.Duration) Check {
	c.Block = d
	return c
}

// blockScenario runs ip:3/s; block:3s beside an unblocked user:100/min on
// e at the times of clk: the fourth request in a second is denied and
// blocks the IP for 3 s from that denial, though its 1 s window has room
// again after 1 s; attempts meanwhile are denied with the time left, count
// nowhere and do not extend the block; then the IP is admitted again.
func blockScenario(t *testing.T, e *Engine, clk *redistest.Clock) {
	t.Helper()
	ctx := context.Background()
	r := req(blocked(ip("1.2.3.4", win(3, time.Second)), 3*time.Second), user("u", win(100, time.Minute)))
	allow := func(at time.Duration) Decision {
		t.Helper()
		clk.Set(at)
		d, err := e.Allow(ctx, r)
		if err != nil && d.Source != "local" {
			t.Fatalf("at %v: %v", at, err)
		}
		return d
	}
	for i := range 3 {
		if d := allow(time.Duration(i) * 100 * ms); !d.Allowed || d.Blocked {
			t.Fatalf("request %d: allowed %v blocked %v, want admitted", i, d.Allowed, d.Blocked)
		}
	}
	d := allow(300 * ms)
	if d.Allowed || !d.Blocked || d.RetryAfter != 3*time.Second {
		t.Fatalf("4th request: allowed %v blocked %v retry %v; want denied and blocked for 3s", d.Allowed, d.Blocked, d.RetryAfter)
	}
	if d.Denied.Check != 0 || d.Denied.Remaining != 0 || d.Denied.Reset < 3*time.Second {
		t.Errorf("4th request: denied window %+v, want the IP's with remaining 0 and reset >= 3s", d.Denied)
	}
	// The 1 s window has room from 1.2 s on; the block holds until 3.3 s.
	for _, at := range []time.Duration{1500 * ms, 2 * time.Second, 3200 * ms} {
		d := allow(at)
		if d.Allowed || !d.Blocked || d.RetryAfter != 3300*ms-at {
			t.Fatalf("at %v: allowed %v blocked %v retry %v; want blocked with %v left (not extended)",
				at, d.Allowed, d.Blocked, d.RetryAfter, 3300*ms-at)
		}
		if d.Windows[0].Remaining != 0 {
			t.Errorf("at %v: blocked window remaining %d, want 0", at, d.Windows[0].Remaining)
		}
		// A block denied from the cache reports the other keys' last
		// known state, zero for a key not known: on a ring or cluster
		// the user's key, on another shard, was counted then rolled
		// back at each denial by Redis, and that rollback's
		// invalidation may reach the cache after a later answer (it
		// is applied when it arrives). Never 4: a blocked request
		// counts nowhere.
		uk := string(e.keyer.AppendKey(nil, "s", rules.User, "", "", "u"))
		if used := d.Windows[1].Used; used != 3 && (used != 0 || d.Source != "cache" || known(e, uk)) {
			t.Errorf("at %v: the user's window holds %d (source %v), want 3: a blocked request counts nowhere", at, used, d.Source)
		}
	}
	d = allow(3300 * ms)
	if !d.Allowed || d.Blocked || d.Windows[1].Used != 4 {
		t.Fatalf("at the block's end: allowed %v blocked %v user used %d; want admitted, user used 4", d.Allowed, d.Blocked, d.Windows[1].Used)
	}

	// Reset lifts a block.
	r2 := req(blocked(ip("5.6.7.8", win(1, time.Minute)), time.Hour))
	allow2 := func(at time.Duration) Decision {
		t.Helper()
		clk.Set(at)
		d, err := e.Allow(ctx, r2)
		if err != nil && d.Source != "local" {
			t.Fatalf("at %v: %v", at, err)
		}
		return d
	}
	allow2(4 * time.Second)
	if d := allow2(5 * time.Second); d.Allowed || !d.Blocked || d.RetryAfter != time.Hour {
		t.Fatalf("second IP: allowed %v blocked %v retry %v, want blocked for 1h", d.Allowed, d.Blocked, d.RetryAfter)
	}
	if err := e.resetSubject(ctx, "s", r2.Checks[0].Rule, "5.6.7.8"); err != nil && e.fail != rules.FailLocal {
		t.Fatal(err)
	}
	if d := allow2(6 * time.Second); !d.Allowed || d.Blocked {
		t.Fatalf("after Reset: allowed %v blocked %v, want admitted", d.Allowed, d.Blocked)
	}
	// A window that waits longer than the block says so: RetryAfter is
	// never early.
	r3 := req(blocked(ip("7.7.7.7", win(1, time.Hour)), time.Minute))
	for i, at := range []time.Duration{10 * time.Second, 11 * time.Second, 11500 * ms} {
		clk.Set(at)
		d, err := e.Allow(ctx, r3)
		if err != nil && d.Source != "local" {
			t.Fatal(err)
		}
		if i == 0 {
			continue
		}
		if d.Allowed || !d.Blocked || d.RetryAfter != time.Hour+10*time.Second-at {
			t.Fatalf("at %v: allowed %v blocked %v retry %v source %v; want blocked, retry %v (the hour window's wait)",
				at, d.Allowed, d.Blocked, d.RetryAfter, d.Source, time.Hour+10*time.Second-at)
		}
	}
	// A peek never starts a block.
	clk.Set(7 * time.Second)
	if d, err := e.peek(ctx, r2); err != nil && d.Source != "local" || d.Allowed || d.Blocked {
		t.Fatalf("peek of a full window: allowed %v blocked %v err %v, want denied, not blocked", d.Allowed, d.Blocked, err)
	}
	if d := allow2(8 * time.Second); d.Allowed || !d.Blocked || d.RetryAfter != time.Hour {
		t.Fatalf("allow after the peek: allowed %v blocked %v retry %v, want the block to start now, 1h", d.Allowed, d.Blocked, d.RetryAfter)
	}
}

// backend is a Redis, or a Redis that refuses connections with FailLocal,
// for tests that run on each.
type backend struct {
	name string
	c    Client
	opts []Option
	ttl  func(t *testing.T, prefix string) // checks TTLs at the test's end, or nil
}

// testBackends starts real Redis, miniredis, a 3-master cluster, a Ring of
// two servers and a refusing server (the fallback limiter) for t.
func testBackends(t *testing.T) []backend {
	t.Helper()
	_, rc := redistest.StartClient(t)
	_, mc := redistest.Mini(t)
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	down := redistest.RefusedAddr // nothing listens: every call is refused
	dc := redis.NewClient(&redis.Options{Addr: down, MaxRetries: -1})
	t.Cleanup(func() { dc.Close() })
	s1, c1 := redistest.StartClient(t)
	s2, c2 := redistest.StartClient(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": s1.Addr, "b": s2.Addr}})
	t.Cleanup(func() { ring.Close() })
	return []backend{
		{"ring", ring, nil, func(t *testing.T, prefix string) { afterTTLs(t, c1, prefix); afterTTLs(t, c2, prefix) }},
		{"redis", rc, nil, func(t *testing.T, prefix string) { afterTTLs(t, rc, prefix) }},
		{"miniredis", mc, nil, nil},
		{"cluster", cc, nil, func(t *testing.T, prefix string) { afterClusterTTLs(t, cl, prefix) }},
		{"local", dc, []Option{WithFailMode(rules.FailLocal)}, nil},
	}
}

// TestBlock runs blockScenario on real Redis, miniredis, a 3-master
// cluster and the fallback limiter, with and without cached denials.
func TestBlock(t *testing.T) {
	t.Parallel()
	for _, b := range testBackends(t) {
		for _, cached := range []bool{false, true} {
			t.Run(b.name+cacheName(cached), func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				if b.ttl != nil {
					b.ttl(t, prefix)
				}
				clk := redistest.NewClock()
				opts := append([]Option{WithKeyPrefix(prefix), WithClock(clk.Now), WithCachedDenials(cached)}, b.opts...)
				blockScenario(t, newEngine(t, b.c, opts...), clk)
			})
		}
	}
}

// TestBlockCached checks that a blocked subject costs no Redis command: the
// cache remembers the block's end, denies with the time left, and a Reset
// in another process lifts the block there too.
func TestBlockCached(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"redis", "cluster"} {
		t.Run(b, func(t *testing.T) {
			t.Parallel()
			prefix := redistest.Prefix(t)
			hook := &redistest.CommandCounter{}
			var c, other Client
			if b == "redis" {
				_, rc := redistest.StartClient(t)
				afterTTLs(t, rc, prefix)
				rc.AddHook(hook)
				c, other = rc, rc
			} else {
				cl := redistest.StartCluster(t)
				afterClusterTTLs(t, cl, prefix)
				cc := cl.Client(t)
				cc.AddHook(hook)
				c, other = cc, cl.Client(t)
			}
			e := newEngine(t, c, WithKeyPrefix(prefix))
			admin := newEngine(t, other, WithKeyPrefix(prefix))
			waitTrusted(t, e)
			ctx := context.Background()
			r := req(blocked(ip("9.9.9.9", win(1, time.Minute)), time.Hour), user("u", win(100, time.Minute)))
			mustAllow(t, e, r, true)
			d := mustAllow(t, e, r, false)
			if !d.Blocked || d.Source != "redis" {
				t.Fatalf("denial: blocked %v source %v, want blocked by Redis", d.Blocked, d.Source)
			}
			before := hook.Count()
			const n = 200
			for i := range n {
				d, err := e.Allow(ctx, r)
				if err != nil || d.Allowed || !d.Blocked || d.Source != "cache" {
					t.Fatalf("attempt %d: allowed %v blocked %v source %v err %v; want a cached block", i, d.Allowed, d.Blocked, d.Source, err)
				}
				if d.RetryAfter > time.Hour || d.RetryAfter < 59*time.Minute {
					t.Fatalf("attempt %d: retry %v, want the block's time left (about 1h)", i, d.RetryAfter)
				}
			}
			if got := hook.Count() - before; got != 0 {
				t.Errorf("%d Redis commands for %d attempts of a blocked subject, want 0", got, n)
			}
			// Another process sees the block in Redis.
			if d, err := admin.Allow(ctx, r); err != nil || d.Allowed || !d.Blocked || d.Source != "redis" {
				t.Fatalf("another engine: allowed %v blocked %v source %v err %v; want blocked by Redis", d.Allowed, d.Blocked, d.Source, err)
			}
			if err := admin.resetSubject(ctx, "s", r.Checks[0].Rule, "9.9.9.9"); err != nil {
				t.Fatal(err)
			}
			// The invalidation reaches e within its trust window.
			deadline := time.Now().Add(2 * time.Second)
			for {
				d, err := e.Allow(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("still denied (source %v) 2s after a Reset in another engine", d.Source)
				}
				time.Sleep(10 * ms)
			}
		})
	}
}

// TestBlockConcurrent decides many concurrent requests of one subject, so
// that batches share its key: exactly the limit is admitted, and once the
// first denial started the block, no later request is admitted.
func TestBlockConcurrent(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	afterTTLs(t, rc, prefix)
	e := newEngine(t, rc, WithKeyPrefix(prefix))
	r := req(blocked(ip("6.6.6.6", win(5, time.Hour)), time.Hour), user("u", win(1000, time.Hour)))
	const n = 200
	results := make(chan Decision, n)
	for range n {
		go func() {
			d, err := e.Allow(context.Background(), r)
			if err != nil {
				t.Error(err)
			}
			results <- d
		}()
	}
	admitted, blockedN := 0, 0
	for range n {
		d := <-results
		if d.Allowed {
			admitted++
		}
		if d.Blocked {
			blockedN++
		}
	}
	if admitted != 5 || blockedN != n-5 {
		t.Fatalf("%d admitted and %d blocked of %d, want 5 and %d", admitted, blockedN, n, n-5)
	}
	d, err := e.peek(context.Background(), r)
	if err != nil || !d.Blocked || d.Windows[1].Used != 5 {
		t.Fatalf("peek: blocked %v, user used %d, err %v; want blocked, 5", d.Blocked, d.Windows[1].Used, err)
	}
}

// TestBlockBesideSlots runs a block beside a check of only an in-flight
// window (user:1 concurrent; ip:2/h; block:1h): the IP's denial blocks the
// IP, the blocked answer reports the user's slot window without a block,
// and the slot the first request holds is not touched by the block.
func TestBlockBesideSlots(t *testing.T) {
	t.Parallel()
	_, rc := redistest.StartClient(t)
	prefix := redistest.Prefix(t)
	e := newEngine(t, rc, WithKeyPrefix(prefix))
	ctx := context.Background()
	slot := rules.Window{Limit: 1, Concurrent: true}
	r := req(user("u", slot), blocked(ip("7.7.7.7", win(2, time.Hour)), time.Hour))
	first, err := e.Allow(ctx, r)
	if err != nil || !first.Allowed {
		t.Fatalf("first: %+v, %v", first, err)
	}
	if err := e.release(ctx, r, first); err != nil {
		t.Fatal(err)
	}
	if d, err := e.Allow(ctx, r); err != nil || !d.Allowed {
		t.Fatalf("second: %+v, %v", d, err)
	} else if err := e.release(ctx, r, d); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // the third request starts the block; the others meet it
		d, err := e.Allow(ctx, r)
		if err != nil || d.Allowed || !d.Blocked || d.RetryAfter != time.Hour && i == 0 {
			t.Fatalf("request %d after the IP's limit: %+v, %v; want blocked", i+3, d, err)
		}
		if d.Windows[0].Used != 0 || d.Windows[0].Remaining != 1 {
			t.Errorf("request %d: slot window %+v, want 0 used, 1 free", i+3, d.Windows[0])
		}
	}
}

// known reports whether e's cache knows key's windows.
func known(e *Engine, key string) bool {
	_, ok := e.known.Get(key)
	return ok
}
